// Rounding helpers shared by the quantizers, bit-exact with ggml-quants.c (nearest_int).
// Quantized bytes must match ggml's reference quantizers, so rounding reproduces ggml's
// float trick rather than calling std::lrint (whose mode depends on the FP environment).
#pragma once
#include <bit>
#include <cstdint>

namespace strata::quant::detail {

// Round to nearest, ties to even, for |v| <= 2^22 - 1 (ggml asserts that range).
// Adding 1.5 * 2^23 forces the float's ulp to 1, so the FPU's default rounding does the
// work and the integer sits in the low 23 mantissa bits, offset by 2^22. Outside that range
// (inf, NaN, huge) the result is the same garbage ggml computes, which callers clamp.
constexpr int nearest_int(float v) noexcept {
  const float biased = v + 12582912.0f;  // 12582912 = 0x4B400000 as float = 1.5 * 2^23
  const std::int32_t bits = std::bit_cast<std::int32_t>(biased);
  return (bits & 0x007FFFFF) - 0x00400000;
}

// C's float-to-int cast (truncation toward zero), which ggml's legacy quantizers use as
// `(int8_t)(x + 8.5f)`. NaN gives 0 and out-of-range values saturate, where the C cast
// would be undefined; for in-range inputs the result is the cast's.
constexpr int trunc_to_int(float v) noexcept {
  if (!(v == v)) return 0;
  if (v >= 2147483648.0f) return 2147483647;
  if (v <= -2147483648.0f) return -2147483647 - 1;
  return static_cast<int>(v);
}

// roundf: nearest, ties away from zero (ggml's Q8_0/Q8_1 quantizers), with the same
// NaN/saturation rule as trunc_to_int. v - trunc(v) is exact in float (Sterbenz for
// |v| >= 1, trivially for |v| < 1, and 0 once |v| >= 2^23 where floats are integers).
constexpr int round_away(float v) noexcept {
  if (!(v == v)) return 0;
  if (v >= 2147483648.0f) return 2147483647;
  if (v <= -2147483648.0f) return -2147483647 - 1;
  const int t = static_cast<int>(v);
  const float frac = v - static_cast<float>(t);
  if (frac >= 0.5f) return t + 1;
  if (frac <= -0.5f) return t - 1;
  return t;
}

// fabsf as a constexpr: clears the sign bit, so −0 becomes +0 and NaN stays NaN. The
// quantizers' max-|x| scans must see +0 for −0, or an all-zero block would store a −0 scale.
constexpr float abs_f(float v) noexcept {
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu);
}

}  // namespace strata::quant::detail
