// f16 copies of the weight matrices for prompt steps (runtime/vulkan/f16_copies.cpp, --f16-weights):
// the prompt GEMMs read a copy expanded once at load instead of the f16 scratch expanded every
// step. The copy is expanded by the scratch's own kernel, so a prompt step through the copies gives
// the scratch's logits bit for bit (STRATA_VK_MM3_SCRATCH_MIN=64 sends the fixture's 256-token step
// through the scratch, where it would otherwise expand Q4_K tiles in place). Only devices with
// cooperative matrices run the tensor-core GEMM (the H100; lavapipe has none, and makes no copies).
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "support/fixture_options.hpp"
#include "support/scoped_env.hpp"
#include "support/shipped_fixture.hpp"
#include "support/vulkan_here.hpp"

namespace {

struct copies_run {
  std::vector<float> logits;  // every prompt position's, then two decode steps'
  std::string startup;
  std::uint64_t dequant_calls = 0;  // profiled: the f16 scratch's expansions
};

copies_run run_prompt(const std::filesystem::path& file, const std::vector<std::int32_t>& prompt,
                      const std::vector<std::int32_t>& next, std::optional<bool> copies) {
  copies_run r;
  auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
  opt.f16_weights = copies;
  opt.gpu_profile = true;
  auto m = strata::rt::model::load(file, opt);
  r.startup = m->startup_report();
  strata::rt::session s(*m);
  s.prefill(prompt, &r.logits);
  for (const std::int32_t t : next) {
    const auto l = s.decode(t);
    r.logits.insert(r.logits.end(), l.begin(), l.end());
  }
  for (const auto& k : m->kernel_profile())
    if (k.label.starts_with("dequant_f16")) r.dequant_calls += k.calls;
  return r;
}

}  // namespace

TEST_CASE("fidelity: Vulkan prompt steps reading f16 weight copies give the f16 scratch's logits bit for bit") {
  if (!strata::test::vulkan_here("f16 weight copies")) return;
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  const auto& run = g.runs.back();
  std::vector<std::int32_t> prompt;  // one 256-token step (fixture_options' batch): the tensor-core GEMMs
  while (prompt.size() < 256) prompt.push_back(run.ids[prompt.size() % run.ids.size()]);
  const std::vector<std::int32_t> next(run.greedy.begin(), run.greedy.begin() + 2);
  const strata::test::scoped_env scratch("STRATA_VK_MM3_SCRATCH_MIN", "64");
  // 128 KiB slots: the fixture's 512-row gate/up pair in four 128-row parts either way, so each part's
  // first row (row0, the binding's offset) is checked, not only the first part's.
  const strata::test::scoped_env slots("STRATA_VK_SCRATCH_SLOT_KB", "128");

  const copies_run off = run_prompt(g.path, prompt, next, false);
  CHECK(off.startup.find("f16 copies") == std::string::npos);
  const copies_run on = run_prompt(g.path, prompt, next, true);
  REQUIRE(on.logits.size() == off.logits.size());
  if (on.startup.find("f16 copies") == std::string::npos) {
    MESSAGE("no f16 copies made on this device (no cooperative matrices, or no memory left for them)");
    CHECK(on.logits == off.logits);
    return;
  }
  MESSAGE(on.startup);
  // Every candidate copied ("f16 copies of N of N"), so only the output head (not a layer matrix) expands.
  const auto at = on.startup.find("f16 copies of ");
  unsigned copied = 0, candidates = 0;
  REQUIRE(std::sscanf(on.startup.c_str() + at, "f16 copies of %u of %u", &copied, &candidates) == 2);
  CHECK(copied > 0);
  CHECK(copied == candidates);
  CHECK(off.dequant_calls > 0);
  CHECK(on.dequant_calls < off.dequant_calls);
  CHECK(on.logits == off.logits);
  // Auto makes none under a GPU budget, whose placement is planned to the byte.
  auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
  opt.f16_weights.reset();  // auto
  opt.gpu_budget = 1ull << 30;
  CHECK(strata::rt::model::load(g.path, opt)->startup_report().find("f16 copies") == std::string::npos);
}

TEST_CASE("f16 weight copies: a bad STRATA_VK_F16_COPIES is an error naming it") {
  if (!strata::test::vulkan_here("f16 weight copies")) return;
  const strata::test::scoped_env bad("STRATA_VK_F16_COPIES", "yes");
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  CHECK_THROWS_WITH(strata::rt::model::load(g.path, strata::test::fixture_options(strata::rt::backend_kind::vulkan)),
                    doctest::Contains("STRATA_VK_F16_COPIES='yes' must be 0 (no f16 weight copies) or 1"));
}
