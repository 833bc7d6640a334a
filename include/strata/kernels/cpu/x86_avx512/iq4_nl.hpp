// AVX-512 IQ4_NL · Q8_0 dot: grid values by one vpshufb per two blocks (the 16-entry grid
// fits a 128-bit table, repeated per lane).
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/block32.hpp"
#include "strata/quant/iq4_nl.hpp"

namespace strata::kernels::cpu {
namespace x86_avx512 {
namespace {
struct iq4_nl_unpack {
  using block = quant::iq4_nl::block;
  using act_block = quant::q8_0::block;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i codes(const block& b) noexcept {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(grid()), x86_avx2::nibbles32(bytes_of(b.qs)));
  }
  static __m512i codes2(const block& b0, const block& b1) noexcept {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(grid()), nibbles64(bytes_of(b0.qs), bytes_of(b1.qs)));
  }
  static __m128i grid() noexcept {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes_of(quant::iq4_nl::values)));
  }
  static const float* scale(const block& b) noexcept { return x86_avx2::fp16_ptr(b.d.bits); }
};
}  // namespace
}  // namespace x86_avx512

template <isa Isa>
requires x86_avx512::avx512_tier<Isa>
struct dot_kernel<quant::iq4_nl, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx512::dot_block32<Isa, x86_avx512::iq4_nl_unpack, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx512::dot_block32<Isa, x86_avx512::iq4_nl_unpack, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
