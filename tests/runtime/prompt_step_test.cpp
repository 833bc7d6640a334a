// The prompt step the engine takes when -b is not given (placement.hpp prompt_step_tokens):
// 2,048 tokens only where the model runs whole on a real GPU with an uncompressed KV cache and
// room for the larger step; 512 everywhere else; an explicit -b as given.
#include <doctest/doctest.h>

#include "strata/runtime/device_memory.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/runtime/placement.hpp"
#include "support/fixture_placement.hpp"
#include "support/shipped_fixture.hpp"

namespace prompt_step_case {

bool real_gpu() {
  const auto g = strata::rt::gpu_memory(-1);
  return g && !g->is_cpu;
}

}  // namespace prompt_step_case

TEST_CASE("prompt step: the long step only when every condition holds") {
  using strata::rt::choose_prompt_step;
  using strata::rt::long_prompt_step;
  using strata::rt::prompt_step_facts;
  using strata::rt::short_prompt_step;
  const prompt_step_facts all{true, true, true, 10u << 20, 10u << 20};  // needs exactly the budget
  CHECK(choose_prompt_step(all) == long_prompt_step);
  auto f = all;
  f.real_gpu = false;
  CHECK(choose_prompt_step(f) == short_prompt_step);
  f = all;
  f.plain_kv = false;
  CHECK(choose_prompt_step(f) == short_prompt_step);
  f = all;
  f.whole_on_gpu = false;
  CHECK(choose_prompt_step(f) == short_prompt_step);
  f = all;
  f.long_step_bytes = f.budget + 1;
  CHECK(choose_prompt_step(f) == short_prompt_step);
  CHECK(choose_prompt_step(prompt_step_facts{}) == short_prompt_step);
}

TEST_CASE("prompt step: -b as given, the CPU and compressed KV take the short step") {
  using namespace prompt_step_case;
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  strata::rt::engine_options opt;
  opt.threads = 2;
  opt.n_batch = 96;
  CHECK(strata::test::fixture_prompt_step(g, opt, false) == 96);
  CHECK(strata::test::fixture_prompt_step(g, opt, true) == 96);
  opt.n_batch = 0;
  CHECK(strata::test::fixture_prompt_step(g, opt, false) == strata::rt::short_prompt_step);
  opt.type_k = strata::kv::kv_type::tq3;  // its f16 window ring grows with the step
  CHECK(strata::test::fixture_prompt_step(g, opt, true) == strata::rt::short_prompt_step);
  opt.type_k = strata::kv::kv_type::f16;
  opt.type_v = strata::kv::kv_type::q8_0;
  CHECK(strata::test::fixture_prompt_step(g, opt, true) == strata::rt::short_prompt_step);

  // The loaded model reports the step it took.
  opt.type_v = strata::kv::kv_type::f16;
  const auto m = strata::rt::model::load(g.path, opt);
  CHECK(m->options().n_batch == strata::rt::short_prompt_step);
}

TEST_CASE("prompt step: the Vulkan backend's choice follows the device") {
  using namespace prompt_step_case;
  if (!strata::rt::vulkan_compiled_in() || !strata::rt::gpu_memory(-1)) {
    MESSAGE("no Vulkan device: skipped");
    return;
  }
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  strata::rt::engine_options opt;
  opt.backend = strata::rt::backend_kind::vulkan;
  opt.threads = 2;
  opt.n_ctx = 256;
  // lavapipe's memory is the host's: the short step. A real GPU holds this small model's long
  // step many times over.
  const std::uint32_t want = real_gpu() ? strata::rt::long_prompt_step : strata::rt::short_prompt_step;
  CHECK(strata::test::fixture_prompt_step(g, opt, true) == want);
  // Only part of the model on the GPU: the short step.
  opt.n_gpu_layers = 1;
  CHECK(strata::test::fixture_prompt_step(g, opt, true) == strata::rt::short_prompt_step);
  // A --gpu-budget between what the short and the long step need: the short step.
  opt.n_gpu_layers = -1;
  const auto need = [&](std::uint32_t batch) {
    auto o = opt;
    o.n_batch = batch;
    const auto in = strata::test::fixture_placement(g, o, true);
    const auto l = strata::rt::choose_layout(in, o, true);
    const auto p = strata::tiers::layout_plan(in.demand, l, in.plan.links, ~0ull >> 2, batch);
    return p.gpu_weights + p.gpu_kv + p.gpu_ring + in.demand.scratch_bytes;
  };
  const std::uint64_t short_need = need(strata::rt::short_prompt_step), long_need = need(strata::rt::long_prompt_step);
  REQUIRE(long_need > short_need);
  opt.gpu_budget = short_need + (long_need - short_need) / 2;
  REQUIRE(strata::rt::engine_gpu_budget(opt.gpu_budget) == opt.gpu_budget);  // no driver reserve at this size
  CHECK(strata::test::fixture_prompt_step(g, opt, true) == strata::rt::short_prompt_step);
  opt.gpu_budget = long_need;
  CHECK(strata::test::fixture_prompt_step(g, opt, true) == want);
}
