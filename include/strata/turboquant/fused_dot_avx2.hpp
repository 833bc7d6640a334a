// AVX2 versions of the fused TurboQuant kernels (fused_dot.hpp), compiled with per-function
// target attributes so the header-only library needs no -mavx2: kernels_for() picks them once
// per cache when the CPU has AVX2. Eight indices are widened to 32-bit lanes with variable
// shifts and looked up with one vpermps (8 centroids fit one register; 4 bits use two and a
// blend). Products are added lane-wise and reduced in the scalar kernel's order, so results
// are bit-identical to the scalar reference (tested).
#pragma once
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STRATA_TURBOQUANT_AVX2 1
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "strata/turboquant/format.hpp"

namespace strata::turboquant::avx2 {

#define STRATA_TQ_AVX2 __attribute__((target("avx2")))

// Centroid values of elements 8g..8g+7 of a block (its low and high planes).
template <std::uint32_t Bits>
STRATA_TQ_AVX2 inline __m256 lookup8(const std::uint8_t* lo_plane, const std::uint8_t* hi_plane, std::uint32_t g,
                                     __m256 c_lo, __m256 c_hi) noexcept {
  const std::uint8_t* lo = lo_plane + g * low_plane_bits(Bits);
  __m256i idx;
  if constexpr (Bits == 1) {
    idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(lo[0]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                           _mm256_set1_epi32(1));
  } else if constexpr (Bits == 4) {
    std::uint32_t w;
    std::memcpy(&w, lo, 4);
    idx = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(int(w)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
        _mm256_set1_epi32(15));
  } else {
    std::uint16_t w;
    std::memcpy(&w, lo, 2);
    idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                           _mm256_set1_epi32(3));
    if constexpr (Bits == 3) {
      const int h = hi_plane[g];
      const __m256i hb = _mm256_and_si256(
          _mm256_srlv_epi32(_mm256_set1_epi32(h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), _mm256_set1_epi32(1));
      idx = _mm256_or_si256(idx, _mm256_slli_epi32(hb, 2));
    }
  }
  const __m256 v = _mm256_permutevar8x32_ps(c_lo, idx);
  if constexpr (Bits == 4) {
    const __m256 hi = _mm256_permutevar8x32_ps(c_hi, idx);
    const __m256 use_hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
    return _mm256_blendv_ps(v, hi, use_hi);
  }
  return v;
}

STRATA_TQ_AVX2 inline void load_centroids(const codebook& cb, __m256& c_lo, __m256& c_hi) noexcept {
  alignas(32) float t[16] = {};
  for (std::size_t i = 0; i < cb.centroids.size(); ++i) t[i] = cb.centroids[i];
  c_lo = _mm256_load_ps(t);
  c_hi = _mm256_load_ps(t + 8);
}

template <std::uint32_t Bits>
STRATA_TQ_AVX2 inline float dot_rotated(const format& f, const float* q_rot, const std::uint8_t* row) noexcept {
  float total = 0.0f;
  for (const auto& sg : f.segments()) {
    const std::uint8_t* blk = row + sg.byte_offset;
    const float* q = q_rot + sg.elem_offset;
    const std::uint8_t *lo = blk + low_plane_offset(sg.n, Bits), *hi = blk + high_plane_offset(sg.n, Bits);
    __m256 c_lo, c_hi;
    load_centroids(sg.cb, c_lo, c_hi);
    __m256 acc = _mm256_setzero_ps();
    for (std::uint32_t g = 0; g < sg.n / 8; ++g)
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(q + 8 * g), lookup8<Bits>(lo, hi, g, c_lo, c_hi)));
    // ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)), as the scalar kernel.
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    x = _mm_hadd_ps(x, x);
    x = _mm_hadd_ps(x, x);
    total += format::scale_of(blk) * sg.inv_sqrt_n * _mm_cvtss_f32(x);
  }
  return total;
}

template <std::uint32_t Bits>
STRATA_TQ_AVX2 inline void accumulate_rotated(const format& f, float w, const std::uint8_t* row, float* acc) noexcept {
  for (const auto& sg : f.segments()) {
    const std::uint8_t* blk = row + sg.byte_offset;
    float* a = acc + sg.elem_offset;
    const std::uint8_t *lo = blk + low_plane_offset(sg.n, Bits), *hi = blk + high_plane_offset(sg.n, Bits);
    __m256 c_lo, c_hi;
    load_centroids(sg.cb, c_lo, c_hi);
    const __m256 ws = _mm256_set1_ps(w * format::scale_of(blk) * sg.inv_sqrt_n);
    for (std::uint32_t g = 0; g < sg.n / 8; ++g)
      _mm256_storeu_ps(a + 8 * g, _mm256_add_ps(_mm256_loadu_ps(a + 8 * g),
                                                _mm256_mul_ps(ws, lookup8<Bits>(lo, hi, g, c_lo, c_hi))));
  }
}

#undef STRATA_TQ_AVX2

inline bool cpu_has_avx2() noexcept { return __builtin_cpu_supports("avx2"); }

}  // namespace strata::turboquant::avx2
#endif
