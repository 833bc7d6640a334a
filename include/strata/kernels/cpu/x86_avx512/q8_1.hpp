// AVX-512 Q8_1 · Q8_1 dot: the codes are the bytes (s is not needed without a weight min).
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/block32.hpp"
#include "strata/quant/q8_1.hpp"

namespace strata::kernels::cpu {
namespace x86_avx512 {
namespace {
struct q8_1_unpack {
  using block = quant::q8_1::block;
  using act_block = quant::q8_1::block;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i codes(const block& b) noexcept {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qs)));
  }
  static __m512i codes2(const block& b0, const block& b1) noexcept {
    return load2x256(bytes_of(b0.qs), bytes_of(b1.qs));
  }
  static const float* scale(const block& b) noexcept { return x86_avx2::fp16_ptr(b.d.bits); }
};
}  // namespace
}  // namespace x86_avx512

template <isa Isa>
requires x86_avx512::avx512_tier<Isa>
struct dot_kernel<quant::q8_1, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx512::dot_block32<Isa, x86_avx512::q8_1_unpack, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx512::dot_block32<Isa, x86_avx512::q8_1_unpack, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
