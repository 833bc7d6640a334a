// Fidelity against llama.cpp: for every golden model and prompt, the logits at every prompt
// position (one batched prefill) and, where recorded, the logits of the 32 greedy tokens fed
// one at a time through the KV cache (the decode path) stay within the model's tolerance_nmse.
// tests/fixtures ships a subset; the full ../shared/fixtures set runs when present.
#include <doctest/doctest.h>

#include <cstdio>

#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"

namespace {

using strata::test::golden_model;

void check_model(const golden_model& g, strata::rt::backend_kind backend = strata::rt::backend_kind::cpu,
                 int n_gpu_layers = -1) {
  CAPTURE(g.name);
  strata::rt::engine_options opt;
  opt.backend = backend;
  opt.n_gpu_layers = n_gpu_layers;
  opt.threads = 2;
  opt.n_ctx = 512;   // the fixtures were produced with n_ctx 512
  opt.n_batch = 256;
  auto model = strata::rt::model::load(g.path, opt);
  const std::size_t V = model->hparams().n_vocab;
  strata::rt::session s(*model);
  for (const auto& run : g.runs) {
    CAPTURE(run.prompt);
    std::vector<float> all;
    s.clear();
    s.prefill(run.ids, &all);
    const auto ref = strata::test::read_f32(run.logits);
    REQUIRE(ref.size() == run.ids.size() * V);
    const auto st = strata::test::compare_logits(all, ref, V);
    MESSAGE(g.name << " " << run.prompt << " prefill: nmse " << st.nmse << " (tolerance " << g.tolerance_nmse
                   << "), max_abs " << st.max_abs << ", top1 " << st.top1_agree << "/" << st.rows);
    CHECK(st.nmse <= g.tolerance_nmse);

    if (run.gen_logits.empty()) continue;
    const auto gref = strata::test::read_f32(run.gen_logits);
    std::vector<float> got;
    got.reserve(gref.size());
    for (std::size_t k = 0; k < run.greedy.size() && got.size() < gref.size(); ++k) {
      const auto l = s.decode(run.greedy[k]);
      got.insert(got.end(), l.begin(), l.end());
    }
    const auto gs = strata::test::compare_logits(got, gref, V);
    MESSAGE(g.name << " " << run.prompt << " decode: nmse " << gs.nmse << ", max_abs " << gs.max_abs << ", top1 "
                   << gs.top1_agree << "/" << gs.rows);
    CHECK(gs.nmse <= g.tolerance_nmse);
  }
}

}  // namespace

TEST_CASE("fidelity: shipped fixture models match llama.cpp logits (prefill and decode)") {
  const auto models = strata::test::local_golden();
  REQUIRE(!models.empty());
  for (const auto& g : models) check_model(g);
}

// The Vulkan backend runs the same suite on whatever device the loader offers (in CI: Mesa's
// lavapipe). Without a Vulkan build or device it says so and checks nothing.
bool vulkan_available() {
  if (!strata::rt::vulkan_compiled_in()) {
    MESSAGE("this build has no Vulkan backend: Vulkan fidelity skipped");
    return false;
  }
  if (strata::rt::vulkan_devices().empty()) {
    MESSAGE("no Vulkan device (install mesa-vulkan-drivers for lavapipe): Vulkan fidelity skipped");
    return false;
  }
  return true;
}

TEST_CASE("fidelity: Vulkan backend, shipped fixture models match llama.cpp logits (prefill and decode)") {
  if (!vulkan_available()) return;
  const auto models = strata::test::local_golden();
  REQUIRE(!models.empty());
  for (const auto& g : models) check_model(g, strata::rt::backend_kind::vulkan);
}

// -ngl 2: the embedding and layers 0-1 on the GPU, layers 2.. and the head on the CPU, the hidden
// state handed over every step (a dense and a MoE model).
TEST_CASE("fidelity: Vulkan/CPU layer split (-ngl 2) matches llama.cpp logits") {
  if (!vulkan_available()) return;
  int ran = 0;
  for (const auto& g : strata::test::local_golden())
    if (g.name == "qwen3-Q4_K_M" || g.name == "qwen3moe-Q4_K_M") {
      check_model(g, strata::rt::backend_kind::vulkan, 2);
      ++ran;
    }
  CHECK(ran == 2);
}

TEST_CASE("fidelity: Vulkan backend, full shared fixture set matches llama.cpp logits" * doctest::skip(true)) {
  // Run explicitly (--no-skip, or -tc='*Vulkan*full*'): ~25 models, minutes on lavapipe.
  if (!vulkan_available()) return;
  for (const auto& g : strata::test::shared_golden()) check_model(g, strata::rt::backend_kind::vulkan);
}

TEST_CASE("fidelity: full shared fixture set matches llama.cpp logits") {
  const auto models = strata::test::shared_golden();
  if (models.empty()) {
    MESSAGE("../shared/fixtures not present: full fidelity set skipped");
    return;
  }
  for (const auto& g : models) check_model(g);
}
