// AVX2 Q4_K · Q8_K dot, and the Q4_K/Q5_K kernel both formats share (Q5_K adds a fifth code
// bit). Per 256-block: Σ_j sc_j·(q·a)_j in int32 lanes (vpmaddubsw, then vpmaddwd against
// the broadcast sub-block scale), the mins term Σ_j m_j·(bsums_2j + bsums_2j+1) from the
// activation's 16-sums, then d·a.d and dmin·a.d applied once per block.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/common.hpp"
#include "strata/quant/q4_k.hpp"
#include "strata/quant/q5_k.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {

// The 12-byte scale/min packing (quant/detail/k_scale_min.hpp) → 8 scales in the low 128
// bits and 8 mins in the high 128 bits, as int16. Scales 0-3 and mins 0-3 are the low 6
// bits of bytes 0-3 and 4-7; scales/mins 4-7 take a nibble of bytes 8-11 plus the top two
// bits of bytes 0-3 / 4-7.
inline __m256i unpack_scale_min_k4(const std::uint8_t* s) noexcept {
  const std::uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const std::uint32_t u0 = load_u32(s), u1 = load_u32(s + 4), u2 = load_u32(s + 8);
  const std::uint32_t sc_lo = u0 & k6, sc_hi = (u2 & k4) | ((u0 >> 6) & k2) << 4;
  const std::uint32_t m_lo = u1 & k6, m_hi = ((u2 >> 4) & k4) | ((u1 >> 6) & k2) << 4;
  return _mm256_cvtepu8_epi16(_mm_set_epi32(int(m_hi), int(m_lo), int(sc_hi), int(sc_lo)));
}

// Σ over blocks for Q4_K (High = false) or Q5_K (High = true). Codes ≤ 31 and |a| ≤ 127 keep
// vpmaddubsw's pair sums ≤ 7874; scale ≤ 63 keeps the int32 block sum far from overflow.
template <bool High, int R>
inline void dot_q45_k(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = std::conditional_t<High, quant::q5_k::block, quant::q4_k::block>;
  using A = quant::q8_k::block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);

  for (std::size_t i = 0; i < n / 256; ++i) {
    const W& b = w[i];
    for (std::size_t o = 0; o < sizeof(W); o += 64) prefetch_weights(&b, o);
    const float d = fp16_to_f32(b.d.bits), dmin = fp16_to_f32(b.dmin.bits);
    const __m256i sm = unpack_scale_min_k4(bytes_of(b.scales));
    const __m256i scales = _mm256_permute2x128_si256(sm, sm, 0x00);  // 8 scales in both halves
    const __m128i mins = _mm256_extracti128_si256(sm, 1);

    __m256i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      // Mins first: acc −= dmin·a.d·Σ_j m_j·(bsums_2j + bsums_2j+1).
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].bsums)));
      const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const __m256i summs = _mm256_zextsi128_si256(_mm_madd_epi16(mins, pairs));
      acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a[r][i].d), _mm256_cvtepi32_ps(summs), acc[r]);
      isum[r] = _mm256_setzero_si256();
    }
    [[maybe_unused]] __m256i qh;
    if constexpr (High) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qh)));
    const std::uint8_t* qs = bytes_of(b.qs);
    // Chunk c: 32 bytes of qs hold sub-block 2c (low nibbles) and 2c+1 (high nibbles).
    const auto chunk = [&]<int C>() {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * C));
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (High) {  // fifth bit of sub-block j is qh bit j
        lo = _mm256_or_si256(lo, move_bits<2 * C, 4>(qh));
        hi = _mm256_or_si256(hi, move_bits<2 * C + 1, 4>(qh));
      }
      const __m256i s_lo = _mm256_shuffle_epi8(scales, i16_lane(2 * C));
      const __m256i s_hi = _mm256_shuffle_epi8(scales, i16_lane(2 * C + 1));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* aq = bytes_of(a[r][i].qs) + 64 * C;
        const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq)));
        const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 32)));
        isum[r] =
            _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo), _mm256_madd_epi16(p_hi, s_hi)));
      }
    };
    chunk.template operator()<0>();
    chunk.template operator()<1>();
    chunk.template operator()<2>();
    chunk.template operator()<3>();
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
struct dot_kernel<quant::q4_k, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_q45_k<false, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_q45_k<false, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
