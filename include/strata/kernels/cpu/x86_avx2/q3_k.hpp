// AVX2 Q3_K · Q8_K dot. Codes are used unsigned (lo | hi << 2 ∈ 0..7, i.e. q + 4) and the
// −4 offset comes out once per block through the activation's 16-sums:
//   Σ_j s_j·Σ (u − 4)·a = Σ_j s_j·Σ u·a − 4·Σ_j s_j·bsums_j   (s_j the signed 6-bit scale).
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/common.hpp"
#include "strata/quant/q3_k.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {

// The 16 six-bit scales (quant/q3_k.hpp layout) as signed int16 s_j − 32: low nibbles from
// bytes 0-7 (j < 8 low, j ≥ 8 high nibble), bits 4-5 of s_j in byte 8 + j%4 at bits 2(j/4).
inline __m256i unpack_scales_q3_k(const std::uint8_t* s) noexcept {
  const std::uint64_t lo = load_u64(s);
  const std::uint32_t hi = load_u32(s + 8), m2 = 0x03030303u;
  const __m128i nib =
      _mm_set_epi64x(std::int64_t((lo >> 4) & 0x0F0F0F0F0F0F0F0Full), std::int64_t(lo & 0x0F0F0F0F0F0F0F0Full));
  const __m128i top = _mm_set_epi32(int((hi >> 6) & m2), int((hi >> 4) & m2), int((hi >> 2) & m2), int(hi & m2));
  const __m128i u = _mm_or_si128(nib, _mm_slli_epi16(top, 4));
  return _mm256_cvtepi8_epi16(_mm_sub_epi8(u, _mm_set1_epi8(32)));
}

template <int R>
inline void dot_q3_k(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = quant::q3_k::block;
  using A = quant::q8_k::block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i low2 = _mm256_set1_epi8(0x03);

  for (std::size_t i = 0; i < n / 256; ++i) {
    const W& b = w[i];
    for (std::size_t o = 0; o < sizeof(W); o += 64) prefetch_weights(&b, o);
    const __m256i sc = unpack_scales_q3_k(bytes_of(b.scales));
    __m256i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].bsums)));
      isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc, bs), 2));
    }
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.hmask)));
    // Half h: qs[32h..] holds quarter k in bits 2k..2k+1; the high bit of quarter k is hmask
    // bit 4h + k; quarter k spans sub-blocks 8h+2k and 8h+2k+1.
    const auto half = [&]<int H>() {
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qs) + 32 * H));
      const __m256i sch = _mm256_permute2x128_si256(sc, sc, H ? 0x11 : 0x00);
      const __m256i u[4] = {
          _mm256_or_si256(_mm256_and_si256(qs, low2), move_bits<4 * H + 0, 2>(hm)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 2), low2), move_bits<4 * H + 1, 2>(hm)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 4), low2), move_bits<4 * H + 2, 2>(hm)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 6), low2), move_bits<4 * H + 3, 2>(hm))};
      for (int k = 0; k < 4; ++k) {
        const __m256i s = _mm256_shuffle_epi8(sch, i16_lane_pair(2 * k));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256i aq =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].qs) + 128 * H + 32 * k));
          isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u[k], aq), s));
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
struct dot_kernel<quant::q3_k, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_q3_k<1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_q3_k<4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
