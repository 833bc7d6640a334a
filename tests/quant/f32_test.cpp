// F32: the identity format. Quantize/dequant must round-trip every bit pattern of the fixture
// input, and dot() is the float product.
#include "strata/quant/f32.hpp"

#include <doctest/doctest.h>

#include <array>

#include "format_checks.hpp"

namespace qc = strata::test::quant_checks;
using strata::quant::f32;

TEST_CASE("f32: quantize and dequant are the identity") {
  const auto x = strata::test::read_f32(qc::quant_dir() / "input.f32");
  const auto blocks = qc::quantize_all<f32>(x);
  const auto y = qc::dequant_all<f32>(blocks);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) bad += !qc::same_bits(x[i], y[i]);
  CHECK(bad == 0);
}

TEST_CASE("f32: dot matches dequant·dequant, row helpers match the block functions") {
  qc::check_dot_random<f32>();
}

TEST_CASE("f32: zero") {
  const auto b = qc::check_zero_block<f32>();
  CHECK(b.v == 0.0f);
}

static_assert([] {
  const std::array<float, 1> x{3.0f}, a{-0.5f};
  return f32::dot(f32::quantize(x), f32::quantize(a)) == -1.5f;
}());
