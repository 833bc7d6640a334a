// AVX2 Q5_0 · Q8_0 dot: the 5-bit code minus 16 is the nibble with 0xF0 or-ed in where the
// high bit is clear (lo − 16 in two's complement), then the shared 32-block driver.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/block32.hpp"
#include "strata/quant/q5_0.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {
struct q5_0_unpack {
  using block = quant::q5_0::block;
  using act_block = quant::q8_0::block;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i codes(const block& b) noexcept {
    const __m256i hi = bits_to_bytes(load_u32(bytes_of(b.qh)));
    return _mm256_or_si256(nibbles32(bytes_of(b.qs)), _mm256_andnot_si256(hi, _mm256_set1_epi8(char(0xF0))));
  }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
};
}  // namespace
}  // namespace x86_avx2

template <>
struct dot_kernel<quant::q5_0, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_block32<x86_avx2::q5_0_unpack, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_block32<x86_avx2::q5_0_unpack, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
