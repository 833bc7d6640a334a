// Q4_0 against ggml: dequant and quantize bit/byte-exact with the golden fixtures, round-trip
// error no worse than ggml's, dot() consistent with dequant·dequant, and the all-zero block.
#include "strata/quant/q4_0.hpp"

#include <doctest/doctest.h>

#include <array>

#include "format_checks.hpp"

namespace qc = strata::test::quant_checks;
using strata::quant::q4_0;

TEST_CASE("q4_0: dequant is bitwise equal to ggml's") {
  qc::check_dequant_fixture<q4_0>("Q4_0");
  qc::check_dequant_fixture<q4_0>("Q4_0.from_model");
}

TEST_CASE("q4_0: quantize reproduces ggml's reference bytes") {
  qc::compare_quantized<q4_0>("Q4_0", "input.f32", true);
  // The model file was made by llama-quantize (same reference quantizer, no imatrix for this type).
  const auto bad = qc::compare_quantized<q4_0>("Q4_0.from_model", "Q4_0.from_model.input.f32", true);
  std::size_t total = 0;
  for (const auto n : bad) total += n;
  MESSAGE("Q4_0 from_model: " << total << " blocks differ from the model file");
}

TEST_CASE("q4_0: round-trip error is no worse than ggml's") {
  qc::check_roundtrip_error<q4_0>("Q4_0");
  qc::check_from_model_error<q4_0>("Q4_0");
}

TEST_CASE("q4_0: dot matches dequant·dequant, row helpers match the block functions") {
  qc::check_dot_random<q4_0>();
}

TEST_CASE("q4_0: all-zero block has a zero scale and dequantizes to zeros") {
  const auto b = qc::check_zero_block<q4_0>();
  CHECK(strata::to_float(b.d) == 0.0f);
  CHECK(b.d.bits == 0x8000);  // ggml stores −0: d = max / −8 with max = +0 (the fixture's zero block too)
}

// quantize, dequant and dot are usable in constant expressions.
static_assert([] {
  std::array<float, 32> x{};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i) - 16.0f;
  const auto b = q4_0::quantize(x);
  std::array<float, 32> y{};
  q4_0::dequant(b, y);
  const auto a = q4_0::act::quantize(x);
  return y[0] == -16.0f && y[31] == 14.0f && q4_0::dot(b, a) != 0.0f;
}());
