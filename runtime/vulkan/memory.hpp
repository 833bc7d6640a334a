// GPU buffers and the weight arena. Every buffer is one VkBuffer bound to its own memory;
// weights are packed into arena chunks (each at most the device's binding limit: 4 GiB on
// NVIDIA, 128 MiB on lavapipe) and addressed as (chunk, offset, bytes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "context.hpp"

namespace strata::gpu {

// A byte count as GiB with two decimals ("1.50 GiB"), for messages.
std::string gib_text(std::uint64_t bytes);

enum class memory_kind {
  device,    // device-local, not mapped
  upload,    // host-visible + coherent (staging, per-step inputs)
  readback,  // host-visible, preferably host-cached (results read by the CPU)
  // Host-visible + coherent, preferably host-cached: what the CPU writes *and reads back* between
  // the parts of a step (a hand-off's result, which the CPU's experts accumulate in place). The
  // first `upload` type is write-combined on discrete GPUs (NVIDIA: HOST_VISIBLE|HOST_COHERENT
  // without HOST_CACHED), where every CPU read is an uncached load.
  handoff,
  // Host-visible + coherent, preferably device-local (the BAR): small inputs the host writes each
  // step and kernels read many times. In system memory every read a kernel makes of them crosses
  // PCIe; attention reads positions, then block tables, then keys: dependent round trips.
  step,
};

class gpu_buffer {
 public:
  gpu_buffer() = default;
  gpu_buffer(const context& ctx, std::uint64_t bytes, memory_kind kind, const std::string& what);
  gpu_buffer(gpu_buffer&& o) noexcept { *this = std::move(o); }
  gpu_buffer& operator=(gpu_buffer&& o) noexcept;
  ~gpu_buffer() { uncharge(); }

  vk::Buffer handle() const noexcept { return *buffer_; }
  std::uint64_t size() const noexcept { return size_; }
  std::byte* mapped() const noexcept { return mapped_; }
  explicit operator bool() const noexcept { return size_ != 0; }

 private:
  vk::raii::DeviceMemory memory_{nullptr};
  vk::raii::Buffer buffer_{nullptr};
  std::uint64_t size_ = 0;
  std::byte* mapped_ = nullptr;
  // Device-local bytes counted in the context's ledger (returned when the buffer goes).
  const context* charged_ctx_ = nullptr;
  std::uint64_t charged_ = 0;
  memory_use use_ = memory_use::scratch;

  void uncharge() noexcept;
};

// A sub-range of a buffer, as bound to one shader binding.
struct buffer_range {
  vk::Buffer buffer;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::uint32_t id = 0;  // for hazard tracking: ranges with equal ids may overlap
};

// First-fit packing of weight tensors into chunks no larger than `chunk_limit`.
class arena_layout {
 public:
  struct placement {
    std::uint32_t chunk = 0;
    std::uint64_t offset = 0;
  };
  arena_layout(std::uint64_t chunk_limit, std::uint64_t alignment) : limit_(chunk_limit), align_(alignment) {}
  placement place(std::uint64_t bytes, const std::string& what);
  const std::vector<std::uint64_t>& chunk_sizes() const noexcept { return sizes_; }

 private:
  std::uint64_t limit_, align_;
  std::vector<std::uint64_t> sizes_;
};

// Copies host bytes into device buffers through a host-visible staging buffer.
class uploader {
 public:
  static constexpr std::uint64_t default_staging_bytes = 64ull << 20;
  explicit uploader(const context& ctx, std::uint64_t staging_bytes = default_staging_bytes);
  void copy(std::span<const std::byte> src, vk::Buffer dst, std::uint64_t dst_offset);
  // As copy(), but src is written into the staging buffer by write(piece, out) a piece of whole
  // units at a time (out: piece.size() bytes), e.g. weight rows rewritten in the GPU's layout.
  using writer = std::function<void(std::span<const std::byte>, std::byte*)>;
  void copy(std::span<const std::byte> src, vk::Buffer dst, std::uint64_t dst_offset, std::uint64_t unit, const writer& write);
  void flush();  // waits until every queued copy has landed

 private:
  const context* ctx_;
  gpu_buffer staging_;
  vk::raii::CommandPool pool_{nullptr};
  vk::raii::CommandBuffer cmd_{nullptr};
  vk::raii::Fence fence_{nullptr};
  std::uint64_t used_ = 0;
  bool open_ = false;
};

}  // namespace strata::gpu
