// What an explicit --gpu-budget keeps back for the driver (device_memory.hpp gpu_driver_reserve):
// none for test-sized budgets, at most 256 MiB, the engine's share growing with the budget, and
// the placement planning within that share and saying so.
#include <doctest/doctest.h>

#include <string>

#include "strata/runtime/device_memory.hpp"
#include "strata/runtime/engine.hpp"
#include "support/fixture_placement.hpp"
#include "support/shipped_fixture.hpp"
#include "support/vulkan_here.hpp"

namespace device_memory_test {
constexpr std::uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

// Vulkan, --fit under an explicit --gpu-budget.
strata::rt::engine_options fit_options(std::uint32_t n_ctx, std::uint32_t n_batch, std::uint64_t gpu_budget) {
  strata::rt::engine_options opt;
  opt.backend = strata::rt::backend_kind::vulkan;
  opt.threads = 2;
  opt.n_ctx = n_ctx;
  opt.n_batch = n_batch;
  opt.fit = true;
  opt.gpu_budget = gpu_budget;
  return opt;
}
}  // namespace device_memory_test

TEST_CASE("device memory: the driver's reserve of an explicit --gpu-budget") {
  using namespace device_memory_test;
  using strata::rt::engine_gpu_budget;
  using strata::rt::gpu_driver_reserve;
  CHECK(gpu_driver_reserve(0) == 0);
  CHECK(gpu_driver_reserve(64 * MiB) == 0);
  CHECK(gpu_driver_reserve(512 * MiB) == 0);
  CHECK(gpu_driver_reserve(1 * GiB) == 64 * MiB);
  CHECK(gpu_driver_reserve(12 * GiB) == 256 * MiB);
  CHECK(gpu_driver_reserve(24 * GiB) == 256 * MiB);
  CHECK(engine_gpu_budget(12 * GiB) == 12 * GiB - 256 * MiB);
  // A larger budget never leaves the engine less.
  std::uint64_t last = 0;
  for (std::uint64_t b = 0; b <= 4 * GiB; b += 7 * MiB + 13) {
    CHECK(engine_gpu_budget(b) >= last);
    last = engine_gpu_budget(b);
  }
}

TEST_CASE("device memory: the placement plans within the engine's share of --gpu-budget and names the reserve") {
  using namespace device_memory_test;
  const strata::test::golden_model g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  strata::rt::engine_options opt;
  opt.backend = strata::rt::backend_kind::vulkan;
  opt.gpu_budget = 12 * GiB;
  const auto in = strata::test::fixture_placement(g, opt, true);
  CHECK(in.plan.gpu_budget == 12 * GiB - 256 * MiB);
  CHECK(in.gpu_budget_source.find("--gpu-budget 12.00 GiB less 256.00 MiB kept for the driver") != std::string::npos);
  opt.gpu_budget = 64 * MiB;  // test-sized: all of it
  CHECK(strata::test::fixture_placement(g, opt, true).plan.gpu_budget == 64 * MiB);
}

// The plan and the Vulkan ledger must cap the engine at the same share: the ledger once took the
// reserve a second time, so a --fit plan filled to its budget failed to load at 12G.
TEST_CASE("device memory: the Vulkan ledger caps the engine at the plan's share of --gpu-budget") {
  using namespace device_memory_test;
  if (!strata::test::vulkan_here("device-memory checks")) return;
  const strata::test::golden_model g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  const auto opt = fit_options(256, 64, 1 * GiB);  // above the 512 MiB floor, so 64 MiB are kept back
  const auto m = strata::rt::model::load(g.path, opt);
  const std::string report = m->startup_report();
  MESSAGE(report);
  CHECK(report.find("of the 960.0 MiB --gpu-budget leaves the engine") != std::string::npos);
}

// --fit plans with the demand's scratch estimate and the ledger counts the real buffers: an
// estimate below them fails a plan filled to the byte (the 30B at 12G with a short context on
// the H200: scratch 344 MiB allocated against 339 planned). On every fixture architecture the
// Vulkan backend's activation buffers stay within the estimate.
TEST_CASE("device memory: the Vulkan backend's scratch stays within the planner's estimate") {
  using namespace device_memory_test;
  if (!strata::test::vulkan_here("device-memory checks")) return;
  for (const std::string name : {"qwen3-Q4_K_M", "qwen3moe-Q4_K_M", "llama4-Q4_K_M", "llama-Q4_K_M"}) {
    CAPTURE(name);
    const strata::test::golden_model g = strata::test::shipped_fixture(name);
    const auto opt = fit_options(64, 512, 1 * GiB);
    const std::uint64_t estimate = strata::test::fixture_placement(g, opt, true).demand.scratch_bytes;
    const auto m = strata::rt::model::load(g.path, opt);
    const std::string report = m->startup_report();
    const auto at = report.find("scratch ");
    REQUIRE(at != std::string::npos);
    const double scratch_mib = std::stod(report.substr(at + 8));
    MESSAGE(name << ": scratch " << scratch_mib << " MiB allocated, " << double(estimate) / double(MiB) << " MiB planned");
    CHECK(scratch_mib > 0.0);
    CHECK(scratch_mib <= double(estimate) / double(MiB));
  }
}
