// AVX-512 Q3_K · Q8_K dot: 64 codes per step ([qs, qs >> 2] gives two quarters' low bits),
// the high bits added as 4 through a mask register, unsigned codes u = q + 4 with the −4
// applied once per block through bsums (see x86_avx2/q3_k.hpp).
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/common.hpp"
#include "strata/quant/q3_k.hpp"

namespace strata::kernels::cpu {
namespace x86_avx512 {
namespace {

// The 16 six-bit scales as signed int16 (see x86_avx2::unpack_scales_q3_k).
inline __m256i unpack_scales_q3_k(const std::uint8_t* s) noexcept {
  const std::uint64_t lo = load_u64(s);
  const std::uint32_t hi = load_u32(s + 8), m2 = 0x03030303u;
  const __m128i nib =
      _mm_set_epi64x(std::int64_t((lo >> 4) & 0x0F0F0F0F0F0F0F0Full), std::int64_t(lo & 0x0F0F0F0F0F0F0F0Full));
  const __m128i top = _mm_set_epi32(int((hi >> 6) & m2), int((hi >> 4) & m2), int((hi >> 2) & m2), int(hi & m2));
  return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(nib, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32)));
}

template <int R>
inline void dot_q3_k(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = quant::q3_k::block;
  using A = quant::q8_k::block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i low2 = _mm512_set1_epi8(0x03), four = _mm512_set1_epi8(4);

  for (std::size_t i = 0; i < n / 256; ++i) {
    const W& b = w[i];
    for (std::size_t o = 0; o < sizeof(W); o += 64) x86_avx2::prefetch_weights(&b, o);
    const __m256i sc = unpack_scales_q3_k(bytes_of(b.scales));
    const __m512i sc512 = _mm512_castsi256_si512(sc);
    __m512i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].bsums)));
      const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc, bs), 2);
      isum[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr));
    }
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.hmask)));
    const __m512i hm2 = _mm512_inserti64x4(_mm512_castsi256_si512(hm), hm, 1);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qs) + 32 * h));
      const __m512i zq = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 2), 1);
      // Quarter k's high bit is hmask bit 4h + k: quarters (0, 1), then (2, 3), per register.
      const auto bits = [](int k) {
        return _mm512_inserti64x4(_mm512_set1_epi8(char(1 << k)), _mm256_set1_epi8(char(1 << (k + 1))), 1);
      };
      __m512i u01 = _mm512_and_si512(zq, low2);
      __m512i u23 = _mm512_and_si512(_mm512_srli_epi16(zq, 4), low2);
      u01 = _mm512_mask_add_epi8(u01, _mm512_test_epi8_mask(hm2, bits(4 * h)), u01, four);
      u23 = _mm512_mask_add_epi8(u23, _mm512_test_epi8_mask(hm2, bits(4 * h + 2)), u23, four);
      const __m512i s01 = _mm512_permutexvar_epi16(i16_pick_4x8(8 * h), sc512);
      const __m512i s23 = _mm512_permutexvar_epi16(i16_pick_4x8(8 * h + 4), sc512);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* aq = bytes_of(a[r][i].qs) + 128 * h;
        const __m512i p01 = _mm512_madd_epi16(_mm512_maddubs_epi16(u01, _mm512_loadu_si512(aq)), s01);
        const __m512i p23 = _mm512_madd_epi16(_mm512_maddubs_epi16(u23, _mm512_loadu_si512(aq + 64)), s23);
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
struct dot_kernel<quant::q3_k, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx512::dot_q3_k<1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx512::dot_q3_k<4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
