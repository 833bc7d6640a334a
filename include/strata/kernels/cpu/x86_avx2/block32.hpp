// AVX2 dot driver shared by the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
// IQ4_NL, MXFP4) against Q8_0 / Q8_1 activations. A format supplies only an unpacker (its
// codes as 32 int8 in element order, its scale, and for the "_1" formats its min); the
// driver does the integer dot per block and the d_w·d_a scaling per block, like ggml.
//
// Unpacker U:
//   using block, act_block              weight block; q8_0::block or q8_1::block
//   static constexpr bool is_signed     codes in −128..127 (else 0..31, fed to vpmaddubsw as u8)
//   static constexpr bool has_min       x = d·q + m; adds m·s per block (s from the Q8_1 act)
//   codes(const block&) → __m256i       32 codes, element order
//   scale(const block&) → const float*  d (x = d·code), as a pointer into a scale table
//   min(const block&) → const float*    m, has_min only
//
// Port budget (why it looks like this): per block and row the dot is vpsignb, vpmaddubsw,
// vpmaddwd, vcvtdq2ps, vmulps, vfmadd (all ports 0/1) plus loads; scales come from
// scale_tables.hpp as broadcasts from memory and the nibbles from vbroadcasti128 + vpsrlvd,
// so nothing queues on the shuffle port, which converting fp16 scales in registers saturated.
#pragma once
#include "strata/kernels/cpu/x86_avx2/common.hpp"

namespace strata::kernels::cpu::x86_avx2 {
namespace {

// out[r] = Σ_blocks d_w·d_a·Σ(code·a) [+ m·s] for R activation rows `stride` bytes apart.
// Even and odd blocks feed separate accumulators (two FMA chains per row); rows never
// interact, so out[r] is bit-identical for every R.
template <class U, int R>
inline void dot_block32(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = typename U::block;
  using A = typename U::act_block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m256 acc[R][2];
  float mins[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    mins[r] = 0.0f;
  }
  const std::size_t nb = n / 32;
  for (std::size_t i = 0; i < nb; i += 2) {
    prefetch_weights(w + i);
    // Blocks i and i+1 into accumulators 0 and 1 (a fully unrolled constant index keeps them
    // in registers; a by-reference lambda made GCC store them to the stack every step).
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) {
      if (i + j >= nb) break;
      const __m256i c = U::codes(w[i + j]);
      const __m256i x = U::is_signed ? _mm256_abs_epi8(c) : c;
      const __m256 dw = _mm256_broadcast_ss(U::scale(w[i + j]));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const A& b = a[r][i + j];
        __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qs)));
        if constexpr (U::is_signed) q = _mm256_sign_epi8(q, c);
        const __m256 s = _mm256_mul_ps(dw, _mm256_broadcast_ss(fp16_ptr(b.d.bits)));
        acc[r][j] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(mul_sum_u8s8(x, q)), acc[r][j]);
        if constexpr (U::has_min) mins[r] += *U::min(w[i + j]) * *fp16_ptr(b.s.bits);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1])) + mins[r];
}

}  // namespace
}  // namespace strata::kernels::cpu::x86_avx2
