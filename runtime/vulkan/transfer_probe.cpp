// The GPU half of the link probe (strata/runtime/link_probe.hpp): timed vkCmdCopyBuffer on the
// compute queue, host-visible -> device-local, and a kernel that only reads device-local memory
// (shaders/read_bw.glsl, the weight reads' reference), with the submission's fixed cost taken out.
// Device-to-device copies are no proxy for the reads: an H100's ran at ~0.8 TB/s of traffic
// against ~3 TB/s its kernels read.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "commands.hpp"
#include "devices.hpp"
#include "memory.hpp"
#include "pipelines.hpp"
#include "strata/core/error.hpp"
#include "strata/runtime/cache_dir.hpp"

namespace strata::gpu {

transfer_speeds probe_transfers(int index, std::uint64_t bytes,
                                const std::function<double(const std::atomic<bool>& copies_done)>& beside) {
  const context ctx(index);
  const gpu_buffer host(ctx, bytes, memory_kind::upload, "link probe (host)");
  const gpu_buffer dev_a(ctx, bytes, memory_kind::device, "link probe (device A)");
  // The read kernel's buffer: four times the copies' (256 MiB by default), well beyond an L2 cache
  // (50 MiB on an H100), so its passes read memory.
  const std::uint64_t read_bytes = std::min<std::uint64_t>(4 * bytes, 0xffffffffull * 16);
  const gpu_buffer dev_r(ctx, read_bytes, memory_kind::device, "link probe (device reads)");
  std::memset(host.mapped(), 1, bytes);
  const vk::raii::CommandPool pool(ctx.device(), vk::CommandPoolCreateInfo(
                                                     vk::CommandPoolCreateFlagBits::eResetCommandBuffer, ctx.queue_family()));
  vk::raii::CommandBuffer cmd =
      std::move(vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1))[0]);
  const vk::raii::Fence fence(ctx.device(), vk::FenceCreateInfo());
  // Wall seconds of one submission of what `record` records into cmd (begin to end).
  const auto submit_seconds = [&](const auto& record) {
    cmd.reset();
    record();
    const vk::CommandBuffer raw = *cmd;
    const auto t0 = std::chrono::steady_clock::now();
    ctx.queue().submit(vk::SubmitInfo({}, {}, raw), *fence);
    if (ctx.device().waitForFences(*fence, VK_TRUE, ~0ull) != vk::Result::eSuccess)
      throw error("link probe: waiting for the GPU on '" + ctx.info().name + "' failed");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ctx.device().resetFences(*fence);
    return s;
  };
  // Seconds of one piece of work on the GPU: the best of `reps` submissions of one and of `n` back
  // to back, their difference over n - 1. A lone submission's wall time also holds the submit and
  // the fence's wake-up (~0.2 ms on an H100: a 64 MiB device copy timed alone read as 315 GB/s).
  const auto work_seconds = [&](const auto& record_n) {
    constexpr int n = 8, reps = 4;
    double one = 1e30, many = 1e30;
    submit_seconds([&] { record_n(1); });  // warm-up
    for (int r = 0; r < reps; ++r) {
      one = std::min(one, submit_seconds([&] { record_n(1); }));
      many = std::min(many, submit_seconds([&] { record_n(n); }));
    }
    // A timer too coarse for the difference leaves the mean.
    return many > one ? (many - one) / (n - 1) : many / n;
  };
  const auto copies = [&](const gpu_buffer& src, const gpu_buffer& dst) {
    return [&](int count) {
      cmd.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
      for (int c = 0; c < count; ++c) {
        if (c > 0) {
          const vk::MemoryBarrier after_copy(vk::AccessFlagBits::eTransferWrite,
                                             vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite);
          cmd.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eTransfer, {}, after_copy, {}, {});
        }
        cmd.copyBuffer(src.handle(), dst.handle(), vk::BufferCopy(0, 0, bytes));
      }
      cmd.end();
    };
  };
  // The read kernel: 16-byte loads, four in flight a thread, one pass over the buffer.
  pipeline_registry pipes(ctx, default_cache_dir());
  constexpr std::uint32_t wg = 256, loads = 4;
  const pipeline& read = pipes.get({"read_bw", std::nullopt, {{"WG", std::to_string(wg)}, {"U", std::to_string(loads)}}, 2u});
  const gpu_buffer sink(ctx, 16, memory_kind::device, "link probe (read sink)");
  const std::uint32_t n16 = std::uint32_t(read_bytes / 16);
  const std::uint32_t groups = std::min<std::uint32_t>((n16 + wg * loads - 1) / (wg * loads), ctx.info().max_workgroups_x);
  const auto reads = [&](int count) {
    command_recorder rec;
    rec.begin(cmd);
    const binding b[] = {{{dev_r.handle(), 0, read_bytes, 1}, false}, {{sink.handle(), 0, 16, 2}, true}};
    for (int c = 0; c < count; ++c) rec.dispatch(read, b, &n16, sizeof n16, groups);
    rec.end();
  };
  transfer_speeds t;
  t.device = ctx.info().name;
  t.host_to_device = double(bytes) / work_seconds(copies(host, dev_a));
  t.device_read = double(n16) * 16.0 / work_seconds(reads);
  if (beside) {
    // A chain of ~0.4 s of copies; a thread waits for its fence and raises the flag `beside` polls.
    const int n = int(std::clamp(std::ceil(0.4 * t.host_to_device / double(bytes)), 2.0, 256.0));
    copies(host, dev_a)(n);
    const vk::CommandBuffer raw = *cmd;
    std::atomic<bool> done{false};
    const auto t0 = std::chrono::steady_clock::now();
    ctx.queue().submit(vk::SubmitInfo({}, {}, raw), *fence);
    double chain_s = 0;
    bool waited = false;
    std::thread waiter([&] {
      waited = ctx.device().waitForFences(*fence, VK_TRUE, ~0ull) == vk::Result::eSuccess;
      chain_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      done.store(true, std::memory_order_release);
    });
    try {
      t.beside_result = beside(done);
    } catch (...) {
      waiter.join();
      throw;
    }
    waiter.join();
    if (!waited) throw error("link probe: waiting for the GPU on '" + ctx.info().name + "' failed");
    ctx.device().resetFences(*fence);
    t.host_to_device_beside = double(bytes) * n / chain_s;
  }
  return t;
}

}  // namespace strata::gpu
