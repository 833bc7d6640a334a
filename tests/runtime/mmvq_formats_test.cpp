// The integer matvec's newer formats (Q5_K, Q4_0, IQ4_XS: their MMVQ units in shaders/quant/,
// on by default) against the f32 matvec (STRATA_VK_MMVQ_MORE=0) on the Vulkan backend: the
// logits of a prompt of 9-10 tokens (the matvec's multi-token steps) and 8 decoded tokens agree
// within the model's tolerance. The fidelity suite checks the default path against llama.cpp.
// Models: the shipped qwen3moe (its O projections are Q5_K); the shared set's llama Q5_K_M and
// llama / llama4 Q4_0 where present; no fixture is IQ4_XS, so the shipped llama and qwen3moe
// requantized to it (every matrix, the experts included).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/arch/all.hpp"
#include "strata/quant/ftype.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/runtime/quantize.hpp"
#include "support/fidelity.hpp"
#include "support/fixture_options.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/temp_model_dir.hpp"
#include "support/vulkan_here.hpp"

namespace fs = std::filesystem;

TEST_CASE("fidelity: Vulkan integer matvec of Q5_K, Q4_0 and IQ4_XS agrees with the f32 matvec (STRATA_VK_MMVQ_MORE=0)") {
  if (!strata::test::vulkan_here("the newer integer matvec formats")) return;
  const strata::test::temp_model_dir tmp("mmvq-formats");
  const fs::path& dir = tmp.path();
  std::vector<strata::test::golden_model> models;
  for (const auto& g : strata::test::local_golden()) {
    if (g.name == "qwen3moe-Q4_K_M") models.push_back(g);
    if (g.name != "qwen3moe-Q4_K_M" && g.name != "llama-Q4_K_M") continue;
    strata::rt::quantize_params qp;
    qp.input = g.path;
    qp.output = dir / (g.name + "-IQ4_XS.gguf");
    qp.ftype = strata::quant::ftype::mostly_iq4_xs;
    qp.allow_requantize = true;
    qp.pure = true;
    qp.threads = 2;
    strata::rt::quantize_model(qp);
    auto r = g;
    r.name = g.name + " as IQ4_XS";
    r.path = qp.output;
    models.push_back(r);
  }
  for (const auto& g : strata::test::shared_golden())
    if (g.name == "llama-Q5_K_M" || g.name == "llama-Q4_0" || g.name == "llama4-Q4_0") models.push_back(g);
  CHECK(models.size() >= 3);
  for (const auto& g : models) {
    CAPTURE(g.name);
    const auto run = std::find_if(g.runs.begin(), g.runs.end(), [](const auto& r) { return r.prompt == "short"; });
    REQUIRE(run != g.runs.end());
    std::vector<float> logits[2];
    for (const std::string_view on : {"1", "0"}) {
      CAPTURE(on);
      const strata::test::scoped_env env("STRATA_VK_MMVQ_MORE", on.data());
      auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
      opt.gpu_profile = true;
      const auto m = strata::rt::model::load(g.path, opt);
      logits[on[0] - '0'] = strata::test::prompt_and_decode_logits(*m, *run, 8);
      const auto prof = m->kernel_profile();
      const bool int8 = std::any_of(prof.begin(), prof.end(), [](const auto& k) {
        return k.label.starts_with("mmvq.Q5_K.") || k.label.starts_with("mmvq.Q4_0.") || k.label.starts_with("mmvq.IQ4_XS.");
      });
      CHECK(int8 == (on[0] == '1'));  // the newer formats' integer matvec ran, or none did
    }
    const double nmse = strata::test::compare_logits(logits[1], logits[0], logits[0].size()).nmse;
    MESSAGE(g.name << ": integer matvec against the f32 matvec, logits nmse " << nmse << " (tolerance " << g.tolerance_nmse << ")");
    CHECK(nmse <= g.tolerance_nmse);
  }
}
