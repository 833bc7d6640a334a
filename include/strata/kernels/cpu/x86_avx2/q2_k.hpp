// AVX2 Q2_K · Q8_K dot: Σ_j sc_j·(q·a)_j in int32 lanes per block, the mins term
// Σ_j m_j·bsums_j from the activation's 16-sums, then d·a.d and dmin·a.d once per block.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/common.hpp"
#include "strata/quant/q2_k.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {

template <int R>
inline void dot_q2_k(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = quant::q2_k::block;
  using A = quant::q8_k::block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i low2 = _mm256_set1_epi8(0x03), low4 = _mm256_set1_epi8(0x0F);

  for (std::size_t i = 0; i < n / 256; ++i) {
    const W& b = w[i];
    for (std::size_t o = 0; o < sizeof(W); o += 64) prefetch_weights(&b, o);
    const float d = fp16_to_f32(b.d.bits), dmin = fp16_to_f32(b.dmin.bits);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes_of(b.scales)));
    const __m256i sc = _mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm256_castsi256_si128(low4)));
    const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm256_castsi256_si128(low4)));
    __m256i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].bsums)));
      acc[r] =
          _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a[r][i].d), _mm256_cvtepi32_ps(_mm256_madd_epi16(mn, bs)), acc[r]);
      isum[r] = _mm256_setzero_si256();
    }
    // Half h: qs[32h..] holds quarter k in bits 2k..2k+1 = sub-blocks 8h+2k and 8h+2k+1.
    const auto half = [&]<int H>() {
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qs) + 32 * H));
      const __m256i sch = _mm256_permute2x128_si256(sc, sc, H ? 0x11 : 0x00);
      const __m256i q[4] = {_mm256_and_si256(qs, low2), _mm256_and_si256(_mm256_srli_epi16(qs, 2), low2),
                            _mm256_and_si256(_mm256_srli_epi16(qs, 4), low2),
                            _mm256_and_si256(_mm256_srli_epi16(qs, 6), low2)};
      for (int k = 0; k < 4; ++k) {
        const __m256i s = _mm256_shuffle_epi8(sch, i16_lane_pair(2 * k));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256i aq =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].qs) + 128 * H + 32 * k));
          isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], aq), s));
        }
      }
    };
    half.template operator()<0>();
    half.template operator()<1>();
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a[r][i].d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
}

}  // namespace
}  // namespace x86_avx2

template <>
struct dot_kernel<quant::q2_k, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_q2_k<1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_q2_k<4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
