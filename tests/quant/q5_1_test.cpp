// Q5_1 against ggml: dequant and quantize bit/byte-exact with the golden fixtures, round-trip
// error no worse than ggml's, dot() consistent with dequant·dequant, and the all-zero block.
#include "strata/quant/q5_1.hpp"

#include <doctest/doctest.h>

#include <array>

#include "format_checks.hpp"

namespace qc = strata::test::quant_checks;
using strata::quant::q5_1;

TEST_CASE("q5_1: dequant is bitwise equal to ggml's") {
  qc::check_dequant_fixture<q5_1>("Q5_1");
  qc::check_dequant_fixture<q5_1>("Q5_1.from_model");
}

TEST_CASE("q5_1: quantize reproduces ggml's reference bytes") {
  qc::compare_quantized<q5_1>("Q5_1", "input.f32", true);
  // The model file was made by llama-quantize (same reference quantizer, no imatrix for this type).
  const auto bad = qc::compare_quantized<q5_1>("Q5_1.from_model", "Q5_1.from_model.input.f32", true);
  std::size_t total = 0;
  for (const auto n : bad) total += n;
  MESSAGE("Q5_1 from_model: " << total << " blocks differ from the model file");
}

TEST_CASE("q5_1: round-trip error is no worse than ggml's") {
  qc::check_roundtrip_error<q5_1>("Q5_1");
  qc::check_from_model_error<q5_1>("Q5_1");
}

TEST_CASE("q5_1: dot matches dequant·dequant, row helpers match the block functions") {
  qc::check_dot_random<q5_1>(qc::min_term_slack<q5_1>{});
}

TEST_CASE("q5_1: all-zero block has a zero scale and dequantizes to zeros") {
  const auto b = qc::check_zero_block<q5_1>();
  CHECK(b.d.bits == 0);
  CHECK(b.m.bits == 0);
}

// quantize, dequant and dot are usable in constant expressions.
static_assert([] {
  std::array<float, 32> x{};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i) - 16.0f;
  const auto b = q5_1::quantize(x);
  std::array<float, 32> y{};
  q5_1::dequant(b, y);
  const auto a = q5_1::act::quantize(x);
  return y[0] == -16.0f && y[31] == 15.0f && q5_1::dot(b, a) != 0.0f;
}());
