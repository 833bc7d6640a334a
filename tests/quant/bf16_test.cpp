// BF16 against ggml/gguf-py: dequant and quantize bit/byte-exact with the golden fixtures,
// round-trip error no worse than ggml's, dot(), and NaN staying quiet.
#include "strata/quant/bf16.hpp"

#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cstdint>

#include "format_checks.hpp"

namespace qc = strata::test::quant_checks;

TEST_CASE("bf16: dequant is bitwise equal to ggml's") {
  qc::check_dequant_fixture<strata::quant::bf16>("BF16");
}

TEST_CASE("bf16: quantize reproduces ggml's reference bytes") {
  qc::compare_quantized<strata::quant::bf16>("BF16", "input.f32", true);
}

TEST_CASE("bf16: round-trip error is no worse than ggml's") {
  qc::check_roundtrip_error<strata::quant::bf16>("BF16");
}

TEST_CASE("bf16: dot matches dequant·dequant, row helpers match the block functions") {
  qc::check_dot_random<strata::quant::bf16>();
}

TEST_CASE("bf16: zero and NaN") {
  using strata::quant::bf16;
  const auto b = qc::check_zero_block<bf16>();
  CHECK(b.v.bits == 0);
  // A signalling NaN whose payload sits in the low 16 bits must not truncate to inf.
  const std::array<float, 1> snan{std::bit_cast<float>(std::uint32_t{0x7F800001u})};
  CHECK(bf16::quantize(snan).v.bits == 0x7FC0);
}

static_assert([] {
  using strata::quant::bf16;
  const std::array<float, 1> x{1.00390625f};  // 1 + 2^-8: a tie between 1 and 1 + 2^-7, rounds to even (1)
  const auto b = bf16::quantize(x);
  return b.v.bits == 0x3F80 && bf16::dot(b, b) == 1.0f;
}());
