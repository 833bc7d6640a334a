// The token counts recorded steps are made for. A recorded command buffer is fixed to its
// step's token count (dispatch sizes, push constants), so a server whose batches change every
// step would record nearly every step; the decoder pads a batch to one of a few sizes instead
// (copies of its last token, graph/decoder.hpp) and the steps replay.
#pragma once
#include <bit>
#include <cstdint>

namespace strata::gpu {

// Up to 8 tokens every count has its own step (decode of 1-8 streams, where a padded token costs
// most); above, four sizes an octave, multiples of 2^(ceil(log2 n) - 3), so a step grows by less
// than a quarter (9 -> 10, 17 -> 20, 65 -> 80, 300 -> 320, 513 -> 640). The tiled kernels round
// tokens up to their tiles (16-128 rows) anyway. 32 sizes cover 1..512 tokens.
constexpr std::uint32_t padded_step_rows(std::uint32_t n) {
  if (n <= 8) return n;
  const std::uint32_t step = 1u << (std::bit_width(n - 1) - 3);
  return (n + step - 1) / step * step;
}

}  // namespace strata::gpu
