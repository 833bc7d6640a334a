// Decode's MoE router as per-block parts of the O projection (STRATA_VK_ROUTER_PARTS=1, mmvq.glsl
// ROUTER_PARTS, moe_topk.glsl TOPK_PARTS) against the router's own dispatch, on the qwen3moe
// fixture with its O projection requantized to a format with an int8 unit, once per form:
// Q8_0 (the projection owns whole 32-row blocks: NORM_OUT writes the parts) and Q4_K (256 rows:
// it cannot, so its block tails add the residual and write the norm's half and the parts). The
// router's sums run in another order (per block, then over the blocks, the 1 / rms last), so the
// logits agree within a tenth of the model's tolerance, not bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/arch/all.hpp"
#include "strata/gguf/type_id.hpp"
#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"
#include "support/fixture_options.hpp"
#include "support/kernel_labels.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/shipped_fixture.hpp"
#include "support/temp_model_dir.hpp"
#include "support/vulkan_here.hpp"

namespace fs = std::filesystem;

TEST_CASE("fidelity: Vulkan MoE decode with the router's logits as the O projection's block parts agrees with the router's dispatch") {
  if (!strata::test::vulkan_here("router parts")) return;
  const auto& g = strata::test::shipped_fixture("qwen3moe-Q4_K_M");
  const strata::test::temp_model_dir dir("router-parts");
  struct form {
    strata::gguf::type_id o_type;
    std::string_view label;  // in the O projection's kernel label, next to ROUTER_PARTS when the parts are on
  };
  for (const form f : {form{strata::gguf::type_id::q8_0, ".ADD_RESIDUAL.NORM_OUT"},
                      form{strata::gguf::type_id::q4_k, ".MOE_BLOCK_TAIL"}}) {
    CAPTURE(f.label);
    const fs::path model = dir.with_attn_output(g.path, f.o_type);
    std::vector<float> logits[2];
    for (const std::string_view on : {"1", "0"}) {
      CAPTURE(on);
      const strata::test::scoped_env env("STRATA_VK_ROUTER_PARTS", on.data());
      const strata::test::scoped_env no_product("STRATA_VK_ROUTER_PRODUCT", "0");  // it would take precedence
      auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
      opt.gpu_profile = true;
      auto m = strata::rt::model::load(model, opt);
      logits[on[0] - '0'] = strata::test::prompt_and_decode_logits(*m, g.runs.back(), 8);
      const auto prof = m->kernel_profile();
      const auto has = [&](std::initializer_list<std::string_view> parts) { return strata::test::ran_kernel_with(prof, parts); };
      CHECK(has({".TOPK_PARTS"}) == (on[0] == '1'));
      CHECK(has({f.label, ".ROUTER_PARTS="}) == (on[0] == '1'));  // the form's O projection writes the parts
      CHECK(has({".ROUTER_PARTS="}) == (on[0] == '1'));
      CHECK(has({"matvec.F32"}) == (on[0] == '0'));               // the router's own dispatch
    }
    const double nmse = strata::test::compare_logits(logits[1], logits[0], logits[0].size()).nmse;
    MESSAGE("O projection " << strata::gguf::name_of(f.o_type) << ": router parts against the router's dispatch, logits nmse " << nmse);
    CHECK(nmse <= g.tolerance_nmse / 10);
  }
}
