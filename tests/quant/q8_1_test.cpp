// Q8_1 (no fixture of its own): its codes and scale are ggml's Q8_0 codes and scale, so they are
// checked against the Q8_0 golden bytes; s is checked against ggml's definition fp16(d·Σq)
// with the unrounded d; plus round-trip error, dot() and the all-zero block.
#include "strata/quant/q8_1.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "format_checks.hpp"
#include "strata/quant/q8_0.hpp"

namespace qc = strata::test::quant_checks;
using strata::quant::q8_0;
using strata::quant::q8_1;

TEST_CASE("q8_1: d and qs equal ggml's Q8_0 bytes for the same input") {
  const auto x = strata::test::read_f32(qc::quant_dir() / "input.f32");
  const auto want = qc::load_blocks<q8_0>(qc::quant_dir() / "Q8_0.q.bin");
  const auto got = qc::quantize_all<q8_1>(x);
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t b = 0; b < got.size(); ++b)
    bad += got[b].d != want[b].d || std::memcmp(got[b].qs.data(), want[b].qs.data(), 32) != 0;
  CHECK(bad == 0);
}

TEST_CASE("q8_1: s is fp16(d·Σqs) with ggml's unrounded d") {
  const auto x = strata::test::read_f32(qc::quant_dir() / "input.f32");
  const auto blocks = qc::quantize_all<q8_1>(x);
  std::size_t bad = 0;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    float amax = 0.0f;
    for (std::size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    int sum = 0;
    for (const auto q : blocks[b].qs) sum += q;
    bad += blocks[b].s != strata::to_fp16(float(sum) * d);
    // And s agrees with the stored (rounded) d times Σq up to the two fp16 roundings: each is
    // 2^-11 relative, or 2^-25 absolute in fp16's subnormal range (the near-zero row's d ~ 2e-8
    // rounds to 0 while s does not), and d's error is multiplied by |Σq|.
    const double s = strata::to_float(blocks[b].s), ds = double(strata::to_float(blocks[b].d)) * sum;
    CHECK(std::fabs(s - ds) <= 0x1p-10 * std::max(std::fabs(s), std::fabs(ds)) + 0x1p-25 * (1 + std::abs(sum)));
  }
  CHECK(bad == 0);
}

TEST_CASE("q8_1: round-trip error equals Q8_0's (same codes and scale)") {
  qc::check_roundtrip_error<q8_1>("Q8_0");
}

TEST_CASE("q8_1: dot matches dequant·dequant, row helpers match the block functions") {
  qc::check_dot_random<q8_1>();
}

TEST_CASE("q8_1: all-zero block has zero d and s and dequantizes to zeros") {
  const auto b = qc::check_zero_block<q8_1>();
  CHECK(b.d.bits == 0);
  CHECK(b.s.bits == 0);
}

static_assert([] {
  std::array<float, 32> x{};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i) - 16.0f;
  const auto b = q8_1::quantize(x);
  std::array<float, 32> y{};
  q8_1::dequant(b, y);
  int sum = 0;
  for (const auto q : b.qs) sum += q;
  return b.qs[0] == -127 && sum < 0 && strata::to_float(b.s) < 0.0f && q8_1::dot(b, b) > 0.0f;
}());
