// The driver's layout of a 16 x 16 f32 cooperative matrix across a warp, probed once at start-up
// (shaders/mma_layout.glsl). mul_mmq.glsl scales each accumulator element by its token's and its
// weight row's factors, so it must know which (row, column) an element is; when every lane's
// elements sit at the same offsets from its first one (as on NVIDIA's tensor cores), those
// offsets become compile-time constants and a lane reads each distinct row's and column's factor
// once.
#pragma once
#include <optional>
#include <string>

namespace strata::gpu {

class context;
class pipeline_registry;

struct mma_layout {
  std::string row_offsets, col_offsets;  // GLSL lists of 8 ints: element e's (row, column) minus element 0's
  // The mma.sync fragment layout: lane l holds rows l / 4 and l / 4 + 8, columns 2 (l % 4) + {0, 1, 8, 9}
  // (elements in that order). attention_mma.glsl MMA_QUAD keeps its softmax in registers with it:
  // a row's elements sit in one quad of lanes.
  bool quad = false;
};

// nullopt when the device has no such layout (not 8 elements a lane, or offsets that differ by lane).
std::optional<mma_layout> probe_mma_layout(const context& ctx, pipeline_registry& pipes);

}  // namespace strata::gpu
