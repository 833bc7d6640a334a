// Decode's K and V projections as one integer matvec dispatch (mmvq.glsl PAIR_OUT,
// STRATA_VK_MMVQ_PAIR=1; off by default until timed on a GPU, a dispatch each): a lane group computes row r of both matrices
// from one bound range, with the sums and the 1 / rms of the one-dispatch form, so the logits are
// those of the two dispatches bit for bit. On the qwen3 fixture requantized to Q8_0 (K and V of
// one format and shape in every layer, adjacent in the file) the pair runs in every decode step;
// the pair adds no dependency level (K and V never waited on each other).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "strata/quant/ftype.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/runtime/quantize.hpp"
#include "support/fixture_options.hpp"
#include "support/kernel_labels.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/shipped_fixture.hpp"
#include "support/temp_model_dir.hpp"
#include "support/vulkan_here.hpp"

TEST_CASE("fidelity: Vulkan decode with K and V as one matvec dispatch gives the two dispatches' logits bit for bit") {
  if (!strata::test::vulkan_here("K/V pair")) return;
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  const strata::test::temp_model_dir dir("mmvq-pair");
  strata::rt::quantize_params qp;
  qp.input = g.path;
  qp.output = dir.path() / "Q8_0.gguf";
  qp.ftype = strata::quant::ftype::mostly_q8_0;
  qp.allow_requantize = true;
  qp.threads = 2;
  strata::rt::quantize_model(qp);
  std::vector<float> logits[2];
  std::uint32_t barriers[2] = {};
  for (const char* on : {"0", "1"}) {
    CAPTURE(on);
    const strata::test::scoped_env env("STRATA_VK_MMVQ_PAIR", on);
    const int v = on[0] - '0';
    {
      auto m = strata::rt::model::load(qp.output, strata::test::fixture_options(strata::rt::backend_kind::vulkan));
      logits[v] = strata::test::prompt_and_decode_logits(*m, g.runs.back(), 8);
      barriers[v] = m->step_recordings().last_barriers;  // the decode step's, the last recorded
    }
    auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
    opt.gpu_profile = true;
    auto m = strata::rt::model::load(qp.output, opt);
    (void)strata::test::prompt_and_decode_logits(*m, g.runs.back(), 2);
    const auto prof = m->kernel_profile();
    const auto pair = std::find_if(prof.begin(), prof.end(), [](const auto& k) { return k.label.find(".PAIR_OUT") != std::string::npos; });
    REQUIRE((pair != prof.end()) == (v == 1));
    if (pair != prof.end()) {
      MESSAGE("pair kernel " << pair->label << ", " << pair->calls << " calls");
      CHECK(pair->label.find("mmvq.Q8_0") == 0);
      CHECK(pair->calls >= m->hparams().n_layer);  // every layer of the decode step (the profiled run's two)
    }
  }
  CHECK(barriers[0] > 0);
  CHECK(barriers[1] == barriers[0]);
  REQUIRE(logits[0].size() == logits[1].size());
  CHECK(logits[1] == logits[0]);
}
