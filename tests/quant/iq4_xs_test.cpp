// IQ4_XS: no golden file in tests/fixtures, so the golden values below were produced by running
// ggml's quantize_row_iq4_xs_ref and dequantize_row_iq4_xs (llama.cpp d32676d, ggml-quants.c
// built as ggml-base is: gcc -O2, no FMA) on tests/fixtures/quant/input.f32. They are FNV-1a
// 64 hashes per row (544 quantized bytes, 4096 dequantized bytes) and per-row NMSE.
#include "strata/quant/iq4_xs.hpp"

#include <bit>

#include "quant/k_quant_checks.hpp"

using strata::quant::iq4_xs;
namespace kq = strata::test::kq;

namespace {

constexpr std::array<std::uint64_t, 8> ggml_q_hash = {
    0x3c4636ba3ad5d8a1, 0x4e218d374621d2e4, 0xdff48a56fe95519c, 0x11bae5ba29f1b0d0,
    0x4968e1c829373bd5, 0x50f6c5de72f585d0, 0x97820c429c42a8f9, 0xa1fb29843869bb98};
constexpr std::array<std::uint64_t, 8> ggml_dequant_hash = {
    0x6915ad637eab07e0, 0x84b277387e2b6734, 0x226966133b94284b, 0xc35f08f0b4af2c05,
    0x8fd7c6538d323325, 0x8ccc15ccc66316a5, 0x0ab16aab570fdf2c, 0x553a29960a9abc96};
// Row 5 (near-zero) is all zeros: the super-scale underflows fp16, as in Q3_K/Q6_K.
const std::vector<double> ggml_row_nmse = {0.005682661587111368, 0.005472676369296251, 0.004076055701973225,
                                           0.007085724660314245, 8.80513462657431e-08,  1.0,
                                           0.005701343750647109, 0.003450599518953388};

std::uint64_t fnv1a(const void* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 0x100000001b3;
  return h;
}

}  // namespace

TEST_CASE("iq4_xs: quantize and dequant reproduce ggml's reference, row by row") {
  const auto x = strata::test::read_f32(strata::test::fixture_dir() / "quant" / "input.f32");
  REQUIRE(x.size() == kq::n_rows * kq::row_len);
  std::vector<iq4_xs::block> q(x.size() / 256);
  std::vector<float> y(x.size());
  strata::quant::quantize_row<iq4_xs>(x.data(), q.data(), x.size());
  strata::quant::dequant_row<iq4_xs>(q.data(), y.data(), y.size());
  for (std::size_t r = 0; r < kq::n_rows; ++r) {
    INFO("row " << r << " " << std::string(kq::row_names[r]));
    CHECK(fnv1a(q.data() + 4 * r, 4 * sizeof(iq4_xs::block)) == ggml_q_hash[r]);
    CHECK(fnv1a(y.data() + kq::row_len * r, kq::row_len * 4) == ggml_dequant_hash[r]);
  }
}

TEST_CASE("iq4_xs: round-trip error per distribution") { kq::check_round_trip<iq4_xs>("IQ4_XS", ggml_row_nmse); }

TEST_CASE("iq4_xs: dot matches dequantized float dot") { kq::check_dot<iq4_xs>(0x1C4); }

TEST_CASE("iq4_xs: edge blocks") {
  kq::check_edge_blocks<iq4_xs>();
  // ggml stores d = −max_scale/32 = −0 for an all-zero block, and 0 is coded as ls = 32.
  const auto b = iq4_xs::quantize(std::array<float, 256>{});
  CHECK(b.d.bits == 0x8000);
  CHECK(b.scales_h == 0xAAAA);
  for (std::size_t ib = 0; ib < 8; ++ib) CHECK(iq4_xs::scale(b, ib) == 0);
}
