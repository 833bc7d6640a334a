// The GPU half of the link probe (strata/runtime/link_probe.hpp): timed vkCmdCopyBuffer on the
// compute queue, host-visible -> device-local and device-local -> device-local, with the
// submission's fixed cost taken out.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "devices.hpp"
#include "memory.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {

transfer_speeds probe_transfers(int index, std::uint64_t bytes) {
  const context ctx(index);
  const gpu_buffer host(ctx, bytes, memory_kind::upload, "link probe (host)");
  const gpu_buffer dev_a(ctx, bytes, memory_kind::device, "link probe (device A)");
  const gpu_buffer dev_b(ctx, bytes, memory_kind::device, "link probe (device B)");
  std::memset(host.mapped(), 1, bytes);
  const vk::raii::CommandPool pool(ctx.device(), vk::CommandPoolCreateInfo(
                                                     vk::CommandPoolCreateFlagBits::eResetCommandBuffer, ctx.queue_family()));
  vk::raii::CommandBuffer cmd =
      std::move(vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1))[0]);
  const vk::raii::Fence fence(ctx.device(), vk::FenceCreateInfo());
  // Seconds of one copy src -> dst on the GPU: the best of `reps` submissions of one copy and of
  // `n` copies back to back (a barrier between them), their difference over n - 1. A lone copy's
  // wall time also holds the submit and the fence's wake-up (~0.2 ms on an H100: a 64 MiB
  // device copy timed alone read as 315 GB/s, a tenth of the GPU's bandwidth).
  const auto submit_seconds = [&](const gpu_buffer& src, const gpu_buffer& dst, int copies) {
    cmd.reset();
    cmd.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
    for (int c = 0; c < copies; ++c) {
      if (c > 0) {
        const vk::MemoryBarrier after_copy(vk::AccessFlagBits::eTransferWrite,
                                           vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite);
        cmd.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eTransfer, {}, after_copy, {}, {});
      }
      cmd.copyBuffer(src.handle(), dst.handle(), vk::BufferCopy(0, 0, bytes));
    }
    cmd.end();
    const vk::CommandBuffer raw = *cmd;
    const auto t0 = std::chrono::steady_clock::now();
    ctx.queue().submit(vk::SubmitInfo({}, {}, raw), *fence);
    if (ctx.device().waitForFences(*fence, VK_TRUE, ~0ull) != vk::Result::eSuccess)
      throw error("link probe: waiting for a copy on '" + ctx.info().name + "' failed");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ctx.device().resetFences(*fence);
    return s;
  };
  const auto copy_seconds = [&](const gpu_buffer& src, const gpu_buffer& dst) {
    constexpr int n = 8, reps = 4;
    double one = 1e30, many = 1e30;
    submit_seconds(src, dst, 1);  // warm-up
    for (int r = 0; r < reps; ++r) {
      one = std::min(one, submit_seconds(src, dst, 1));
      many = std::min(many, submit_seconds(src, dst, n));
    }
    // A timer too coarse for the difference (or a driver that overlapped the copies) leaves the mean.
    return many > one ? (many - one) / (n - 1) : many / n;
  };
  transfer_speeds t;
  t.device = ctx.info().name;
  t.host_to_device = double(bytes) / copy_seconds(host, dev_a);
  // A device copy reads and writes every byte: the memory moves twice its bytes, all of which a
  // kernel that only reads (the weights) has to itself.
  t.device_read = 2.0 * double(bytes) / copy_seconds(dev_a, dev_b);
  return t;
}

}  // namespace strata::gpu
