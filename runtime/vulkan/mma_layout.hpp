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

// The f16 operands of a 16x8x16 product as mul_mm_reg.glsl builds them: lane l = 4 g + t holds
// A (16 x 16, rows x k) elements at rows g + a_rows[e], columns 2 t + a_cols[e], each even element
// and the next at columns c, c + 1 (one 32-bit register); where B (16 x 8, k x tokens) has the
// same form (elements at k = 2 t + b_ks[e], token g), the kernel builds it in registers too, else
// (b_ks empty) it loads B from shared memory. GLSL lists of 8, 8 and 4 ints.
struct f16_fragments {
  std::string a_rows, a_cols, b_ks;
};

// nullopt when the driver's A fragments are not of that form (or the device has no 16x8x16 f16
// shape). `dump`, when given, receives the probe's raw elements of lanes 0-7 (for the lab).
std::optional<f16_fragments> probe_f16_fragments(const context& ctx, pipeline_registry& pipes, std::string* dump = nullptr);

}  // namespace strata::gpu
