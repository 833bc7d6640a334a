// Vulkan instance, physical-device choice and logical device with one compute queue.
// Vulkan-Hpp RAII handles carry their own dispatch tables: no global loader state, and the
// loader (libvulkan.so.1) is opened at run time, so a machine without Vulkan gets a clear
// error instead of a binary that does not start.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <vulkan/vulkan_raii.hpp>

#include "devices.hpp"

namespace strata::gpu {

struct device_info {
  std::string name;
  std::string driver;        // driver name and version text
  std::string uuid;          // pipeline-cache identity (hex)
  std::uint32_t vendor_id = 0;
  std::uint32_t driver_version = 0;
  bool is_cpu = false;       // lavapipe / llvmpipe
  std::uint32_t subgroup_size = 32;
  std::uint32_t max_shared_bytes = 0;
  std::uint64_t max_storage_range = 0;
  std::uint64_t max_allocation = 0;
  std::uint64_t min_storage_align = 16;
  std::uint32_t max_push_constants = 128;
  std::uint32_t max_workgroups_x = 65535;
  std::uint32_t max_workgroup_threads = 128;  // along x: min(invocations, size[0]); Vulkan guarantees 128
  float timestamp_period_ns = 1.0f;
  bool timestamps = false;
  bool nv_coopmat = false;
  bool nv_coopmat_int8 = false;  // also 16x16x32 int8 x int8 -> int32 (mul_mmq.glsl)
  bool nv_coopmat_n8 = false;    // also 16x8x16 f16 x f16 -> f32 (mul_mm_small.glsl N8)
  std::uint32_t sm_count = 0;    // streaming multiprocessors (VK_NV_shader_sm_builtins), 0 unknown
  bool int_dot = false;      // packed 4x8-bit integer dot products (shaderIntegerDotProduct)
  bool timeline = false;     // timeline semaphores (Vulkan 1.2 core feature; enabled when present)
  // Arrays of storage buffers indexed by a dynamically uniform value (shaderStorageBufferArray-
  // DynamicIndexing; enabled when present): the GPU-cached experts' two weight sources.
  bool storage_array_indexing = false;
  // The driver's statistics of each compiled pipeline (registers, spills, shared memory), asked for
  // with STRATA_VK_PIPELINE_STATS=1 where VK_KHR_pipeline_executable_properties is there (a lab tool).
  bool pipeline_stats = false;
  // Each pipeline's creation time on stderr (STRATA_VK_PIPELINE_TIMES=1): what a driver that
  // compiles on the CPU (lavapipe's LLVM in CI) or a cold pipeline cache costs, per pipeline.
  bool pipeline_times = false;
  std::uint64_t device_local_bytes = 0;
};

// Names of the Vulkan devices visible to the loader, in index order (for --list-devices).
std::vector<std::string> list_devices();

// What device-local memory a context's buffers hold, by the first word of each buffer's label
// ("weights (chunk 0)", "KV cache K, layer 3", anything else: scratch), and the hard cap on it
// (--gpu-budget; 0: none) that allocation checks before asking the driver.
enum class memory_use { weights, kv, scratch };
memory_use classify_buffer_label(const std::string& label) noexcept;

struct memory_ledger {
  std::uint64_t budget = 0;  // 0: no cap
  std::uint64_t weights = 0, kv = 0, scratch = 0;
  std::uint64_t total() const noexcept { return weights + kv + scratch; }
};

class context {
 public:
  // device_index < 0 picks the first discrete GPU, else the first integrated, else the first
  // device (lavapipe). Throws strata::error naming what is missing.
  explicit context(int device_index = -1);

  const vk::raii::Device& device() const noexcept { return device_; }
  const vk::raii::PhysicalDevice& physical() const noexcept { return physical_; }
  const vk::raii::Queue& queue() const noexcept { return queue_; }
  // A second queue of the compute family (null where the family has one queue, as on lavapipe):
  // copies submitted there (the expert cache's prefetch) run beside the step on queue().
  const vk::raii::Queue* side_queue() const noexcept { return *side_queue_ ? &side_queue_ : nullptr; }
  std::uint32_t queue_family() const noexcept { return queue_family_; }
  const device_info& info() const noexcept { return info_; }
  // A memory type with all `required` flags (and `preferred` ones if any type has them).
  std::optional<std::uint32_t> memory_type(std::uint32_t type_bits, vk::MemoryPropertyFlags required,
                                           vk::MemoryPropertyFlags preferred = {}) const;
  bool device_local(std::uint32_t memory_type) const noexcept {
    return bool(mem_props_.memoryTypes[memory_type].propertyFlags & vk::MemoryPropertyFlagBits::eDeviceLocal);
  }

  // The cap applies to allocations made after it is set (set it before loading weights).
  void set_memory_budget(std::uint64_t bytes) noexcept { ledger_.budget = bytes; }
  const memory_ledger& ledger() const noexcept { return ledger_; }
  // The device-local heaps now, as the driver reports them (VK_EXT_memory_budget's usage is all of
  // this process's device memory: the ledger's buffers and the driver's own allocations).
  device_memory memory_now() const;
  // Counts `bytes` of device-local memory for `label`; throws strata::error naming the budget,
  // what is already held and the request when the cap would be passed.
  void charge(std::uint64_t bytes, const std::string& label) const;
  void release(std::uint64_t bytes, memory_use use) const noexcept;

 private:
  vk::raii::Context vk_context_;
  vk::raii::Instance instance_{nullptr};
  vk::raii::PhysicalDevice physical_{nullptr};
  vk::raii::Device device_{nullptr};
  vk::raii::Queue queue_{nullptr}, side_queue_{nullptr};
  std::uint32_t queue_family_ = 0;
  device_info info_;
  vk::PhysicalDeviceMemoryProperties mem_props_;
  mutable memory_ledger ledger_;  // buffers are created through const contexts
};

}  // namespace strata::gpu
