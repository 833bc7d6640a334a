// Decode steps past the short context run the split grouped attention (attention_dec.glsl, LANES).
// With STRATA_VK_HEAD_OPS_SPLIT=1 every split's workgroup runs attn_prep's head ops for its query
// heads and K row (q/k norms and RoPE of qwen3, RoPE of llama, Llama 4's chunked attention, its
// post-RoPE norm and temperature) and the split holding the token appends the K and V rows and
// scores them from shared memory; attn_prep's dispatch leaves the layer. The same float operations
// in the same order as attn_prep's: on lavapipe the logits equal those of the dispatch bit for bit;
// on a GPU the two agree within a tenth of the model's tolerance (its compiler may schedule the two
// kernels' operations apart). STRATA_VK_SHORT_CTX=64 with n_ctx 512: the long prompt's decode
// steps split over the cache.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/arch/all.hpp"
#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"
#include "support/fixture_options.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/vulkan_here.hpp"

TEST_CASE("fidelity: Vulkan split decode attention with attn_prep's head ops inside agrees with attn_prep's dispatch") {
  if (!strata::test::vulkan_here("split head ops")) return;
  const strata::test::scoped_env short_ctx("STRATA_VK_SHORT_CTX", "64");
  int ran = 0;
  for (const auto& g : strata::test::local_golden()) {
    if (g.name != "qwen3-Q4_K_M" && g.name != "llama-Q4_K_M" && g.name != "llama4-Q4_K_M") continue;
    CAPTURE(g.name);
    std::vector<float> logits[2];
    bool cpu_device = false;  // lavapipe
    for (const std::string_view on : {"1", "0"}) {
      CAPTURE(on);
      const strata::test::scoped_env env("STRATA_VK_HEAD_OPS_SPLIT", on.data());
      auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
      opt.gpu_profile = true;
      auto m = strata::rt::model::load(g.path, opt);
      cpu_device = m->backend_description().find("llvmpipe") != std::string::npos;
      logits[on[0] - '0'] = strata::test::prompt_and_decode_logits(*m, g.runs.back(), 8);
      const auto prof = m->kernel_profile();
      const auto has = [&](std::string_view extra) {  // the split grouped kernel, with `extra` in its label
        return std::any_of(prof.begin(), prof.end(), [&](const auto& k) {
          return k.label.starts_with("attention_dec.") && k.label.find(".SPLIT") != std::string::npos &&
                 k.label.find(extra) != std::string::npos;
        });
      };
      CHECK(has(".HEAD_OPS=") == (on[0] == '1'));
      CHECK(has(""));  // the split kernel ran in both
    }
    const double nmse = strata::test::compare_logits(logits[1], logits[0], logits[0].size()).nmse;
    MESSAGE(g.name << ": split HEAD_OPS against attn_prep, logits nmse " << nmse);
    if (cpu_device) CHECK(logits[0] == logits[1]);
    CHECK(nmse <= g.tolerance_nmse / 10);
    ++ran;
  }
  CHECK(ran == 3);
}
