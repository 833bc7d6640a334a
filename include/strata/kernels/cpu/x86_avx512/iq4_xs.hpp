// AVX-512 IQ4_XS · Q8_K dot: two sub-blocks of 32 per step (32 qs bytes → 64 grid indices,
// vpshufb into the grid), signed × signed by |v| and a·sign(v), then each sub-block's
// ls − 32 by vpmaddwd; exact int32 per block and d·a.d once (see x86_avx2/iq4_xs.hpp).
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/common.hpp"
#include "strata/quant/iq4_xs.hpp"

namespace strata::kernels::cpu {
namespace x86_avx512 {
namespace {

template <int R>
inline void dot_iq4_xs(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = quant::iq4_xs::block;
  using A = quant::q8_k::block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i grid =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes_of(quant::iq4_nl::values))));
  const __m512i low4 = _mm512_set1_epi8(0x0F);

  for (std::size_t i = 0; i < n / 256; ++i) {
    const W& b = w[i];
    for (std::size_t o = 0; o < sizeof(W); o += 64) x86_avx2::prefetch_weights(&b, o);
    const std::uint32_t sl = load_u32(bytes_of(b.scales_l)), sh = b.scales_h;
    alignas(16) std::int16_t ls[8];
    for (int ib = 0; ib < 8; ++ib) ls[ib] = std::int16_t(int(((sl >> 4 * ib) & 0xF) | ((sh >> 2 * ib) & 3) << 4) - 32);
    const __m512i scales = _mm512_castsi128_si512(_mm_load_si128(reinterpret_cast<const __m128i*>(ls)));
    __m512i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      // qs bytes of sub-blocks 2p, 2p+1: [Qa, Qb] → lanes [Qa, Qa >> 4, Qb, Qb >> 4].
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qs) + 32 * p));
      const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
      const __m512i idx = _mm512_and_si512(_mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(3, 1, 2, 0)), low4);
      const __m512i v = _mm512_shuffle_epi8(grid, idx);
      const __m512i v_abs = _mm512_abs_epi8(v);
      const __m512i s = _mm512_permutexvar_epi16(i16_pick_2x16(2 * p), scales);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i aq = apply_sign(_mm512_loadu_si512(bytes_of(a[r][i].qs) + 64 * p), v);
        isum[r] = _mm512_add_epi32(isum[r], _mm512_madd_epi16(_mm512_maddubs_epi16(v_abs, aq), s));
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
struct dot_kernel<quant::iq4_xs, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx512::dot_iq4_xs<1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx512::dot_iq4_xs<4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
