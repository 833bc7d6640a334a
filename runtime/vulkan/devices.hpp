// Device enumeration for backend selection, without exposing Vulkan types.
#pragma once
#include <string>
#include <vector>

namespace strata::gpu {
// For each Vulkan device in index order: true for a real GPU, false for a CPU implementation.
std::vector<bool> gpu_device_kinds();
// Names of the Vulkan devices in index order.
std::vector<std::string> list_devices();
}  // namespace strata::gpu

namespace strata::rt {
using gpu::gpu_device_kinds;
}  // namespace strata::rt
