// AVX2 IQ4_XS · Q8_K dot: per sub-block of 32, grid values via vpshufb, a signed int8 dot
// (|v| ≤ 127 keeps vpmaddubsw exact), times the 6-bit scale ls − 32 in int32; d·a.d once
// per block. The reference scales each sub-block in float; the integer sum here is exact,
// so the two differ only by float rounding.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/common.hpp"
#include "strata/quant/iq4_xs.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {

template <int R>
inline void dot_iq4_xs(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = quant::iq4_xs::block;
  using A = quant::q8_k::block;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i grid =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes_of(quant::iq4_nl::values))));

  for (std::size_t i = 0; i < n / 256; ++i) {
    const W& b = w[i];
    for (std::size_t o = 0; o < sizeof(W); o += 64) prefetch_weights(&b, o);
    // ls_ib − 32: bits 0-3 from scales_l (nibble ib of the little-endian u32), bits 4-5 from
    // scales_h bits 2ib..2ib+1.
    const std::uint32_t sl = load_u32(bytes_of(b.scales_l)), sh = b.scales_h;
    alignas(16) std::int16_t ls[8];
    for (int ib = 0; ib < 8; ++ib) ls[ib] = std::int16_t(int(((sl >> 4 * ib) & 0xF) | ((sh >> 2 * ib) & 3) << 4) - 32);
    const __m256i scales = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(ls)));
    __m256i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const __m256i v = _mm256_shuffle_epi8(grid, nibbles32(bytes_of(b.qs) + 16 * ib));
      const __m256i av_abs = _mm256_abs_epi8(v);
      const __m256i s = _mm256_shuffle_epi8(scales, i16_lane(ib));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256i aq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(a[r][i].qs) + 32 * ib));
        isum[r] =
            _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(av_abs, _mm256_sign_epi8(aq, v)), s));
      }
    }
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
struct dot_kernel<quant::iq4_xs, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_iq4_xs<1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_iq4_xs<4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
