// Q4_K against ggml's golden bytes and floats (tests/fixtures/quant/Q4_K.*), its reference
// quantizer, and dot() against the dequantized float dot.
#include "strata/quant/q4_k.hpp"

#include "quant/k_quant_checks.hpp"

using strata::quant::q4_k;
namespace kq = strata::test::kq;

TEST_CASE("q4_k: dequant of golden blocks is bitwise ggml") {
  kq::check_dequant_bitwise<q4_k>("Q4_K.q.bin", "Q4_K.dequant.f32");
  kq::check_dequant_bitwise<q4_k>("Q4_K.from_model.q.bin", "Q4_K.from_model.dequant.f32");
}

TEST_CASE("q4_k: quantize reproduces ggml_quantize_chunk bytes") {
  kq::check_quantize_bytes<q4_k>("Q4_K.q.bin");
  // The model file was quantized without an imatrix, so the reference quantizer applies too.
  kq::check_quantize_bytes<q4_k>("Q4_K.from_model.q.bin", "Q4_K.from_model.input.f32");
}

TEST_CASE("q4_k: round-trip error per distribution") { kq::check_round_trip<q4_k>("Q4_K"); }

TEST_CASE("q4_k: dot matches dequantized float dot") { kq::check_dot<q4_k>(0x4C); }

TEST_CASE("q4_k: edge blocks") { kq::check_edge_blocks<q4_k>(); }

TEST_CASE("q4_k: 6-bit scale/min packing round-trips every value in every slot") {
  namespace d = strata::quant::detail;
  for (unsigned v = 0; v < 64; ++v)
    for (std::size_t j = 0; j < 8; ++j) {
      std::array<std::uint8_t, 8> ls{}, lm{};
      // Fill the other slots with a different pattern so that bleeding between slots shows.
      for (std::size_t k = 0; k < 8; ++k) {
        ls[k] = std::uint8_t((v * 7 + k * 13) & 63);
        lm[k] = std::uint8_t((v * 11 + k * 5 + 1) & 63);
      }
      ls[j] = std::uint8_t(v);
      lm[j] = std::uint8_t(63 - v);
      const auto packed = d::pack_scale_min_k4(ls, lm);
      for (std::size_t k = 0; k < 8; ++k) {
        const auto [sc, m] = d::unpack_scale_min_k4(packed, k);
        CHECK(sc == ls[k]);
        CHECK(m == lm[k]);
      }
    }
}
