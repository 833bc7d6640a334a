// The GPU half of the link probe (strata/runtime/link_probe.hpp): timed vkCmdCopyBuffer on the
// compute queue, host-visible -> device-local and device-local -> device-local.
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
  // Seconds of the best of `reps` submissions of one copy src -> dst (the first one warms up).
  const auto best_seconds = [&](const gpu_buffer& src, const gpu_buffer& dst, int reps) {
    double best = 1e30;
    for (int r = 0; r <= reps; ++r) {
      cmd.reset();
      cmd.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
      cmd.copyBuffer(src.handle(), dst.handle(), vk::BufferCopy(0, 0, bytes));
      cmd.end();
      const vk::CommandBuffer raw = *cmd;
      const auto t0 = std::chrono::steady_clock::now();
      ctx.queue().submit(vk::SubmitInfo({}, {}, raw), *fence);
      if (ctx.device().waitForFences(*fence, VK_TRUE, ~0ull) != vk::Result::eSuccess)
        throw error("link probe: waiting for a copy on '" + ctx.info().name + "' failed");
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ctx.device().resetFences(*fence);
      if (r > 0) best = std::min(best, s);
    }
    return best;
  };
  transfer_speeds t;
  t.device = ctx.info().name;
  t.host_to_device = double(bytes) / best_seconds(host, dev_a, 4);
  t.device_read = double(bytes) / best_seconds(dev_a, dev_b, 4);
  return t;
}

}  // namespace strata::gpu
