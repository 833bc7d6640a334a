// AVX-512 Q2_K · Q8_K dot: 64 codes per step ([qs, qs >> 2] gives two quarters' bits), four
// sub-block scales by vpermw, the mins term from bsums (see x86_avx2/q2_k.hpp).
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/common.hpp"
#include "strata/quant/q2_k.hpp"

namespace strata::kernels::cpu {
namespace x86_avx512 {
namespace {

template <int R>
inline void dot_q2_k(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = quant::q2_k::block;
  using A = quant::q8_k::block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i low2 = _mm512_set1_epi8(0x03);

  for (std::size_t i = 0; i < n / 256; ++i) {
    const W& b = w[i];
    for (std::size_t o = 0; o < sizeof(W); o += 64) x86_avx2::prefetch_weights(&b, o);
    const float d = fp16_to_f32(b.d.bits), dmin = fp16_to_f32(b.dmin.bits);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes_of(b.scales)));
    const __m256i sc = _mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0x0F)));
    const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
    const __m512i sc512 = _mm512_castsi256_si512(sc);
    __m512i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].bsums)));
      const __m512 summs = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(_mm256_madd_epi16(mn, bs)));
      acc[r] = _mm512_fnmadd_ps(_mm512_set1_ps(dmin * a[r][i].d), summs, acc[r]);
      isum[r] = _mm512_setzero_si512();
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qs) + 32 * h));
      const __m512i zq = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 2), 1);
      const __m512i q01 = _mm512_and_si512(zq, low2);
      const __m512i q23 = _mm512_and_si512(_mm512_srli_epi16(zq, 4), low2);
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
struct dot_kernel<quant::q2_k, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx512::dot_q2_k<1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx512::dot_q2_k<4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
