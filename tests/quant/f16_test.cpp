// F16 against ggml/gguf-py: dequant and quantize bit/byte-exact with the golden fixtures
// (subnormals included, see the near-zero row), round-trip error no worse than ggml's, dot().
#include "strata/quant/f16.hpp"

#include <doctest/doctest.h>

#include <array>
#include <limits>

#include "format_checks.hpp"

namespace qc = strata::test::quant_checks;
using strata::quant::f16;

TEST_CASE("f16: dequant is bitwise equal to ggml's") {
  qc::check_dequant_fixture<f16>("F16");
  qc::check_dequant_fixture<f16>("F16.from_model");
}

TEST_CASE("f16: quantize reproduces ggml's reference bytes") {
  qc::compare_quantized<f16>("F16", "input.f32", true);
  // The model file was converted with numpy astype(float16), the same round-to-nearest-even.
  const auto bad = qc::compare_quantized<f16>("F16.from_model", "F16.from_model.input.f32", true);
  std::size_t total = 0;
  for (const auto n : bad) total += n;
  MESSAGE("F16 from_model: " << total << " values differ from the model file");
}

TEST_CASE("f16: round-trip error is no worse than ggml's") {
  qc::check_roundtrip_error<f16>("F16");
  qc::check_from_model_error<f16>("F16");
}

TEST_CASE("f16: dot matches dequant·dequant, row helpers match the block functions") {
  qc::check_dot_random<f16>();
}

TEST_CASE("f16: zero, overflow and NaN") {
  const auto b = qc::check_zero_block<f16>();
  CHECK(b.v.bits == 0);
  const std::array<float, 1> big{70000.0f}, nan{std::numeric_limits<float>::quiet_NaN()};
  CHECK(f16::quantize(big).v.bits == 0x7C00);  // beyond 65504 + half an ulp: inf, as numpy
  std::array<float, 1> y{};
  f16::dequant(f16::quantize(nan), y);
  CHECK(y[0] != y[0]);
}

static_assert([] {
  const std::array<float, 1> x{0.1f};
  const auto b = f16::quantize(x);
  std::array<float, 1> y{};
  f16::dequant(b, y);
  return b.v.bits == 0x2E66 && f16::dot(b, b) == y[0] * y[0];
}());
