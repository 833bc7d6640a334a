// AVX2 F16: activation conversion with vcvtps2ph (round to nearest even, bit-identical to
// core/fp16.hpp's to_fp16), widening dequant, and the F16 · F16 dot in float.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/float_dot.hpp"
#include "strata/quant/f16.hpp"

namespace strata::kernels::cpu {

template <>
struct act_kernel<quant::f16, isa::avx2> {
  static constexpr bool available = true;
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* y = static_cast<std::uint16_t*>(out);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) y[i] = x86_avx2::f32_to_fp16(x[i]);
  }
};

template <>
struct dequant_kernel<quant::f16, isa::avx2> {
  static constexpr bool available = true;
  static void dequant_row(const void* w, float* y, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, x86_avx2::f16_loader::load8(w, i));
    for (; i < n; ++i) y[i] = x86_avx2::f16_loader::at(w, i);
  }
};

template <>
struct dot_kernel<quant::f16, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_float<x86_avx2::f16_loader, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_float<x86_avx2::f16_loader, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
