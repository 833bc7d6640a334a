// mul_mm_small.glsl's shared-memory bound under XS, for the backend's requests and the lab: each
// warp holds a weight tile of 32 rows and an activation tile of 16 tt token rows, 64 + 8 halves
// (9 uvec4) a row, and a workgroup gets 48 KiB (the shader's #error says the same).
#pragma once
#include <algorithm>
#include <cstdint>

namespace strata::gpu {

// Warps (at most 8) whose tiles fit 48 KiB at tt 16-token tiles: 7, 5, 4, 3 for tt = 1..4; 8 for
// N8's one 8-token tile.
constexpr std::uint32_t mm_small_xs_warps(std::uint32_t tt, bool n8 = false) {
  return std::min<std::uint32_t>(8, 49152 / ((32 + (n8 ? 8 : 16 * tt)) * 9 * 16));
}

}  // namespace strata::gpu
