// AVX2 IQ4_NL · Q8_0 dot: the 4-bit indices pick int8 grid values with one vpshufb (the
// 16-entry grid is exactly one shuffle table), then the shared 32-block driver.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/block32.hpp"
#include "strata/quant/iq4_nl.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {
struct iq4_nl_unpack {
  using block = quant::iq4_nl::block;
  using act_block = quant::q8_0::block;
  static constexpr bool is_signed = true, has_min = false;  // grid values in −127..113
  static __m256i codes(const block& b) noexcept {
    const __m256i grid =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes_of(quant::iq4_nl::values))));
    return _mm256_shuffle_epi8(grid, nibbles32(bytes_of(b.qs)));
  }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
};
}  // namespace
}  // namespace x86_avx2

template <>
struct dot_kernel<quant::iq4_nl, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_block32<x86_avx2::iq4_nl_unpack, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_block32<x86_avx2::iq4_nl_unpack, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
