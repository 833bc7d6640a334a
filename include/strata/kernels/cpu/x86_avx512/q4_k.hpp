// AVX-512 Q4_K · Q8_K dot, and the Q4_K/Q5_K kernel both share: one 512-bit step per 64
// codes (sub-blocks 2c and 2c+1: the low and high nibbles of 32 qs bytes), vpmaddubsw, then
// vpmaddwd against both sub-blocks' scales picked by vpermw. Integer sums per block are exact;
// the mins term and the d·a.d / dmin·a.d products are as in x86_avx2/q4_k.hpp. VNNI would
// not save an instruction here (the scale multiply still needs vpmaddwd), so both tiers
// share the code.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/common.hpp"
#include "strata/quant/q4_k.hpp"
#include "strata/quant/q5_k.hpp"

namespace strata::kernels::cpu {
namespace x86_avx512 {
namespace {

// 12 packed bytes → int16 [sc_0..sc_7, m_0..m_7] (see x86_avx2::unpack_scale_min_k4).
inline __m256i unpack_scale_min_k4(const std::uint8_t* s) noexcept {
  const std::uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const std::uint32_t u0 = load_u32(s), u1 = load_u32(s + 4), u2 = load_u32(s + 8);
  const std::uint32_t sc_lo = u0 & k6, sc_hi = (u2 & k4) | ((u0 >> 6) & k2) << 4;
  const std::uint32_t m_lo = u1 & k6, m_hi = ((u2 >> 4) & k4) | ((u1 >> 6) & k2) << 4;
  return _mm256_cvtepu8_epi16(_mm_set_epi32(int(m_hi), int(m_lo), int(sc_hi), int(sc_lo)));
}

template <bool High, int R>
inline void dot_q45_k(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = std::conditional_t<High, quant::q5_k::block, quant::q4_k::block>;
  using A = quant::q8_k::block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);

  for (std::size_t i = 0; i < n / 256; ++i) {
    const W& b = w[i];
    for (std::size_t o = 0; o < sizeof(W); o += 64) x86_avx2::prefetch_weights(&b, o);
    const float d = fp16_to_f32(b.d.bits), dmin = fp16_to_f32(b.dmin.bits);
    const __m256i sm = unpack_scale_min_k4(bytes_of(b.scales));
    const __m512i sm512 = _mm512_castsi256_si512(sm);
    const __m128i mins = _mm256_extracti128_si256(sm, 1);
    __m512i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].bsums)));
      const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const __m512 summs = _mm512_zextps128_ps512(_mm_cvtepi32_ps(_mm_madd_epi16(mins, pairs)));
      acc[r] = _mm512_fnmadd_ps(_mm512_set1_ps(dmin * a[r][i].d), summs, acc[r]);
      isum[r] = _mm512_setzero_si512();
    }
    [[maybe_unused]] __m512i qh;
    if constexpr (High) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qh)));
      qh = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
    }
    const std::uint8_t* qs = bytes_of(b.qs);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      __m512i codes = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), low4);
      if constexpr (High) {  // fifth bit: qh bit 2c for the low 32 codes, 2c+1 for the high 32
        const __m512i bit =
            _mm512_inserti64x4(_mm512_set1_epi8(char(1 << (2 * c))), _mm256_set1_epi8(char(2 << (2 * c))), 1);
        codes = _mm512_mask_add_epi8(codes, _mm512_test_epi8_mask(qh, bit), codes, _mm512_set1_epi8(16));
      }
      const __m512i s = _mm512_permutexvar_epi16(i16_pick_2x16(2 * c), sm512);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i aq = _mm512_loadu_si512(bytes_of(a[r][i].qs) + 64 * c);
        isum[r] = _mm512_add_epi32(isum[r], _mm512_madd_epi16(_mm512_maddubs_epi16(codes, aq), s));
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
struct dot_kernel<quant::q4_k, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx512::dot_q45_k<false, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx512::dot_q45_k<false, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
