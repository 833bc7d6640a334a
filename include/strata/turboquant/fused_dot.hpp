// Fused TurboQuant attention kernels that never materialize a dequantized key or value:
//   dot_rotated:        ⟨R·q, ỹ⟩ = Σ_seg (s/√n)·Σ_i q′_i·c[idx_i]   (= ⟨q, x̃⟩, R orthogonal)
//   accumulate_rotated: acc += w·ỹ, in the rotated domain; the caller applies Rᵀ once per head.
// Indices are decoded 8 at a time: 8 consecutive elements always occupy `bits` bytes (block.hpp),
// which is also the natural unit of a GLSL port (one uint32 load of the low plane covers 16
// elements at p = 2). kernels_for() picks the per-bit-width functions (AVX2 when the CPU has
// it, fused_dot_avx2.hpp) once per cache; reference_kernels_for() is the scalar definition.
#pragma once
#include <cstdint>

#include "strata/turboquant/format.hpp"
#include "strata/turboquant/fused_dot_avx2.hpp"

namespace strata::turboquant {

namespace detail {

// Indices of elements 8g..8g+7 of a block with n elements.
template <std::uint32_t Bits>
inline void decode8(const std::uint8_t* blk, std::uint32_t n, std::uint32_t g, std::uint32_t out[8]) noexcept {
  const std::uint8_t* lo = blk + block_header_bytes + g * low_plane_bits(Bits);
  if constexpr (Bits == 1) {
    for (std::uint32_t k = 0; k < 8; ++k) out[k] = (lo[0] >> k) & 1u;
  } else if constexpr (Bits == 4) {
    for (std::uint32_t k = 0; k < 4; ++k) {
      out[2 * k] = lo[k] & 0xFu;
      out[2 * k + 1] = lo[k] >> 4;
    }
  } else {  // 2-bit low plane; bit 2 from the high plane for Bits == 3
    for (std::uint32_t k = 0; k < 4; ++k) {
      out[k] = (lo[0] >> (2 * k)) & 3u;
      out[k + 4] = (lo[1] >> (2 * k)) & 3u;
    }
    if constexpr (Bits == 3) {
      const std::uint8_t h = blk[high_plane_offset(n, 3) + g];
      for (std::uint32_t k = 0; k < 8; ++k) out[k] |= ((h >> k) & 1u) << 2;
    }
  }
}

template <std::uint32_t Bits>
inline float dot_rotated(const format& f, const float* q_rot, const std::uint8_t* row) noexcept {
  float total = 0.0f;
  for (const auto& sg : f.segments()) {
    const std::uint8_t* blk = row + sg.byte_offset;
    const float* q = q_rot + sg.elem_offset;
    const float* c = sg.cb.centroids.data();
    float acc[8] = {};
    std::uint32_t id[8];
    for (std::uint32_t g = 0; g < sg.n / 8; ++g) {
      decode8<Bits>(blk, sg.n, g, id);
      for (std::uint32_t k = 0; k < 8; ++k) acc[k] += q[8 * g + k] * c[id[k]];
    }
    const float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    total += format::scale_of(blk) * sg.inv_sqrt_n * s;
  }
  return total;
}

template <std::uint32_t Bits>
inline void accumulate_rotated(const format& f, float w, const std::uint8_t* row, float* acc) noexcept {
  for (const auto& sg : f.segments()) {
    const std::uint8_t* blk = row + sg.byte_offset;
    float* a = acc + sg.elem_offset;
    const float* c = sg.cb.centroids.data();
    const float ws = w * format::scale_of(blk) * sg.inv_sqrt_n;
    std::uint32_t id[8];
    for (std::uint32_t g = 0; g < sg.n / 8; ++g) {
      decode8<Bits>(blk, sg.n, g, id);
      for (std::uint32_t k = 0; k < 8; ++k) a[8 * g + k] += ws * c[id[k]];
    }
  }
}

}  // namespace detail

struct fused_kernels {
  float (*dot_rotated)(const format&, const float* q_rot, const std::uint8_t* row) noexcept;
  void (*accumulate_rotated)(const format&, float w, const std::uint8_t* row, float* acc) noexcept;
};

// The scalar reference kernels (what the SIMD versions are tested against).
inline fused_kernels reference_kernels_for(std::uint32_t bits) noexcept {
  switch (bits) {
    case 1: return {detail::dot_rotated<1>, detail::accumulate_rotated<1>};
    case 2: return {detail::dot_rotated<2>, detail::accumulate_rotated<2>};
    case 3: return {detail::dot_rotated<3>, detail::accumulate_rotated<3>};
    default: return {detail::dot_rotated<4>, detail::accumulate_rotated<4>};
  }
}

// The fastest kernels this CPU runs (AVX2 when present), chosen once per cache.
inline fused_kernels kernels_for(std::uint32_t bits) noexcept {
#if defined(STRATA_TURBOQUANT_AVX2)
  if (avx2::cpu_has_avx2()) switch (bits) {
      case 1: return {avx2::dot_rotated<1>, avx2::accumulate_rotated<1>};
      case 2: return {avx2::dot_rotated<2>, avx2::accumulate_rotated<2>};
      case 3: return {avx2::dot_rotated<3>, avx2::accumulate_rotated<3>};
      default: return {avx2::dot_rotated<4>, avx2::accumulate_rotated<4>};
    }
#endif
  return reference_kernels_for(bits);
}

}  // namespace strata::turboquant
