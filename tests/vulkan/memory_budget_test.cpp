// The Vulkan allocator's hard cap (--gpu-budget): device-local buffers are counted as weights,
// KV or scratch by their label, a request past the cap fails naming the budget and what is held,
// host-visible buffers and freed or moved buffers are accounted right; and the device memory
// query (VK_EXT_memory_budget) and the link probe's GPU copies work (lavapipe in CI).
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>

#include "vulkan/vk_harness.hpp"

#ifdef STRATA_HAS_VULKAN
#include "../../runtime/vulkan/devices.hpp"
#include "../../runtime/vulkan/memory.hpp"

namespace {
namespace vkt = strata::test::vk;
using namespace strata::gpu;
constexpr std::uint64_t MiB = 1ull << 20;
}  // namespace

TEST_CASE("vulkan memory budget: weights, KV and scratch counted, over the cap is an error naming it") {
  if (!vkt::available()) return;
  context ctx(-1);
  ctx.set_memory_budget(8 * MiB);
  {
    gpu_buffer w(ctx, 4 * MiB, memory_kind::device, "weights (chunk 0)");
    const gpu_buffer k(ctx, 2 * MiB, memory_kind::device, "KV cache K, layer 0");
    const gpu_buffer staging(ctx, 16 * MiB, memory_kind::upload, "upload staging");  // host memory: not counted
    CHECK(ctx.ledger().weights >= 4 * MiB);
    CHECK(ctx.ledger().kv >= 2 * MiB);
    CHECK(ctx.ledger().scratch == 0);
    try {
      const gpu_buffer s(ctx, 4 * MiB, memory_kind::device, "split attention partials");
      FAIL("allocated past the budget");
    } catch (const strata::error& e) {
      const std::string m = e.what();
      CHECK(m.find("--gpu-budget 8 MiB") != std::string::npos);
      CHECK(m.find("split attention partials") != std::string::npos);
      CHECK(m.find("(weights ") != std::string::npos);  // what is held, by kind (sizes: drivers may pad)
      CHECK(m.find(", KV ") != std::string::npos);
    }
    CHECK(ctx.ledger().scratch == 0);  // the refused request left no charge
    gpu_buffer moved = std::move(w);    // one charge, moved with the buffer
    CHECK(ctx.ledger().weights >= 4 * MiB);
    CHECK(ctx.ledger().weights < 5 * MiB);
  }
  CHECK(ctx.ledger().total() == 0);
  const gpu_buffer fits(ctx, 6 * MiB, memory_kind::device, "int8 activations");  // room again after the frees
  CHECK(ctx.ledger().scratch >= 6 * MiB);
}

TEST_CASE("vulkan device memory query and the link probe's copies") {
  if (!vkt::available()) return;
  const device_memory m = query_device_memory(-1);
  CHECK(!m.name.empty());
  CHECK(m.heap_bytes > 0);
  CHECK(m.budget_bytes > 0);
  CHECK(m.budget_bytes <= m.heap_bytes);
  if (!m.budget_ext) CHECK(m.usage_bytes == 0);
  CHECK_THROWS_WITH_AS(query_device_memory(99), doctest::Contains("Vulkan device 99 does not exist"), strata::error);
  const transfer_speeds t = probe_transfers(-1, 4 * MiB);
  CHECK(t.device == m.name);
  CHECK(t.host_to_device > 1e6);  // any real copy moves more than 1 MB/s
  CHECK(t.device_read > 1e6);
  CHECK(t.host_to_device_beside == 0);  // nothing asked beside
  // A host task beside a chain of copies: it sees the chain end, and the chain's rate comes back.
  const transfer_speeds b = probe_transfers(-1, 4 * MiB, [](const std::atomic<bool>& done) {
    while (!done.load()) std::this_thread::yield();
    return 42.0;
  });
  CHECK(b.beside_result == 42.0);
  CHECK(b.host_to_device_beside > 1e6);
}

#endif
