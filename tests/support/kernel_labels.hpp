// Test support: which GPU kernels a model ran, from its kernel profile (rt::model::kernel_profile(),
// loaded with gpu_profile on): the runtime tests that compare a switch's two forms check by label
// that each form ran the kernel it names.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "strata/runtime/engine.hpp"

namespace strata::test {

// Whether a kernel ran whose label holds every one of `parts`.
inline bool ran_kernel_with(const std::vector<rt::model::kernel_time>& prof, std::initializer_list<std::string_view> parts) {
  return std::any_of(prof.begin(), prof.end(), [&](const auto& k) {
    return std::all_of(parts.begin(), parts.end(), [&](std::string_view s) { return k.label.find(s) != std::string::npos; });
  });
}

}  // namespace strata::test
