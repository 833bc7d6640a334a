// AVX-512 Q5_1 · Q8_1 dot: unsigned 5-bit codes (the high bits of two blocks as one mask
// register add 16), plus m·s per block.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/block32.hpp"
#include "strata/quant/q5_1.hpp"

namespace strata::kernels::cpu {
namespace x86_avx512 {
namespace {
struct q5_1_unpack {
  using block = quant::q5_1::block;
  using act_block = quant::q8_1::block;
  static constexpr bool is_signed = false, has_min = true;
  static __m256i codes(const block& b) noexcept {
    const __m256i hi = x86_avx2::bits_to_bytes(load_u32(bytes_of(b.qh)));
    return _mm256_or_si256(x86_avx2::nibbles32(bytes_of(b.qs)), _mm256_and_si256(hi, _mm256_set1_epi8(0x10)));
  }
  static __m512i codes2(const block& b0, const block& b1) noexcept {
    const __mmask64 hi = _cvtu64_mask64(load_u32(bytes_of(b0.qh)) | std::uint64_t(load_u32(bytes_of(b1.qh))) << 32);
    const __m512i lo = nibbles64(bytes_of(b0.qs), bytes_of(b1.qs));
    return _mm512_mask_add_epi8(lo, hi, lo, _mm512_set1_epi8(16));
  }
  static const float* scale(const block& b) noexcept { return x86_avx2::fp16_ptr(b.d.bits); }
  static const float* min(const block& b) noexcept { return x86_avx2::fp16_ptr(b.m.bits); }
};
}  // namespace
}  // namespace x86_avx512

template <isa Isa>
requires x86_avx512::avx512_tier<Isa>
struct dot_kernel<quant::q5_1, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx512::dot_block32<Isa, x86_avx512::q5_1_unpack, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx512::dot_block32<Isa, x86_avx512::q5_1_unpack, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
