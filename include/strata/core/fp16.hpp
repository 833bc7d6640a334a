// IEEE 754 binary16 storage type and bit-exact conversions, matching ggml's
// GGML_FP16_TO_FP32 (exact) and GGML_FP32_TO_FP16 (round to nearest even, like F16C and numpy).
#pragma once
#include <bit>
#include <cstdint>

namespace strata {

struct fp16 {
  std::uint16_t bits = 0;  // sign:1 exponent:5 mantissa:10
  friend constexpr bool operator==(fp16, fp16) = default;
};
static_assert(sizeof(fp16) == 2);

// Exact widening: every binary16 value (subnormals, inf, NaN payload) maps to one float.
constexpr float to_float(fp16 h) noexcept {
  const std::uint32_t sign = std::uint32_t(h.bits & 0x8000u) << 16;
  const std::uint32_t exp = (h.bits >> 10) & 0x1Fu;
  std::uint32_t mant = h.bits & 0x3FFu;
  std::uint32_t out = 0;
  if (exp == 0x1F) {
    out = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    out = sign;
  } else {
    // Subnormal: normalise the mantissa into a float exponent.
    std::uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    out = sign | (e << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(out);
}

// Round to nearest, ties to even; overflow to inf; NaN stays NaN (quiet).
constexpr fp16 to_fp16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = std::uint16_t((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return fp16{std::uint16_t(sign | 0x7E00u | ((ax >> 13) & 0x1FFu))};
  if (ax >= 0x477FF000u) return fp16{std::uint16_t(sign | 0x7C00u)};  // rounds to >= 65520 -> inf
  if (ax < 0x38800000u) {
    // Result is subnormal or zero: shift the implicit-one mantissa right and round.
    if (ax < 0x33000000u) return fp16{sign};  // below half the smallest subnormal
    const std::uint32_t e = ax >> 23;
    const std::uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14 + (113 - e) - 1 ... yields 10-bit subnormal
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return fp16{std::uint16_t(sign | r)};
  }
  std::uint32_t r = ((ax >> 13) - (112u << 10));
  const std::uint32_t rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return fp16{std::uint16_t(sign | r)};
}

}  // namespace strata
