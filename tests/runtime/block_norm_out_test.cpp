// One-token decode with the next norm's first half written by a projection's block tails
// (STRATA_VK_BLOCK_NORM_OUT=1: mmvq.glsl MOE_BLOCK_TAIL with k = 1 for a residual projection that
// cannot own whole 32-row blocks) against the norm's own quantize dispatch, on the dense fixtures,
// whose Q4_K O projections (256 rows) take the tails. The codes are of x times the norm's weight,
// the 1 / rms applied by the reading matvec (RMS_IN), as NORM_OUT's, so the logits agree within a
// tenth of the tolerance (qwen3 ~2.6e-6 NMSE on lavapipe), and the decode step loses a dependency
// level for every such projection (each O projection; the Q4_K down projections too, the Q6_K
// ones already fuse).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"
#include "support/fixture_options.hpp"
#include "support/kernel_labels.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/shipped_fixture.hpp"
#include "support/vulkan_here.hpp"

TEST_CASE("fidelity: Vulkan dense decode with the next norm from the projections' block tails agrees with the norm's dispatch") {
  if (!strata::test::vulkan_here("block-tail norm")) return;
  for (const std::string_view name : {"qwen3-Q4_K_M", "llama-Q4_K_M"}) {
    CAPTURE(name);
    const auto& g = strata::test::shipped_fixture(name);
    std::vector<float> logits[2];
    std::uint32_t barriers[2] = {}, layers = 0;
    for (const char* on : {"0", "1"}) {
      const strata::test::scoped_env env("STRATA_VK_BLOCK_NORM_OUT", on);
      const strata::test::scoped_env no_tail("STRATA_VK_TAIL", "0");  // the last workgroup would take the norm first
      const strata::test::scoped_env shapes("STRATA_VK_MMVQ_SHAPE", nullptr);  // a forced shape may own whole blocks
      const int v = on[0] - '0';
      {
        auto m = strata::rt::model::load(g.path, strata::test::fixture_options(strata::rt::backend_kind::vulkan));
        logits[v] = strata::test::prompt_and_decode_logits(*m, g.runs.back(), 8);
        barriers[v] = m->step_recordings().last_barriers;  // the decode step's, the last recorded
        layers = m->hparams().n_layer;
      }
      auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
      opt.gpu_profile = true;
      auto m = strata::rt::model::load(g.path, opt);
      (void)strata::test::prompt_and_decode_logits(*m, g.runs.back(), 2);
      const auto prof = m->kernel_profile();
      // The projection's block tails: MOE_BLOCK_TAIL without an expert's ids.
      const bool tails = std::any_of(prof.begin(), prof.end(), [](const auto& k) {
        return k.label.find("MOE_BLOCK_TAIL") != std::string::npos && k.label.find("MOE_IDS") == std::string::npos;
      });
      CHECK(tails == (v == 1));
    }
    MESSAGE(name << ": decode step barriers " << barriers[0] << " with the norm's dispatch, " << barriers[1] << " with block tails");
    CHECK(barriers[0] > 0);
    CHECK(barriers[1] + layers <= barriers[0]);  // at least every O projection's level
    const double nmse = strata::test::compare_logits(logits[0], logits[1], logits[0].size()).nmse;
    MESSAGE(name << ": block-tail norm against the norm's dispatch, logits nmse " << nmse);
    CHECK(nmse <= g.tolerance_nmse / 10);
  }
}
