// AVX2 Q8_K activation quantizer, byte-identical to quant::q8_k::quantize: the element of
// largest |x| (the first on ties) maps to −127, codes nearest_int(iscale·x) capped at 127,
// d = 1/iscale, plus the 16 sums of 16 codes the K-quant dots use for their mins.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/common.hpp"
#include "strata/kernels/cpu/x86_avx2/q8_0.hpp"
#include "strata/quant/q8_k.hpp"

namespace strata::kernels::cpu {
namespace x86_avx2 {
namespace {

inline void quantize_q8_k_block(const float* x, quant::q8_k::block& b) noexcept {
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 32; ++k) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * k)));
  const float amax = hmax(m);
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
      // trick does under the default rounding mode; |v| ≤ 127 here.
      // The reference's min(v, 127); v ≥ −127 always, as |iscale·x| ≤ 127·(1 + 2^−23).
      q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * g), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
    bsums[2 * g] = std::int16_t(hsum_i32(_mm256_add_epi32(q[0], q[1])));
    bsums[2 * g + 1] = std::int16_t(hsum_i32(_mm256_add_epi32(q[2], q[3])));
  }
  b.d = 1.0f / iscale;
}

}  // namespace
}  // namespace x86_avx2

template <>
struct act_kernel<quant::q8_k, isa::avx2> {
  static constexpr bool available = true;
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* b = static_cast<quant::q8_k::block*>(out);
    for (std::size_t i = 0; i < n / 256; ++i) x86_avx2::quantize_q8_k_block(x + 256 * i, b[i]);
  }
};

}  // namespace strata::kernels::cpu
