// Block-diagonal Walsh–Hadamard transform for sizes that are not a power of two (head_dim 80,
// 96, 192, ...): the vector is cut into power-of-two segments, largest first (96 = 64 + 32), and
// each segment is transformed on its own. Zero-padding to the next power of two would waste
// storage; QuaRot-style 12·2^k Hadamards are not needed at these sizes.
#pragma once
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "strata/core/error.hpp"
#include "strata/hadamard/wht.hpp"

namespace strata::hadamard {

// Segment sizes of n, largest first; each a power of two ≥ min_segment. A power of two up to
// max_segment is one segment.
struct segments {
  static constexpr std::size_t min_segment = 16;
  static constexpr std::size_t max_segment = 256;
  static constexpr std::size_t max_count = 8;
  std::array<std::uint32_t, max_count> size{};  // segment lengths, in storage order
  std::uint32_t count = 0;

  std::uint32_t offset(std::uint32_t s) const noexcept {
    std::uint32_t o = 0;
    for (std::uint32_t i = 0; i < s; ++i) o += size[i];
    return o;
  }
};

// Throws, naming n, when n is not a multiple of min_segment or needs more than max_count segments.
inline segments split_into_segments(std::size_t n) {
  segments s;
  if (n == 0 || n % segments::min_segment != 0)
    throw error("blocked Hadamard: size " + std::to_string(n) + " is not a positive multiple of " +
                std::to_string(segments::min_segment));
  std::size_t rest = n;
  while (rest) {
    std::size_t p = std::bit_floor(rest);
    if (p > segments::max_segment) p = segments::max_segment;
    if (s.count == segments::max_count)
      throw error("blocked Hadamard: size " + std::to_string(n) + " needs more than " +
                  std::to_string(segments::max_count) + " segments");
    s.size[s.count++] = std::uint32_t(p);
    rest -= p;
  }
  return s;
}

// Normalized WHT of each segment in place (orthonormal and self-inverse, like fwht).
inline void fwht_blocked(std::span<float> x, const segments& s) {
  std::size_t o = 0;
  for (std::uint32_t i = 0; i < s.count; ++i) {
    fwht(x.subspan(o, s.size[i]));
    o += s.size[i];
  }
}

}  // namespace strata::hadamard
