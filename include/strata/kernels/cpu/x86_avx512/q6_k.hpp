// AVX-512 Q6_K · Q8_K dot: 64 codes per step (two quarters of a half: 64 ql bytes give both
// quarters' low nibbles at once), unsigned codes 0..63 and the −32 offset applied once per
// block through bsums, as in x86_avx2/q6_k.hpp; four sub-block scales per step by vpermw.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/common.hpp"
#include "strata/quant/q6_k.hpp"

namespace strata::kernels::cpu {
namespace x86_avx512 {
namespace {

template <int R>
inline void dot_q6_k(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = quant::q6_k::block;
  using A = quant::q8_k::block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F), hi2 = _mm512_set1_epi8(0x30);

  for (std::size_t i = 0; i < n / 256; ++i) {
    const W& b = w[i];
    for (std::size_t o = 0; o < sizeof(W); o += 64) x86_avx2::prefetch_weights(&b, o);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes_of(b.scales))));
    const __m512i sc512 = _mm512_castsi256_si512(sc);
    __m512i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].bsums)));
      const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc, bs), 5);
      isum[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr));
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(bytes_of(b.ql) + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qh) + 32 * h));
      // [qh, qh >> 2]: quarter 0 and 1 high bits at bits 0-1, quarter 2 and 3 at bits 4-5.
      const __m512i zh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_slli_epi16(zh, 4), hi2));
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), _mm512_and_si512(zh, hi2));
      const __m512i s01 = _mm512_permutexvar_epi16(i16_pick_4x8(8 * h), sc512);
      const __m512i s23 = _mm512_permutexvar_epi16(i16_pick_4x8(8 * h + 4), sc512);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* aq = bytes_of(a[r][i].qs) + 128 * h;
        const __m512i p01 = _mm512_madd_epi16(_mm512_maddubs_epi16(q01, _mm512_loadu_si512(aq)), s01);
        const __m512i p23 = _mm512_madd_epi16(_mm512_maddubs_epi16(q23, _mm512_loadu_si512(aq + 64)), s23);
        isum[r] = _mm512_add_epi32(isum[r], _mm512_add_epi32(p01, p23));
      }
    }
    const float d = fp16_to_f32(b.d.bits);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d * a[r][i].d), _mm512_cvtepi32_ps(isum[r]), acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
}

}  // namespace
}  // namespace x86_avx512

template <isa Isa>
requires x86_avx512::avx512_tier<Isa>
struct dot_kernel<quant::q6_k, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx512::dot_q6_k<1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx512::dot_q6_k<4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
