// AVX2 BF16: activation rounding to bfloat16 in integer lanes (bit-identical to core/bf16.hpp's
// to_bf16: nearest even, NaN kept quiet by setting bit 6), widening dequant, and the
// BF16 · BF16 dot in float.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/float_dot.hpp"
#include "strata/quant/bf16.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {

inline std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return std::uint16_t((u >> 16) | 64u);
  return std::uint16_t((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
}

// 8 floats → 8 bfloat16 in the low 16 bits of each int32 lane.
inline __m256i f32_to_bf16_8(__m256 x) noexcept {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

}  // namespace
}  // namespace x86_avx2

template <>
struct act_kernel<quant::bf16, isa::avx2> {
  static constexpr bool available = true;
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* y = static_cast<std::uint16_t*>(out);
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256i lo = x86_avx2::f32_to_bf16_8(_mm256_loadu_ps(x + i));
      const __m256i hi = x86_avx2::f32_to_bf16_8(_mm256_loadu_ps(x + i + 8));
      // vpackusdw packs within 128-bit lanes; restore element order across them.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                          _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8));
    }
    for (; i < n; ++i) y[i] = x86_avx2::f32_to_bf16(x[i]);
  }
};

template <>
struct dequant_kernel<quant::bf16, isa::avx2> {
  static constexpr bool available = true;
  static void dequant_row(const void* w, float* y, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, x86_avx2::bf16_loader::load8(w, i));
    for (; i < n; ++i) y[i] = x86_avx2::bf16_loader::at(w, i);
  }
};

template <>
struct dot_kernel<quant::bf16, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_float<x86_avx2::bf16_loader, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_float<x86_avx2::bf16_loader, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
