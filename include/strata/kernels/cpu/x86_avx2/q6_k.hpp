// AVX2 Q6_K · Q8_K dot. Codes are used unsigned (lo | hi << 4 ∈ 0..63) and the −32 offset
// is applied once per block through the activation's 16-sums:
//   Σ_j sc_j·Σ (q − 32)·a = Σ_j sc_j·Σ q·a − 32·Σ_j sc_j·bsums_j,
// which saves ggml's second vpmaddubsw per 32 codes. All exact in int32.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/common.hpp"
#include "strata/quant/q6_k.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {

// vpmaddubsw pair sums ≤ 2·63·127 = 16002; with |sc| ≤ 128 a block stays below 2^29.
template <int R>
inline void dot_q6_k(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = quant::q6_k::block;
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
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes_of(b.scales))));
    __m256i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].bsums)));
      isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc, bs), 5));
    }
    // Half h covers elements 128h..128h+127: ql[64h..] (quarters 0/2 and 1/3 share bytes),
    // qh[32h..] (quarter k in bits 2k..2k+1), scales 8h..8h+7.
    const auto half = [&]<int H>() {
      const std::uint8_t* ql = bytes_of(b.ql) + 64 * H;
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qh) + 32 * H));
      const __m256i sch = _mm256_permute2x128_si256(sc, sc, H ? 0x11 : 0x00);
      const __m256i q[4] = {_mm256_or_si256(_mm256_and_si256(ql0, low4), move_bits<0, 4, 2>(qh)),
                            _mm256_or_si256(_mm256_and_si256(ql1, low4), move_bits<2, 4, 2>(qh)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), move_bits<4, 4, 2>(qh)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), move_bits<6, 4, 2>(qh))};
      for (int k = 0; k < 4; ++k) {
        // Quarter k = sub-blocks 8h+2k (low 16 codes) and 8h+2k+1 (high 16 codes).
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
    const float d = fp16_to_f32(b.d.bits);
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
struct dot_kernel<quant::q6_k, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_q6_k<1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_q6_k<4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
