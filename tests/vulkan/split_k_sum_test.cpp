// The split-K GEMM's sum pass (shaders/split_k_sum.glsl) on any device, lavapipe included (the
// GEMM itself needs tensor cores; its partials are checked on the GPU by vk_matvec_bench and the
// fidelity tests with STRATA_VK_SPLITK_MIN_K): partials part_stride floats apart, added in split
// order, so each output equals the same float sum on the CPU bit for bit; rows land y_stride
// apart from y_off, and nothing outside them is written.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

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

TEST_CASE("vulkan split_k_sum: partials added in split order into strided rows, nothing else written") {
  if (!vkt::available()) return;
  gpu::context ctx(-1);
  gpu::pipeline_registry pipes(ctx, {});
  // RESIDUAL: y = y + sum in place, as the residual add (elementwise.glsl OP_ADD) would give.
  for (const bool residual : {false, true}) {
  CAPTURE(residual);
  const std::uint32_t N = 37, n_tok = 5, splits = 3, part_stride = n_tok * N + 11, y_off = 3, y_stride = N + 2;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> part(std::size_t(splits) * part_stride);
  for (auto& v : part) v = nd(rng);
  const std::size_t y_len = y_off + std::size_t(n_tok) * y_stride + 7;
  const float sentinel = -12345.0f;

  gpu::gpu_buffer pb(ctx, part.size() * 4, gpu::memory_kind::readback, "split partials");
  gpu::gpu_buffer yb(ctx, y_len * 4, gpu::memory_kind::readback, "y");
  std::memcpy(pb.mapped(), part.data(), part.size() * 4);
  std::vector<float> init(y_len, sentinel);
  if (residual)
    for (std::size_t i = y_off; i < y_len; ++i) init[i] = nd(rng);
  std::memcpy(yb.mapped(), init.data(), y_len * 4);

  const gpu::pipeline& pl = residual ? pipes.get({"split_k_sum", std::nullopt, {{"WG", "64"}, {"RESIDUAL", "1"}}, 3})
                                     : pipes.get({"split_k_sum", std::nullopt, {{"WG", "64"}}, 2});
  vk::raii::CommandPool pool(ctx.device(), vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer, ctx.queue_family()));
  auto cmds = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1));
  gpu::command_recorder rec;
  rec.begin(cmds[0]);
  const gpu::split_k_sum_pc pc{N, n_tok, splits, part_stride, y_off, y_stride, y_off, y_stride};
  const gpu::binding b[] = {{{pb.handle(), 0, pb.size(), 1}, false},
                            {{yb.handle(), 0, yb.size(), 2}, true},
                            {{yb.handle(), 0, yb.size(), 2}, false}};
  rec.dispatch(pl, std::span(b, residual ? 3 : 2), &pc, sizeof pc, (N * n_tok + 63) / 64);
  rec.end();
  vk::raii::Fence fence(ctx.device(), vk::FenceCreateInfo());
  const vk::CommandBuffer c = *cmds[0];
  ctx.queue().submit(vk::SubmitInfo({}, {}, c), *fence);
  REQUIRE(ctx.device().waitForFences(*fence, VK_TRUE, UINT64_MAX) == vk::Result::eSuccess);

  std::vector<float> y(y_len);
  std::memcpy(y.data(), yb.mapped(), y_len * 4);
  std::size_t wrong = 0, touched = 0;
  for (std::size_t i = 0; i < y_len; ++i) {
    const bool in_row = i >= y_off && (i - y_off) / y_stride < n_tok && (i - y_off) % y_stride < N;
    if (!in_row) {
      touched += y[i] != init[i];
      continue;
    }
    const std::size_t t = (i - y_off) / y_stride, n = (i - y_off) % y_stride, e = t * N + n;
    float want = part[e];
    for (std::uint32_t z = 1; z < splits; ++z) want += part[std::size_t(z) * part_stride + e];
    if (residual) want = init[i] + want;
    wrong += y[i] != want;
  }
  CHECK(wrong == 0);
  CHECK(touched == 0);
  }
}

#endif

}  // namespace
