// Test support: whether this build has the Vulkan backend and the loader offers a device (in CI:
// Mesa's lavapipe); when not, the case says which checks it skips and checks nothing.
#pragma once
#include <doctest/doctest.h>

#include <string_view>

#include "strata/runtime/engine.hpp"

namespace strata::test {

inline bool vulkan_here(std::string_view skipped) {
  if (!rt::vulkan_compiled_in() || rt::vulkan_devices().empty()) {
    MESSAGE("no Vulkan build or device: " << skipped << " skipped");
    return false;
  }
  return true;
}

}  // namespace strata::test
