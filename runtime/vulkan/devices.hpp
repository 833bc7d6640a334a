// Device enumeration for backend selection, without exposing Vulkan types.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace strata::gpu {
// For each Vulkan device in index order: true for a real GPU, false for a CPU implementation.
std::vector<bool> gpu_device_kinds();
// Names of the Vulkan devices in index order.
std::vector<std::string> list_devices();

// Device-local memory of one device, asked at the time of the call.
struct device_memory {
  std::string name;
  bool is_cpu = false;             // lavapipe: "device-local" is host RAM
  std::uint64_t heap_bytes = 0;    // sum of the device-local heaps
  std::uint64_t budget_bytes = 0;  // VK_EXT_memory_budget: what this process may allocate (else heap_bytes)
  std::uint64_t usage_bytes = 0;   // VK_EXT_memory_budget: what this process holds (else 0)
  bool budget_ext = false;         // whether the two above come from VK_EXT_memory_budget
};
// index < 0: the device a context with device_index -1 picks. Throws strata::error (no device,
// no such index).
device_memory query_device_memory(int index);

// Link speeds on one device's compute queue, best of a few repetitions (B/s): `bytes` copied
// host-visible (pinned) -> device-local, and a kernel reading four times that of device-local
// memory (the rate resident weights are read at).
struct transfer_speeds {
  std::string device;
  double host_to_device = 0;
  double device_read = 0;
  // host_to_device while `beside` ran (0 when not asked), and what `beside` returned.
  double host_to_device_beside = 0;
  double beside_result = 0;
};
// `beside`, where given, runs on the host while a chain of copies (~0.4 s) runs on the GPU; it is
// passed a flag that turns true when the chain is done, and returns what it measured.
transfer_speeds probe_transfers(int index, std::uint64_t bytes,
                                const std::function<double(const std::atomic<bool>& copies_done)>& beside = {});
}  // namespace strata::gpu

namespace strata::rt {
using gpu::gpu_device_kinds;
}  // namespace strata::rt
