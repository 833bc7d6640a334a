// fp16/bf16 conversions: exhaustive over all 2^16 encodings, and float -> half against the
// compiler's own IEEE conversion (_Float16, round to nearest even) on edge and random values.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "strata/core/bf16.hpp"
#include "strata/core/fp16.hpp"

using strata::fp16;

namespace {
std::uint16_t ref_half_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  return std::bit_cast<std::uint16_t>(h);
}
bool same_half(std::uint16_t a, std::uint16_t b) {
  const bool nan_a = (a & 0x7C00) == 0x7C00 && (a & 0x3FF);
  const bool nan_b = (b & 0x7C00) == 0x7C00 && (b & 0x3FF);
  return nan_a || nan_b ? nan_a == nan_b : a == b;
}
}  // namespace

TEST_CASE("fp16: every encoding widens exactly and narrows back to itself") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const fp16 h{std::uint16_t(b)};
    const float f = strata::to_float(h);
    const float ref = float(std::bit_cast<_Float16>(std::uint16_t(b)));
    if (std::isnan(ref)) {
      CHECK(std::isnan(f));
      continue;
    }
    REQUIRE(std::bit_cast<std::uint32_t>(f) == std::bit_cast<std::uint32_t>(ref));
    REQUIRE(strata::to_fp16(f).bits == b);
  }
}

TEST_CASE("fp16: narrowing rounds to nearest even like IEEE hardware") {
  const float edges[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e10f, -1e10f,
                         std::numeric_limits<float>::infinity(), 5.96046448e-08f, 2.98023224e-08f,
                         2.98023259e-08f, 6.10351562e-05f, 6.10351526e-05f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                         std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::quiet_NaN()};
  for (float f : edges) CHECK(same_half(strata::to_fp16(f).bits, ref_half_bits(f)));
  std::mt19937 rng(1234);
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = std::bit_cast<float>(std::uint32_t(rng()));
    REQUIRE(same_half(strata::to_fp16(f).bits, ref_half_bits(f)));
  }
}

TEST_CASE("bf16: widening is exact and narrowing rounds to nearest even") {
  CHECK(strata::to_float(strata::bf16{0x3F80}) == 1.0f);
  CHECK(strata::to_bf16(1.0f).bits == 0x3F80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  CHECK(strata::to_bf16(1.0f + 1.0f / 256).bits == 0x3F80);
  CHECK(strata::to_bf16(1.0f + 3.0f / 256).bits == 0x3F82);
  CHECK(std::isnan(strata::to_float(strata::to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(strata::to_bf16(std::numeric_limits<float>::infinity()).bits == 0x7F80);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = strata::to_float(strata::bf16{std::uint16_t(b)});
    if (!std::isnan(f)) REQUIRE(strata::to_bf16(f).bits == b);
  }
}
