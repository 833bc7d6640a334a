// AVX2 Q4_1 · Q8_1 dot: unsigned nibble codes through the shared 32-block driver, plus the
// min term m·s per block (s = d_a·Σq_a carried by the Q8_1 activation).
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/block32.hpp"
#include "strata/quant/q4_1.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {
struct q4_1_unpack {
  using block = quant::q4_1::block;
  using act_block = quant::q8_1::block;
  static constexpr bool is_signed = false, has_min = true;
  static __m256i codes(const block& b) noexcept { return nibbles32(bytes_of(b.qs)); }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
  static const float* min(const block& b) noexcept { return fp16_ptr(b.m.bits); }
};
}  // namespace
}  // namespace x86_avx2

template <>
struct dot_kernel<quant::q4_1, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_block32<x86_avx2::q4_1_unpack, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_block32<x86_avx2::q4_1_unpack, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
