// Memory the tiers may use: the GPU's device-local memory (what VK_EXT_memory_budget says this
// process may still allocate, where the driver has it) and the host's available RAM, and the
// default --gpu-budget / --ram-budget derived from them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace strata::rt {

struct gpu_memory_info {
  std::string device;            // Vulkan device name
  bool is_cpu = false;           // lavapipe: its "device-local" memory is host RAM
  std::uint64_t total = 0;       // device-local heaps
  std::uint64_t available = 0;   // budget - usage (VK_EXT_memory_budget), else the heap size
  bool from_budget_ext = false;  // whether `available` comes from VK_EXT_memory_budget
};

// The device `device` (-1: the one the Vulkan backend picks); nullopt when this build has no
// Vulkan, or there is no loader or device.
std::optional<gpu_memory_info> gpu_memory(int device);

// MemAvailable from /proc/meminfo; nullopt where it cannot be read.
std::optional<std::uint64_t> host_available_memory();

// Defaults: available minus a margin for the driver, other processes and fragmentation
// (GPU: max(512 MiB, 5%); RAM: max(1 GiB, 10%)); 0 when the margin is more than there is.
std::uint64_t default_gpu_budget(std::uint64_t available) noexcept;
std::uint64_t default_ram_budget(std::uint64_t available) noexcept;

}  // namespace strata::rt
