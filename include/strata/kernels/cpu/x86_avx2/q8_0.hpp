// AVX2 Q8_0: the activation quantizer (byte-identical to quant::q8_0::quantize) and the
// Q8_0 · Q8_0 dot through the shared 32-block driver.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/block32.hpp"
#include "strata/quant/q8_0.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {

// roundf (ties away from zero) of 8 floats, as quant::detail::round_away: t = trunc(v) and
// v − t is exact, so comparing the fraction with ±0.5 decides the rounding exactly. (The
// tempting trunc(v + copysign(0.49999997, v)) is wrong for 0.5 and for |v| ≥ 2^23 − 1.)
// NaN lanes become 0, as round_away returns 0 for NaN (they appear as inf·0 when a block
// holds an infinity).
inline __m256i round_away_epi32(__m256 v) noexcept {
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(v, t);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 up = _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one);
  const __m256 down = _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one);
  return _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(t, up), down));
}

// Four vectors of 8 int32 (elements 0..31 in order) → 32 int8 in element order, saturating
// (the codes here are within ±127, so saturation never changes a value).
inline __m256i pack_i32_to_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) noexcept {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  // The in-lane packs leave dwords ordered 0 2 4 6 1 3 5 7 across the two lanes.
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One Q8_0/Q8_1 block of 32 floats: d = max|x| / 127, codes roundf(x·(1/d)) with the
// unrounded d; returns d and writes the codes. *sum gets Σ codes (for Q8_1).
inline float quantize_q8_block(const float* x, std::int8_t* qs, int* sum) noexcept {
  __m256 v[4];
  for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])), _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3])));
  const float amax = hmax(m);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = round_away_epi32(_mm256_mul_ps(v[k], vid));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
  if (sum) *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  return d;
}

struct q8_0_unpack {
  using block = quant::q8_0::block;
  using act_block = quant::q8_0::block;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i codes(const block& b) noexcept {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_of(b.qs)));
  }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
};

}  // namespace
}  // namespace x86_avx2

template <>
struct act_kernel<quant::q8_0, isa::avx2> {
  static constexpr bool available = true;
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* b = static_cast<quant::q8_0::block*>(out);
    for (std::size_t i = 0; i < n / 32; ++i) {
      const float d = x86_avx2::quantize_q8_block(x + 32 * i, reinterpret_cast<std::int8_t*>(&b[i].qs), nullptr);
      b[i].d.bits = x86_avx2::f32_to_fp16(d);
    }
  }
};

template <>
struct dot_kernel<quant::q8_0, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_block32<x86_avx2::q8_0_unpack, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_block32<x86_avx2::q8_0_unpack, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
