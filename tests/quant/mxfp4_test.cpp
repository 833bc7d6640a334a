// MXFP4 (no fixture file): quantize and dequant against golden hashes of ggml's own output for
// the fixture input, the E2M1 table and E8M0 scale against the OCP MX v1.0 definitions, the
// log2f exponent edge, round-trip error against Q4_0's, dot() and the zero block.
//
// The goldens were made by compiling llama.cpp's ggml-quants.c (commit d32676d7, gcc -O2, glibc
// log2f) and running quantize_row_mxfp4_ref and dequantize_row_mxfp4 on
// tests/fixtures/quant/input.f32.
#include "strata/quant/mxfp4.hpp"

#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "format_checks.hpp"

namespace qc = strata::test::quant_checks;
using strata::quant::mxfp4;

TEST_CASE("mxfp4: quantize and dequant reproduce ggml's output for the fixture input") {
  const auto x = strata::test::read_f32(qc::quant_dir() / "input.f32");
  const auto blocks = qc::quantize_all<mxfp4>(x);
  CHECK(qc::hex(blocks[0]) == "7df5a47deed996f7960307e6ba5edb4b55");    // row 0, normal(0,1)
  CHECK(qc::hex(blocks[96]) == "7b4f6fabf53a00df20c470ba2a69142d1e");   // row 3, heavy-tailed
  CHECK(qc::hex(blocks[194]) == "0000000000000000000000000000000000");  // row 6, the zero block
  CHECK(qc::fnv1a64(std::span<const mxfp4::block>(blocks)) == 0x6608bbfcaa573b6cu);
  const auto y = qc::dequant_all<mxfp4>(blocks);
  CHECK(qc::fnv1a64(std::span<const float>(y)) == 0x0f7a5a5d8fde2a8au);
}

TEST_CASE("mxfp4: table is E2M1 doubled, half_scale is E8M0 halved") {
  for (unsigned q = 0; q < 16; ++q) {
    // E2M1: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0; exponent 0 is subnormal.
    const unsigned e = (q >> 1) & 3, m = q & 1;
    const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, int(e) - 1);
    CHECK(double(mxfp4::values[q]) == 2 * (q & 8 ? -mag : mag));
  }
  for (unsigned e = 0; e < 256; ++e) CHECK(mxfp4::half_scale(std::uint8_t(e)) == std::ldexp(1.0f, int(e) - 128));
}

TEST_CASE("mxfp4: the exponent follows ggml's floor(log2f(max)), not the float's exponent bits") {
  // max|x| = 8 − 2^-21 has exponent 2, but log2f rounds it to exactly 3, so ggml writes
  // e = 3 − 2 + 127 = 128 and 7.9999995 becomes +8 instead of clipping to +6 (ggml's bytes).
  std::array<float, 32> x{};
  for (std::size_t j = 0; j < 32; ++j) x[j] = 0.25f * (float(j) - 16.0f);
  x[5] = std::bit_cast<float>(std::uint32_t{0x40FFFFFFu});
  CHECK(qc::hex(mxfp4::quantize(x)) == "800c0c0b1b1b161a2a2a2a293939393040");
}

// Ratio of MXFP4's round-trip NMSE to ggml's Q4_0 NMSE (4.25 vs 4.5 bits per weight), per row.
// Power-of-two scales cost precision, and ggml's (OCP's) choice e = floor(log2 max) − 2 clips
// every |x| above 1.5·2^floor(log2 max) to ±6 half-scale units; uniform(−1,1) loses (0.75, 1]
// (measured 2.1, 1.8, 5.1, 4.6, –, 1.3, 1.5, 4.9). Row 4 (constant 0.37, which Q4_0 holds to
// fp16 precision) is checked absolutely: 0.37 → 12/32 = 0.375, NMSE (0.005/0.37)².
namespace {
constexpr std::array<double, qc::fixture_rows> mxfp4_max_nmse_ratio_vs_q4_0 = {2.2, 1.9, 5.2, 4.7, 0.0, 1.4, 1.6, 5.0};
}  // namespace

TEST_CASE("mxfp4: round-trip error stays within a small factor of Q4_0's") {
  const auto q4_0 = qc::manifest_array("Q4_0", "per_row_nmse_vs_input");
  const auto e = qc::roundtrip_nmse<mxfp4>("MXFP4");
  for (std::size_t r = 0; r < qc::fixture_rows; ++r) {
    INFO("row " << r << " " << qc::row_names[r] << ": nmse " << e[r] << ", Q4_0 " << q4_0[r]);
    if (r == 4) CHECK(e[r] <= 1.0001 * std::pow(0.005 / 0.37, 2));
    else CHECK(e[r] <= q4_0[r] * mxfp4_max_nmse_ratio_vs_q4_0[r]);
  }
}

TEST_CASE("mxfp4: dot matches dequant·dequant, row helpers match the block functions") {
  qc::check_dot_random<mxfp4>();
}

TEST_CASE("mxfp4: all-zero block has a zero exponent byte and dequantizes to zeros") {
  const auto b = qc::check_zero_block<mxfp4>();
  CHECK(b.e == 0);
  for (const auto q : b.qs) CHECK(q == 0);  // code 0 (+0) wins the tie with code 8 (−0)
}

static_assert([] {
  mxfp4::block b{};
  b.e = 127;  // scale 1
  b.qs[0] = 0x7F;  // element 0: code 15 (−6), element 16: code 7 (+6)
  std::array<float, 32> y{};
  mxfp4::dequant(b, y);
  strata::quant::q8_0::block a{};
  a.d = strata::to_fp16(1.0f);
  a.qs[0] = 1;
  a.qs[16] = 2;
  return y[0] == -6.0f && y[16] == 6.0f && mxfp4::dot(b, a) == 6.0f;
}());
