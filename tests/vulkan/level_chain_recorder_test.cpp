// The recorder's level chains (runtime/vulkan/commands.cpp set_chain): which dispatches wait for a
// producer's counter instead of a barrier. Recorded only (never submitted), with a kernel built
// twice, plain and with CHAIN (its two last bindings the recorder's slots), over buffers whose
// ids give the hazards: a chain only after a lone chain kernel, a kernel beside a chained level
// waits for the same producer when that is its only hazard, and a kernel that does not wait gets
// a barrier before anything the chain's waiters alone know to be finished.
#include <doctest/doctest.h>

#include "vulkan/vk_harness.hpp"

#ifdef STRATA_HAS_VULKAN
#include "../../runtime/vulkan/commands.hpp"
#include "../../runtime/vulkan/context.hpp"
#include "../../runtime/vulkan/memory.hpp"
#include "../../runtime/vulkan/pipelines.hpp"
#include "../../runtime/vulkan/push_constants.hpp"
#endif

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

// A device, the kernel's CHAIN form, a buffer whose ids steer the hazard tracking, and a command
// buffer to record into.
struct chain_bench {
  gpu::context ctx{-1};
  gpu::pipeline_registry pipes{ctx, {}};
  const gpu::pipeline& chain = pipes.get({"split_k_sum", std::nullopt, {{"WG", "64"}, {"CHAIN", "2"}}, 4});
  gpu::gpu_buffer data{ctx, 4096, gpu::memory_kind::device, "level chain data"};
  vk::raii::CommandPool pool{ctx.device(), vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer, ctx.queue_family())};
  vk::raii::CommandBuffers cmds{ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1)};
  const gpu::split_k_sum_pc pc{};
  // A kernel reading buffer id `in` and writing `out`.
  void run(gpu::command_recorder& rec, const gpu::pipeline& p, std::uint32_t in, std::uint32_t out) {
    const gpu::binding b[] = {{{data.handle(), 0, 1024, in}, false}, {{data.handle(), 1024, 1024, out}, true}};
    rec.dispatch(p, b, &pc, sizeof pc, 1);
  }
};

TEST_CASE("vulkan level chains: the recorder waits on a lone chain kernel, joins its level, and keeps barriers elsewhere") {
  if (!vkt::available()) return;
  chain_bench t;
  const gpu::pipeline& plain = t.pipes.get({"split_k_sum", std::nullopt, {{"WG", "64"}}, 2});
  const gpu::pipeline& chain = t.chain;
  REQUIRE(chain.chain_at == 2);
  REQUIRE(plain.chain_at == 0);
  gpu::gpu_buffer counters(t.ctx, 8 * 256, gpu::memory_kind::device, "level chain counters");
  gpu::command_recorder rec;
  rec.set_chain({counters.handle(), 0, counters.size(), 99}, 256);
  const auto run = [&](const gpu::pipeline& p, std::uint32_t in, std::uint32_t out) { t.run(rec, p, in, out); };
  rec.begin(t.cmds[0]);

  SUBCASE("a chain after a lone chain kernel, none after a level of two") {
    run(chain, 1, 2);  // K1: A -> B
    run(chain, 2, 3);  // K2 reads B: waits for K1
    CHECK(rec.chains() == 1);
    CHECK(rec.barriers() == 0);
    CHECK(rec.last_wait_slot() == 1);
    run(chain, 1, 4);  // reads A, writes D: no hazard, beside K2, no wait
    CHECK(rec.last_wait_slot() == 0);
    run(chain, 3, 5);  // reads C (K2's) in a level of two: a barrier
    CHECK(rec.chains() == 1);
    CHECK(rec.barriers() == 1);
    CHECK(rec.last_wait_slot() == 0);
  }
  SUBCASE("beside a chained level: waits for the same producer; a plain kernel gets a barrier") {
    run(chain, 1, 2);  // K1: A -> B
    run(chain, 2, 3);  // K2 waits for K1
    run(chain, 2, 4);  // K3 reads B too: its hazard is K1's only, so it waits for K1 beside K2
    CHECK(rec.chains() == 1);
    CHECK(rec.barriers() == 0);
    CHECK(rec.last_wait_slot() == 1);
    run(plain, 2, 6);  // reads B but does not wait: K1 may still run, so a barrier
    CHECK(rec.barriers() == 1);
  }
  SUBCASE("a plain producer or consumer keeps the barrier") {
    run(plain, 1, 2);
    run(chain, 2, 3);  // its producer signals nothing
    CHECK(rec.barriers() == 1);
    CHECK(rec.chains() == 0);
    run(plain, 3, 4);
    CHECK(rec.barriers() == 2);
    CHECK(rec.chains() == 0);
  }
  SUBCASE("a kernel that writes what the producer reads still waits for it (write after read)") {
    run(chain, 1, 2);
    run(chain, 3, 1);  // overwrites A, which K1 reads
    CHECK(rec.chains() == 1);
    CHECK(rec.barriers() == 0);
  }
  rec.end();
}

TEST_CASE("vulkan level chains: a CHAIN kernel needs the recorder's counters and its slots last") {
  if (!vkt::available()) return;
  chain_bench t;
  CHECK_THROWS_WITH_AS(t.pipes.get({"split_k_sum", std::nullopt, {{"WG", "64"}, {"CHAIN", "1"}}, 4}),
                       doctest::Contains("its level-chain slots must be its last two bindings"), std::exception);
  gpu::command_recorder rec;  // no set_chain
  rec.begin(t.cmds[0]);
  CHECK_THROWS_WITH_AS(t.run(rec, t.chain, 1, 2), doctest::Contains("has no chain counters"), std::exception);
  rec.end();
}

#endif

}  // namespace
