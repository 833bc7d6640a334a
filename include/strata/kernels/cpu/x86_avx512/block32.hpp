// AVX-512 dot driver for the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
// IQ4_NL, MXFP4): two blocks per 512-bit register, with one vpdpbusd per block pair on VNNI
// CPUs; scales come from scale_tables.hpp as broadcasts from memory (see x86_avx2/block32.hpp
// for why). The format's unpacker is x86_avx2/block32.hpp's plus
//   codes2(const block& b0, const block& b1) → __m512i   64 codes, b0's first,
// and its 256-bit codes() serves the odd last block.
#pragma once
#include "strata/kernels/cpu/x86_avx512/common.hpp"

namespace strata::kernels::cpu::x86_avx512 {
namespace {

// out[r] = Σ_blocks d_w·d_a·Σ(code·a) [+ m·s], one FMA per block pair and row (the lanes of
// block 0 and block 1 carry their own scale). Rows never interact: bit-identical for every R.
template <isa Isa, class U, int R>
inline void dot_block32(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = typename U::block;
  using A = typename U::act_block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m512 acc[R];
  float mins[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    mins[r] = 0.0f;
  }
  // [*p0 × 8, *p1 × 8]: two broadcasts from memory and one insert.
  const auto pair = [](const float* p0, const float* p1) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_broadcast_ss(p0)), _mm256_broadcast_ss(p1), 1);
  };
  const std::size_t nb = n / 32;
  std::size_t i = 0;
  for (; i + 1 < nb; i += 2) {
    x86_avx2::prefetch_weights(w + i);
    const __m512i c = U::codes2(w[i], w[i + 1]);
    const __m512i x = U::is_signed ? _mm512_abs_epi8(c) : c;
    const __m512 dw = pair(U::scale(w[i]), U::scale(w[i + 1]));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const A& b0 = a[r][i];
      const A& b1 = a[r][i + 1];
      __m512i q = load2x256(bytes_of(b0.qs), bytes_of(b1.qs));
      if constexpr (U::is_signed) q = apply_sign(q, c);
      const __m512i p = dot_u8s8<Isa>(_mm512_setzero_si512(), x, q);
      const __m512 s = _mm512_mul_ps(dw, pair(x86_avx2::fp16_ptr(b0.d.bits), x86_avx2::fp16_ptr(b1.d.bits)));
      acc[r] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(p), acc[r]);
      if constexpr (U::has_min) {
        mins[r] += *U::min(w[i]) * *x86_avx2::fp16_ptr(b0.s.bits);
        mins[r] += *U::min(w[i + 1]) * *x86_avx2::fp16_ptr(b1.s.bits);
      }
    }
  }
  if (i < nb) {
    const __m256i c = U::codes(w[i]);
    const __m256i x = U::is_signed ? _mm256_abs_epi8(c) : c;
    const __m256 dw = _mm256_broadcast_ss(U::scale(w[i]));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const A& b0 = a[r][i];
      __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b0.qs)));
      if constexpr (U::is_signed) q = _mm256_sign_epi8(q, c);
      const __m256i p = dot_u8s8<Isa>(_mm256_setzero_si256(), x, q);
      const __m256 t =
          _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(x86_avx2::fp16_ptr(b0.d.bits))), _mm256_cvtepi32_ps(p));
      acc[r] = _mm512_add_ps(acc[r], _mm512_zextps256_ps512(t));
      if constexpr (U::has_min) mins[r] += *U::min(w[i]) * *x86_avx2::fp16_ptr(b0.s.bits);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) + mins[r];
}

}  // namespace
}  // namespace strata::kernels::cpu::x86_avx512
