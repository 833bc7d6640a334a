// Byte layout of a packed TurboQuant vector. A head vector of head_dim coordinates is cut into
// power-of-two segments (hadamard::split_into_segments: 128 → {128}, 96 → {64, 32}); each
// segment is one block, stored back to back in segment order. Shaders derive their layout from
// the constants below; nothing here depends on the host's endianness beyond the fp16 scale
// (little-endian, as everywhere in GGUF).
//
// One block of n coordinates (n a power of two, 16..256) at b bits:
//   bytes [0, 2)          fp16 scale s: the rotated segment is ỹ_i = s·c[idx_i]/√n
//   bytes [2, 2 + n·p/8)  "low plane": the low p = plane_bits(b) bits of each index; element i
//                         sits at byte i·p/8, bit (i·p) mod 8 (LSB first)
//   b = 3 only: bytes [2 + n/4, 2 + n/4 + n/8)  "high plane": bit 2 of each index; element i
//                         at byte i/8, bit i mod 8
// p = 1, 2, 2, 4 for b = 1, 2, 3, 4, so no field straddles a byte, and 8 consecutive elements
// always occupy exactly b bytes (p bytes of the low plane + 1 byte of the high plane for b = 3).
// Example: n = 128, b = 3 → 2 + 32 + 16 = 50 bytes (3.125 bits per coordinate).
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::turboquant {

inline constexpr std::size_t block_scale_offset = 0;   // fp16 scale
inline constexpr std::size_t block_header_bytes = 2;   // = offset of the low plane

constexpr std::uint32_t low_plane_bits(std::uint32_t bits) noexcept { return bits == 3 ? 2 : bits; }
constexpr std::uint32_t high_plane_bits(std::uint32_t bits) noexcept { return bits == 3 ? 1 : 0; }
constexpr std::size_t low_plane_offset(std::size_t /*n*/, std::uint32_t /*bits*/) noexcept { return block_header_bytes; }
constexpr std::size_t low_plane_bytes(std::size_t n, std::uint32_t bits) noexcept { return n * low_plane_bits(bits) / 8; }
constexpr std::size_t high_plane_offset(std::size_t n, std::uint32_t bits) noexcept {
  return block_header_bytes + low_plane_bytes(n, bits);
}
constexpr std::size_t high_plane_bytes(std::size_t n, std::uint32_t bits) noexcept { return n * high_plane_bits(bits) / 8; }
constexpr std::size_t block_bytes(std::size_t n, std::uint32_t bits) noexcept {
  return block_header_bytes + n * bits / 8;
}

static_assert(block_bytes(128, 3) == 50);
static_assert(block_bytes(128, 4) == 66);
static_assert(block_bytes(128, 2) == 34);
static_assert(block_bytes(64, 3) == 26);
static_assert(high_plane_offset(128, 3) + high_plane_bytes(128, 3) == block_bytes(128, 3));

// Writes the b-bit indices idx[0..n) into the planes of a block (the scale is not touched).
inline void pack_indices(const std::uint8_t* idx, std::size_t n, std::uint32_t bits, std::uint8_t* block) noexcept {
  const std::uint32_t p = low_plane_bits(bits), mask = (1u << p) - 1;
  std::uint8_t* lo = block + low_plane_offset(n, bits);
  std::uint8_t* hi = block + high_plane_offset(n, bits);
  for (std::size_t i = 0; i < low_plane_bytes(n, bits); ++i) lo[i] = 0;
  for (std::size_t i = 0; i < high_plane_bytes(n, bits); ++i) hi[i] = 0;
  for (std::size_t i = 0; i < n; ++i) {
    lo[i * p / 8] |= std::uint8_t((idx[i] & mask) << (i * p % 8));
    if (bits == 3) hi[i / 8] |= std::uint8_t(((idx[i] >> 2) & 1) << (i % 8));
  }
}

// Reads the indices back (reference for the fused kernels).
inline void unpack_indices(const std::uint8_t* block, std::size_t n, std::uint32_t bits, std::uint8_t* idx) noexcept {
  const std::uint32_t p = low_plane_bits(bits), mask = (1u << p) - 1;
  const std::uint8_t* lo = block + low_plane_offset(n, bits);
  const std::uint8_t* hi = block + high_plane_offset(n, bits);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t v = (lo[i * p / 8] >> (i * p % 8)) & mask;
    if (bits == 3) v |= ((hi[i / 8] >> (i % 8)) & 1u) << 2;
    idx[i] = std::uint8_t(v);
  }
}

}  // namespace strata::turboquant
