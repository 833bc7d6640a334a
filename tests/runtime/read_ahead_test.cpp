// The decode step's read-ahead (runtime/vulkan/step_cache.cpp record_read_ahead, tuning.hpp
// read_ahead_bytes): before the barrier that starts a dense integer matvec's level, read_bw
// dispatches read the head of that matvec's weights so it is in L2 when the level starts. They
// read weights and write a word nothing reads, so they add dispatches but no barrier, and the
// logits are those without them bit for bit. The qwen3 fixture requantized to Q8_0 (every
// projection an integer matvec, gate/up with SwiGLU: both heads read) and the shipped Q4_K_M file.
#include <doctest/doctest.h>

#include <vector>

#include "strata/runtime/engine.hpp"
#include "support/fixture_options.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/shipped_fixture.hpp"
#include "support/temp_model_dir.hpp"
#include "support/vulkan_here.hpp"

namespace {

struct ahead_run {
  std::vector<float> logits;
  std::uint32_t dispatches = 0, barriers = 0;  // the last decode step's
};

ahead_run run_ahead(const std::filesystem::path& file, const strata::test::golden_run& run, const char* kb, const char* attn_kb) {
  const strata::test::scoped_env a("STRATA_VK_READ_AHEAD_KB", kb), b("STRATA_VK_READ_AHEAD_ATTN_KB", attn_kb);
  auto m = strata::rt::model::load(file, strata::test::fixture_options(strata::rt::backend_kind::vulkan));
  ahead_run r;
  r.logits = strata::test::prompt_and_decode_logits(*m, run, 6);
  r.dispatches = m->step_recordings().last_dispatches;
  r.barriers = m->step_recordings().last_barriers;
  return r;
}

void check_ahead(const std::filesystem::path& file, const strata::test::golden_run& run) {
  const ahead_run off = run_ahead(file, run, "0", "0");
  const ahead_run on = run_ahead(file, run, "16", "64");
  const ahead_run attn_only = run_ahead(file, run, "0", "64");
  MESSAGE("decode step dispatches / barriers: off " << off.dispatches << " / " << off.barriers << ", on " << on.dispatches
                                                    << " / " << on.barriers << ", after attention only " << attn_only.dispatches);
  CHECK(on.dispatches > attn_only.dispatches);
  CHECK(attn_only.dispatches > off.dispatches);
  CHECK(on.barriers == off.barriers);
  CHECK(attn_only.barriers == off.barriers);
  REQUIRE(on.logits.size() == off.logits.size());
  CHECK(on.logits == off.logits);
  CHECK(attn_only.logits == off.logits);
}

}  // namespace

TEST_CASE("fidelity: Vulkan decode steps that read the next matvec's weights ahead give the same logits bit for bit, with no barrier added") {
  if (!strata::test::vulkan_here("read-ahead")) return;
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  SUBCASE("Q8_0") {
    const strata::test::temp_model_dir dir("read-ahead");
    check_ahead(dir.as_q8_0(g.path), g.runs.back());
  }
  SUBCASE("the shipped Q4_K_M file") { check_ahead(g.path, g.runs.back()); }
}

TEST_CASE("read-ahead: a bad STRATA_VK_READ_AHEAD_KB is an error naming it") {
  if (!strata::test::vulkan_here("read-ahead")) return;
  const strata::test::scoped_env a("STRATA_VK_READ_AHEAD_KB", "4M");
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  CHECK_THROWS_WITH(strata::rt::model::load(g.path, strata::test::fixture_options(strata::rt::backend_kind::vulkan)),
                    doctest::Contains("STRATA_VK_READ_AHEAD_KB='4M' must be a size in KiB up to 2^20 (0: off)"));
}
