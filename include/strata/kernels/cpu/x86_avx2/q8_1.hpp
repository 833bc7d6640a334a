// AVX2 Q8_1: the activation quantizer (byte-identical to quant::q8_1::quantize: Q8_0's codes
// plus s = fp16(d·Σq) with the unrounded d) and the Q8_1 · Q8_1 dot.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/block32.hpp"
#include "strata/kernels/cpu/x86_avx2/q8_0.hpp"
#include "strata/quant/q8_1.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {
struct q8_1_unpack {
  using block = quant::q8_1::block;
  using act_block = quant::q8_1::block;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i codes(const block& b) noexcept {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qs)));
  }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
};
}  // namespace
}  // namespace x86_avx2

template <>
struct act_kernel<quant::q8_1, isa::avx2> {
  static constexpr bool available = true;
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* b = static_cast<quant::q8_1::block*>(out);
    for (std::size_t i = 0; i < n / 32; ++i) {
      int sum = 0;
      const float d = x86_avx2::quantize_q8_block(x + 32 * i, reinterpret_cast<std::int8_t*>(&b[i].qs), &sum);
      b[i].d.bits = x86_avx2::f32_to_fp16(d);
      b[i].s.bits = x86_avx2::f32_to_fp16(float(sum) * d);
    }
  }
};

template <>
struct dot_kernel<quant::q8_1, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_block32<x86_avx2::q8_1_unpack, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_block32<x86_avx2::q8_1_unpack, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
