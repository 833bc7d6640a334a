// Decode's one-token matvecs of one input joined into one integer matvec dispatch
// (runtime/vulkan/mmvq_joined.cpp; the stack on by default, the pair off: it lost on the H100):
// - the K/V pair (mmvq.glsl PAIR_OUT, STRATA_VK_MMVQ_PAIR=1): a lane group computes row r of both
//   matrices from one bound range;
// - the Q/K/V stack (mmvq.glsl STACK_OUT, STRATA_VK_MMVQ_STACK=1): one matvec over the three
//   matrices' rows stacked, each workgroup inside one matrix.
// Either way every row's sum is its own dispatch's (same lanes a row, same order, the 1 / rms of
// the one-dispatch form), so the logits are the separate dispatches' bit for bit, and the join adds
// no dependency level (the projections never waited on each other). On the qwen3 fixture
// requantized to Q8_0 (Q, K and V of one format in every layer, K before Q in the file: the stack
// orders its segments by offset) both run in every decode step; the shipped Q4_K_M file stacks
// where its layers allow.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "support/fixture_options.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/shipped_fixture.hpp"
#include "support/temp_model_dir.hpp"
#include "support/vulkan_here.hpp"

namespace {

struct joined_run {
  std::vector<float> logits;
  std::uint32_t barriers = 0;   // the decode step's, the last recorded
  std::uint32_t pair_calls = 0, stack_calls = 0;  // profiled: a prompt and two decode steps
  std::string stack_label;  // every stack kernel's
  bool stack_rms_in = false;  // a stack read the norm's codes and sums of squares (RMS_IN)
};

joined_run run_joined(const std::filesystem::path& file, const strata::test::golden_run& run, const char* pair, const char* stack) {
  const strata::test::scoped_env p("STRATA_VK_MMVQ_PAIR", pair), s("STRATA_VK_MMVQ_STACK", stack);
  joined_run r;
  {
    auto m = strata::rt::model::load(file, strata::test::fixture_options(strata::rt::backend_kind::vulkan));
    r.logits = strata::test::prompt_and_decode_logits(*m, run, 8);
    r.barriers = m->step_recordings().last_barriers;
  }
  auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
  opt.gpu_profile = true;
  auto m = strata::rt::model::load(file, opt);
  (void)strata::test::prompt_and_decode_logits(*m, run, 2);
  for (const auto& k : m->kernel_profile()) {
    if (k.label.find(".PAIR_OUT") != std::string::npos) r.pair_calls += k.calls;
    if (k.label.find(".STACK_OUT") != std::string::npos) {
      r.stack_calls += k.calls;
      r.stack_label += (r.stack_label.empty() ? "" : "; ") + k.label;
      r.stack_rms_in |= k.label.find(".RMS_IN") != std::string::npos;
    }
  }
  return r;
}

}  // namespace

TEST_CASE("fidelity: Vulkan decode with K and V as one matvec dispatch, or Q, K and V stacked, gives the separate dispatches' logits bit for bit") {
  if (!strata::test::vulkan_here("joined matvecs")) return;
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  const strata::test::temp_model_dir dir("mmvq-joined");
  const auto q8 = dir.as_q8_0(g.path);
  const auto& run = g.runs.back();
  const std::uint32_t layers = [&] {
    auto m = strata::rt::model::load(q8, strata::test::fixture_options(strata::rt::backend_kind::cpu));
    return m->hparams().n_layer;
  }();

  const joined_run none = run_joined(q8, run, "0", "0");
  CHECK(none.pair_calls == 0);
  CHECK(none.stack_calls == 0);
  CHECK(none.barriers > 0);
  SUBCASE("the K/V pair") {
    const joined_run pair = run_joined(q8, run, "1", "0");
    CHECK(pair.pair_calls >= layers);  // every layer of the profiled run's two decode steps
    CHECK(pair.stack_calls == 0);
    CHECK(pair.barriers == none.barriers);
    REQUIRE(pair.logits.size() == none.logits.size());
    CHECK(pair.logits == none.logits);
  }
  SUBCASE("the Q/K/V stack, taken before the pair") {
    const joined_run stack = run_joined(q8, run, "1", "1");
    MESSAGE("stack kernel " << stack.stack_label << ", " << stack.stack_calls << " calls");
    CHECK(stack.stack_label.find("mmvq.Q8_0") == 0);
    CHECK(stack.stack_calls >= layers);
    CHECK(stack.stack_rms_in);  // the layers after the first read the down matvec's NORM_OUT
    CHECK(stack.pair_calls == 0);
    CHECK(stack.barriers == none.barriers);
    REQUIRE(stack.logits.size() == none.logits.size());
    CHECK(stack.logits == none.logits);
  }
  SUBCASE("the shipped Q4_K_M file: stacks where a layer's Q, K and V share a format") {
    const joined_run plain = run_joined(g.path, run, "0", "0");
    const joined_run stack = run_joined(g.path, run, "0", "1");
    MESSAGE("Q4_K_M stack kernel " << stack.stack_label << ", " << stack.stack_calls << " calls");
    CHECK(stack.stack_calls > 0);
    CHECK(stack.barriers == plain.barriers);
    REQUIRE(stack.logits.size() == plain.logits.size());
    CHECK(stack.logits == plain.logits);
  }
}
