// The expert cache's router-driven prefetch (runtime/vulkan/expert_cache.cpp): each GPU-cached
// block after the first is predicted from the block before, and the predicted experts are
// uploaded into its slots ahead of its step. Placement never changes the math, so the logits
// with prefetch equal those without bit for bit (the same kernels read the same weights from
// other slots), on qwen3moe (top-2 of 8, every block MoE, 2-token prompt steps: every step is
// predicted) and llama4 (top-1 of 4, MoE on blocks 1 and 3, the prompt in one step: only decode
// steps are predicted). The counters must add up: experts used or evicted after a prefetch are
// among those prefetched, and a prediction's recall is a share of the routed experts.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"
#include "support/fixture_options.hpp"
#include "support/sanitized_build.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/shipped_fixture.hpp"
#include "support/vulkan_here.hpp"

TEST_CASE("expert cache: router-driven prefetch leaves the logits bit for bit and counts what it uploads") {
  if (!strata::test::vulkan_here("expert prefetch")) return;
  struct cached_case {
    const char* model;
    std::uint32_t slots, n_batch, predictors;
  };
  for (const cached_case& c : {cached_case{"qwen3moe-Q4_K_M", 4, 2, 3}, cached_case{"llama4-Q4_K_M", 2, 256, 1}}) {
    // Under the sanitizers qwen3moe alone: every step predicted, by three predictors, in 2-token
    // prompt steps and decode (llama4 predicts decode steps only, with one).
    if (strata::test::sanitized_build() && c.predictors == 1) continue;
    CAPTURE(c.model);
    const auto& g = strata::test::shipped_fixture(c.model);
    std::vector<float> logits[2];
    strata::rt::model::expert_cache_counters st[2];
    for (int prefetch = 0; prefetch < 2; ++prefetch) {
      CAPTURE(prefetch);
      const strata::test::scoped_env env("STRATA_VK_EXPERT_PREFETCH", prefetch ? "1" : "0");
      const strata::test::scoped_env split("STRATA_VK_CACHE_LOOKUP", "0");  // the form that splits, where prefetch applies
      auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
      opt.expert_cache = c.slots;
      opt.expert_cpu_misses = false;  // the split form's prefetch without its CPU misses
      opt.n_batch = c.n_batch;
      auto m = strata::rt::model::load(g.path, opt);
      for (const auto& run : g.runs) {
        const auto l = strata::test::prompt_and_decode_logits(*m, run, 12);
        logits[prefetch].insert(logits[prefetch].end(), l.begin(), l.end());
      }
      st[prefetch] = m->expert_cache();
      if (prefetch) CHECK(m->startup_report().find("prefetched from the block before") != std::string::npos);
    }
    CHECK(logits[0] == logits[1]);
    CHECK(st[0].predictors == 0);
    CHECK(st[0].prefetched == 0);
    CHECK(st[0].routed_with_prediction == 0);
    const auto& p = st[1];
    MESSAGE(std::string(c.model) << " --expert-cache " << c.slots << ": prefetch recall " << p.prefetch_recall() << " ("
                    << p.predicted_routed << "/" << p.routed_with_prediction << "), " << p.prefetched << " experts uploaded ahead, "
                    << p.prefetch_used << " used, " << p.prefetch_wasted << " evicted unused; hit rate " << p.hit_rate()
                    << " (without prefetch " << st[0].hit_rate() << ")");
    CHECK(p.predictors == c.predictors);
    CHECK(p.routed_with_prediction > 0);
    CHECK(p.predicted_routed <= p.routed_with_prediction);
    // The predictor must beat chance (k of E) by a margin: a wrong layout of P or of its input
    // (strides, the norm ratio) ranks at chance. qwen3moe measured 0.65 (chance 0.25); llama4's
    // 36 routings of top-1 of 4 are too few to tell (0.31).
    if (c.predictors == 3) CHECK(p.prefetch_recall() > 0.45);
    CHECK(p.prefetched > 0);
    CHECK(p.prefetch_used + p.prefetch_wasted <= p.prefetched);
    CHECK(p.prefetch_bytes > 0);
    CHECK(p.prefetch_bytes <= p.bytes_uploaded);
    // Prefetch turns misses into hits and moves their uploads ahead; the step's routing is the same.
    CHECK(p.hits + p.misses == st[0].hits + st[0].misses);
    CHECK(p.gpu_blocks == st[0].gpu_blocks);
    CHECK(p.cpu_blocks == st[0].cpu_blocks);
  }
}
