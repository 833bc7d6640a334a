// Progress of a long step (weight upload, pipeline compilation, a long prefill), reported by the
// runtime to whoever drives it: an app draws a bar, a library user may ignore it. Called on the
// thread doing the work, with done == total once when the stage ends.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>

namespace strata {

struct progress_event {
  std::string_view stage;  // "load", "upload", "compile", "prefill", "quantize"
  std::uint64_t done = 0;  // units finished so far
  std::uint64_t total = 0; // units in the stage
  std::string_view unit;   // "bytes", "pipelines", "tokens", "tensors"
};

using progress_fn = std::function<void(const progress_event&)>;

}  // namespace strata
