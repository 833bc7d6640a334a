// Every GPU top-k in its lean form (the default, moe_topk.glsl TOPK_LEAN: each subgroup selects the k
// largest, the weights from the k selected logits alone) against the full form (STRATA_VK_TOPK_LEAN=0:
// every thread ranks, softmax over every expert renormalised over the k) on the qwen3moe fixture: decode's gate/up matvec ranks in its prologue, with the router's
// own dispatch and with its logits as the O projection's block parts (TOPK_PARTS). Both forms pick
// the same experts and weigh them alike to the last bits, but those bits move the prompt's and the
// decode steps' int8 activations (~7e-6 NMSE on lavapipe), so the logits agree within a tenth of
// the model's tolerance. The weights themselves are checked against float64 in tests/vulkan/moe_test.cpp
// (~6e-14 NMSE; left unnormalised, that case fails).
#include <doctest/doctest.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "strata/arch/all.hpp"
#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"
#include "support/fixture_options.hpp"
#include "support/kernel_labels.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/vulkan_here.hpp"

TEST_CASE("fidelity: Vulkan MoE decode with the lean top-k (weights from the k selected logits) agrees with the full top-k") {
  if (!strata::test::vulkan_here("lean top-k")) return;
  const auto models = strata::test::local_golden();
  const auto it = std::find_if(models.begin(), models.end(), [](const auto& m) { return m.name == "qwen3moe-Q4_K_M"; });
  REQUIRE(it != models.end());
  const auto& g = *it;
  for (const std::string_view parts : {"0", "1"}) {
    CAPTURE(parts);
    const strata::test::scoped_env router_parts("STRATA_VK_ROUTER_PARTS", parts.data());
    const strata::test::scoped_env no_product("STRATA_VK_ROUTER_PRODUCT", "0");  // it would take precedence over the parts
    std::vector<float> logits[2];
    for (const std::string_view lean : {"0", "1"}) {
      CAPTURE(lean);
      const strata::test::scoped_env env("STRATA_VK_TOPK_LEAN", lean.data());
      auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
      opt.gpu_profile = true;
      auto m = strata::rt::model::load(g.path, opt);
      logits[lean[0] - '0'] = strata::test::prompt_and_decode_logits(*m, g.runs.back(), 4);
      const auto prof = m->kernel_profile();
      CHECK(strata::test::ran_kernel_with(prof, {".TOPK_IN"}));  // the decode steps rank in the gate/up matvec
      CHECK(strata::test::ran_kernel_with(prof, {".TOPK_IN", ".TOPK_LEAN"}) == (lean[0] == '1'));
      CHECK(strata::test::ran_kernel_with(prof, {".TOPK_IN", ".TOPK_PARTS"}) == (parts[0] == '1'));
    }
    const double nmse = strata::test::compare_logits(logits[0], logits[1], logits[0].size()).nmse;
    MESSAGE("router parts " << parts << ": lean top-k against the full one, logits nmse " << nmse);
    CHECK(nmse <= g.tolerance_nmse / 10);
  }
}
