// Activation quantizers (AVX2 code; the AVX-512 tiers inherit them through the table merge:
// they already keep up, a few µs per token): Q8_0 and Q8_1 byte-identical to
// quant::q8_0/q8_1::quantize, and Q8_K byte-identical to quant::q8_k::quantize.
#pragma once
#include "strata/kernels/cpu/x86/float_dot.hpp"
#include "strata/kernels/cpu/x86/hooks.hpp"
#include "strata/quant/q8_0.hpp"
#include "strata/quant/q8_1.hpp"
#include "strata/quant/q8_k.hpp"

namespace strata::kernels::cpu::x86 {
namespace {

inline int hsum_i32(__m256i v) noexcept {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}
inline __m256 abs_ps(__m256 v) noexcept { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }

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
  const float amax = v256::hmax(m);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = round_away_epi32(_mm256_mul_ps(v[k], vid));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
  if (sum) *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  return d;
}

// Q8_K: the element of largest |x| (the first on ties) maps to −127, codes nearest_int(iscale·x)
// capped at 127, d = 1/iscale, plus the 16 sums of 16 codes the K-quant dots use for their mins.
inline void quantize_q8_k_block(const float* x, quant::q8_k::block& b) noexcept {
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 32; ++k) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * k)));
  const float amax = v256::hmax(m);
  if (amax == 0.0f) {  // the reference returns a value-initialised block: all bytes zero
    std::memset(static_cast<void*>(&b), 0, sizeof b);
    return;
  }
  // The reference keeps the first element whose |x| beats every earlier one, i.e. the
  // first element with |x| == amax.
  const __m256 vamax = _mm256_set1_ps(amax);
  int first = 0;
  for (int k = 0; k < 32; ++k) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + 8 * k)), vamax, _CMP_EQ_OQ));
    if (hit) {
      first = 8 * k + __builtin_ctz(unsigned(hit));
      break;
    }
  }
  const float iscale = -127.0f / x[first];
  const __m256 vs = _mm256_set1_ps(iscale);
  auto* qs = reinterpret_cast<std::int8_t*>(&b.qs);
  auto* bsums = reinterpret_cast<std::int16_t*>(&b.bsums);
  for (int g = 0; g < 8; ++g) {  // 32 codes per step: bsums 2g and 2g+1
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * k), vs);
      v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // inf·0 = NaN → 0, as nearest_int gives
      // vcvtps2dq rounds to nearest even under the default MXCSR, as nearest_int's 1.5·2^23
      // trick does under the default rounding mode; |v| ≤ 127 here. The reference's
      // min(v, 127); v ≥ −127 always, as |iscale·x| ≤ 127·(1 + 2^−23).
      q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * g), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
    bsums[2 * g] = std::int16_t(hsum_i32(_mm256_add_epi32(q[0], q[1])));
    bsums[2 * g + 1] = std::int16_t(hsum_i32(_mm256_add_epi32(q[2], q[3])));
  }
  b.d = 1.0f / iscale;
}

template <>
struct row_act<quant::q8_0> : provided {
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* b = static_cast<quant::q8_0::block*>(out);
    for (std::size_t i = 0; i < n / 32; ++i) {
      const float d = quantize_q8_block(x + 32 * i, reinterpret_cast<std::int8_t*>(&b[i].qs), nullptr);
      b[i].d.bits = f32_to_fp16(d);
    }
  }
};
template <>
struct row_act<quant::q8_1> : provided {
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* b = static_cast<quant::q8_1::block*>(out);
    for (std::size_t i = 0; i < n / 32; ++i) {
      int sum = 0;
      const float d = quantize_q8_block(x + 32 * i, reinterpret_cast<std::int8_t*>(&b[i].qs), &sum);
      b[i].d.bits = f32_to_fp16(d);
      b[i].s.bits = f32_to_fp16(float(sum) * d);
    }
  }
};
template <>
struct row_act<quant::q8_k> : provided {
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* b = static_cast<quant::q8_k::block*>(out);
    for (std::size_t i = 0; i < n / 256; ++i) quantize_q8_k_block(x + 256 * i, b[i]);
  }
};

}  // namespace
}  // namespace strata::kernels::cpu::x86
