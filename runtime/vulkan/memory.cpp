#include "memory.hpp"

#include <cstring>

#include "strata/core/error.hpp"

namespace strata::gpu {
std::string gib_text(std::uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  return buf;
}

gpu_buffer::gpu_buffer(const context& ctx, std::uint64_t bytes, memory_kind kind, const std::string& what) {
  size_ = bytes ? bytes : 16;
  const auto usage = vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc |
                     vk::BufferUsageFlagBits::eTransferDst;
  try {
    buffer_ = vk::raii::Buffer(ctx.device(), vk::BufferCreateInfo({}, size_, usage));
  } catch (const vk::SystemError& e) {
    throw error("GPU buffer for " + what + " (" + gib_text(size_) + ") could not be created: " + e.what());
  }
  const auto req = buffer_.getMemoryRequirements();
  using F = vk::MemoryPropertyFlagBits;
  std::optional<std::uint32_t> type;
  switch (kind) {
    case memory_kind::device: type = ctx.memory_type(req.memoryTypeBits, F::eDeviceLocal); break;
    case memory_kind::upload: type = ctx.memory_type(req.memoryTypeBits, F::eHostVisible | F::eHostCoherent); break;
    case memory_kind::step:
      type = ctx.memory_type(req.memoryTypeBits, F::eHostVisible | F::eHostCoherent, F::eDeviceLocal);
      break;
    case memory_kind::readback:
    case memory_kind::handoff:
      type = ctx.memory_type(req.memoryTypeBits, F::eHostVisible | F::eHostCoherent, F::eHostCached);
      break;
  }
  if (!type) throw error("GPU '" + ctx.info().name + "' has no suitable memory type for " + what);
  // The budget is checked before the driver is asked; a failed constructor returns the charge.
  const bool charged = kind == memory_kind::device || (kind == memory_kind::step && ctx.device_local(*type));
  if (charged) ctx.charge(req.size, what);
  try {
    memory_ = vk::raii::DeviceMemory(ctx.device(), vk::MemoryAllocateInfo(req.size, *type));
    buffer_.bindMemory(*memory_, 0);
  } catch (const vk::SystemError& e) {
    if (charged) ctx.release(req.size, classify_buffer_label(what));
    throw error("out of GPU memory allocating " + gib_text(req.size) + " for " + what + " on '" + ctx.info().name +
                "' (" + e.what() + "); use a smaller context (-c), fewer GPU layers (-ngl) or --backend cpu");
  }
  if (charged) {
    charged_ctx_ = &ctx;
    charged_ = req.size;
    use_ = classify_buffer_label(what);
  }
  if (kind != memory_kind::device) mapped_ = static_cast<std::byte*>(memory_.mapMemory(0, VK_WHOLE_SIZE));
}

gpu_buffer& gpu_buffer::operator=(gpu_buffer&& o) noexcept {
  if (this == &o) return *this;
  uncharge();
  buffer_ = std::move(o.buffer_);  // the buffer before its memory: destroyed in that order below
  memory_ = std::move(o.memory_);
  size_ = std::exchange(o.size_, 0);
  mapped_ = std::exchange(o.mapped_, nullptr);
  charged_ctx_ = std::exchange(o.charged_ctx_, nullptr);
  charged_ = std::exchange(o.charged_, 0);
  use_ = o.use_;
  return *this;
}

void gpu_buffer::uncharge() noexcept {
  if (charged_ctx_) charged_ctx_->release(charged_, use_);
  charged_ctx_ = nullptr;
  charged_ = 0;
}

arena_layout::placement arena_layout::place(std::uint64_t bytes, const std::string& what) {
  if (bytes > limit_)
    throw error("tensor '" + what + "' has " + std::to_string(bytes) + " bytes, more than this GPU can bind at once (" +
                std::to_string(limit_) + " bytes)");
  for (std::uint32_t c = 0; c < sizes_.size(); ++c) {
    const std::uint64_t off = (sizes_[c] + align_ - 1) / align_ * align_;
    if (off + bytes <= limit_) {
      sizes_[c] = off + bytes;
      return {c, off};
    }
  }
  sizes_.push_back(bytes);
  return {std::uint32_t(sizes_.size() - 1), 0};
}

uploader::uploader(const context& ctx, std::uint64_t staging_bytes)
    : ctx_(&ctx), staging_(ctx, staging_bytes, memory_kind::upload, "upload staging") {
  pool_ = vk::raii::CommandPool(ctx.device(), vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer,
                                                                        ctx.queue_family()));
  cmd_ = std::move(vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool_, vk::CommandBufferLevel::ePrimary, 1))[0]);
  fence_ = vk::raii::Fence(ctx.device(), vk::FenceCreateInfo());
}

void uploader::copy(std::span<const std::byte> src, vk::Buffer dst, std::uint64_t dst_offset) {
  copy(src, dst, dst_offset, 1, [](std::span<const std::byte> piece, std::byte* out) { std::memcpy(out, piece.data(), piece.size()); });
}

void uploader::copy(std::span<const std::byte> src, vk::Buffer dst, std::uint64_t dst_offset, std::uint64_t unit, const writer& write) {
  if (unit == 0 || unit > staging_.size() || src.size() % unit != 0)
    throw error("GPU upload: " + std::to_string(src.size()) + " bytes in units of " + std::to_string(unit) +
                " do not fit a staging buffer of " + std::to_string(staging_.size()) + " bytes");
  while (!src.empty()) {
    if (staging_.size() - used_ < unit) flush();
    if (!open_) {
      cmd_.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
      open_ = true;
    }
    const std::uint64_t n = std::min<std::uint64_t>(src.size(), (staging_.size() - used_) / unit * unit);
    write(src.first(n), staging_.mapped() + used_);
    cmd_.copyBuffer(staging_.handle(), dst, vk::BufferCopy(used_, dst_offset, n));
    used_ += n;
    dst_offset += n;
    src = src.subspan(n);
  }
}

void uploader::flush() {
  if (!open_) return;
  cmd_.end();
  const vk::CommandBuffer c = *cmd_;
  ctx_->queue().submit(vk::SubmitInfo({}, {}, c), *fence_);
  if (ctx_->device().waitForFences(*fence_, VK_TRUE, UINT64_MAX) != vk::Result::eSuccess)
    throw error("GPU upload did not complete");
  ctx_->device().resetFences(*fence_);
  cmd_.reset();
  open_ = false;
  used_ = 0;
}

}  // namespace strata::gpu
