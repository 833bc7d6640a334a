// Level chains (STRATA_VK_CHAIN=1|2, runtime/vulkan/commands.cpp set_chain, mmvq.glsl CHAIN): a
// decode step's one-token dense matvec that follows another alone in its level waits for it on a
// device counter instead of a barrier. The kernels and their sums are the barrier form's, so the
// logits must be too, bit for bit, and the step must record fewer barriers: in every layer the
// gate/up matvec after the O projection, the down matvec after gate/up and the next layer's Q/K/V
// after down chain (lavapipe runs dispatches one after another, so here the waits find their
// producer done; the race itself is what the GPU timings exercise).
#include <doctest/doctest.h>

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

struct chain_run {
  std::vector<float> logits;
  std::uint32_t barriers = 0;  // the decode step's, the last recorded
};

chain_run run_chain(const std::filesystem::path& file, const strata::test::golden_run& run, const char* chain) {
  const strata::test::scoped_env c("STRATA_VK_CHAIN", chain);
  auto m = strata::rt::model::load(file, strata::test::fixture_options(strata::rt::backend_kind::vulkan));
  chain_run r;
  r.logits = strata::test::prompt_and_decode_logits(*m, run, 8);
  r.barriers = m->step_recordings().last_barriers;
  return r;
}

}  // namespace

TEST_CASE("fidelity: Vulkan decode with level chains between its matvecs gives the barriers' logits bit for bit") {
  if (!strata::test::vulkan_here("level chains")) return;
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  const auto& run = g.runs.back();
  const std::uint32_t layers = [&] {
    auto m = strata::rt::model::load(g.path, strata::test::fixture_options(strata::rt::backend_kind::cpu));
    return m->hparams().n_layer;
  }();
  // chained: the levels the chains must take out of the decode step at least
  const auto check = [&](const std::filesystem::path& file, const std::string& name, std::uint32_t chained) {
    const chain_run off = run_chain(file, run, "0");
    CHECK(off.barriers > 0);
    for (const char* form : {"1", "2"}) {  // the input read `coherent`, or staged in shared memory
      const chain_run on = run_chain(file, run, form);
      MESSAGE(name << ": decode step barriers " << off.barriers << " without chains, " << on.barriers << " with chains "
                   << std::string(form));
      CHECK(on.barriers + chained <= off.barriers);
      REQUIRE(on.logits.size() == off.logits.size());
      CHECK(on.logits == off.logits);
    }
  };
  SUBCASE("the qwen3 fixture requantized to Q8_0") {
    const strata::test::temp_model_dir dir("level-chain");
    check(dir.as_q8_0(g.path), "Q8_0", 3 * layers - 1);  // gate/up, down; Q/K/V after the first layer
  }
  // The fixture's Q4_K matrices are too short for NORM_OUT's workgroups: a quantize dispatch
  // follows O and down, and the Q, K and V matvecs of the layers with a Q6_K one run apart, each
  // waiting for the down matvec beside the others.
  SUBCASE("the shipped Q4_K_M file (Q4_K and Q6_K matvecs in one chain)") { check(g.path, "Q4_K_M", layers); }
}
