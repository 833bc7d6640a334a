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

// What an explicit --gpu-budget keeps back for the driver's own memory in this process, which
// no engine buffer holds: its context (~60 MiB on the H200's driver, outside even
// VK_EXT_memory_budget's count), pipelines, and the command buffers of recorded steps (~120-160
// MiB once many batch shapes were recorded). Measured on the H200 (session 19): the 30B at
// --gpu-budget 12G peaked at 12,301 MiB in nvidia-smi with the engine's buffers at 12,179, the
// 70B at 24G at 24,622 MiB. So the engine plans and allocates within
// gpu_budget - gpu_driver_reserve(gpu_budget) and the process stays within --gpu-budget.
// (gpu_budget - 512 MiB) / 8, at most 256 MiB; none under 512 MiB (test-sized budgets), and
// the engine's share still grows with the budget.
std::uint64_t gpu_driver_reserve(std::uint64_t gpu_budget) noexcept;
// gpu_budget less that reserve: what the engine's buffers may take.
std::uint64_t engine_gpu_budget(std::uint64_t gpu_budget) noexcept;
std::uint64_t default_ram_budget(std::uint64_t available) noexcept;

}  // namespace strata::rt
