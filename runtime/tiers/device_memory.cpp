#include "strata/runtime/device_memory.hpp"

#include <algorithm>
#include <exception>
#include <fstream>
#include <sstream>

#ifdef STRATA_HAS_VULKAN
#include "devices.hpp"
#endif

namespace strata::rt {

std::optional<gpu_memory_info> gpu_memory([[maybe_unused]] int device) {
#ifdef STRATA_HAS_VULKAN
  try {
    const gpu::device_memory m = gpu::query_device_memory(device);
    return gpu_memory_info{.device = m.name,
                           .is_cpu = m.is_cpu,
                           .total = m.heap_bytes,
                           .available = m.budget_bytes - std::min(m.budget_bytes, m.usage_bytes),
                           .from_budget_ext = m.budget_ext};
  } catch (const std::exception&) {
    return std::nullopt;
  }
#else
  return std::nullopt;
#endif
}

std::optional<std::uint64_t> host_available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("MemAvailable:")) {
      std::istringstream fields(line.substr(13));
      std::uint64_t kib = 0;
      std::string unit;
      if (fields >> kib >> unit && unit == "kB") return kib * 1024;
    }
  return std::nullopt;
}

std::uint64_t default_gpu_budget(std::uint64_t available) noexcept {
  const std::uint64_t margin = std::max<std::uint64_t>(512ull << 20, available / 20);
  return available > margin ? available - margin : 0;
}

std::uint64_t gpu_driver_reserve(std::uint64_t gpu_budget) noexcept {
  constexpr std::uint64_t floor = 512ull << 20, most = 256ull << 20;
  return gpu_budget > floor ? std::min(most, (gpu_budget - floor) / 8) : 0;
}

std::uint64_t engine_gpu_budget(std::uint64_t gpu_budget) noexcept { return gpu_budget - gpu_driver_reserve(gpu_budget); }

std::uint64_t default_ram_budget(std::uint64_t available) noexcept {
  const std::uint64_t margin = std::max<std::uint64_t>(1ull << 30, available / 10);
  return available > margin ? available - margin : 0;
}

}  // namespace strata::rt
