// Q4_1 against ggml: dequant and quantize bit/byte-exact with the golden fixtures, round-trip
// error no worse than ggml's, dot() consistent with dequant·dequant, and the all-zero block.
#include "strata/quant/q4_1.hpp"

#include <doctest/doctest.h>

#include <array>

#include "format_checks.hpp"

namespace qc = strata::test::quant_checks;
using strata::quant::q4_1;

TEST_CASE("q4_1: dequant is bitwise equal to ggml's") {
  qc::check_dequant_fixture<q4_1>("Q4_1");
  qc::check_dequant_fixture<q4_1>("Q4_1.from_model");
}

TEST_CASE("q4_1: quantize reproduces ggml's reference bytes") {
  qc::compare_quantized<q4_1>("Q4_1", "input.f32", true);
  // The model file was made by llama-quantize (same reference quantizer, no imatrix for this type).
  const auto bad = qc::compare_quantized<q4_1>("Q4_1.from_model", "Q4_1.from_model.input.f32", true);
  std::size_t total = 0;
  for (const auto n : bad) total += n;
  MESSAGE("Q4_1 from_model: " << total << " blocks differ from the model file");
}

TEST_CASE("q4_1: round-trip error is no worse than ggml's") {
  qc::check_roundtrip_error<q4_1>("Q4_1");
  qc::check_from_model_error<q4_1>("Q4_1");
}

TEST_CASE("q4_1: dot matches dequant·dequant, row helpers match the block functions") {
  qc::check_dot_random<q4_1>(qc::min_term_slack<q4_1>{});
}

TEST_CASE("q4_1: all-zero block has a zero scale and dequantizes to zeros") {
  const auto b = qc::check_zero_block<q4_1>();
  CHECK(b.d.bits == 0);
  CHECK(b.m.bits == 0);
}

// quantize, dequant and dot are usable in constant expressions.
static_assert([] {
  std::array<float, 32> x{};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i) - 16.0f;
  const auto b = q4_1::quantize(x);
  std::array<float, 32> y{};
  q4_1::dequant(b, y);
  const auto a = q4_1::act::quantize(x);
  return y[0] == -16.0f && y[31] > 14.0f && y[31] < 16.0f && q4_1::dot(b, a) != 0.0f;
}());
