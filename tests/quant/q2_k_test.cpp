// Q2_K against ggml's golden bytes and floats (tests/fixtures/quant/Q2_K.*), its reference
// quantizer, and dot() against the dequantized float dot.
#include "strata/quant/q2_k.hpp"

#include "quant/k_quant_checks.hpp"

using strata::quant::q2_k;
namespace kq = strata::test::kq;

TEST_CASE("q2_k: dequant of golden blocks is bitwise ggml") {
  kq::check_dequant_bitwise<q2_k>("Q2_K.q.bin", "Q2_K.dequant.f32");
  kq::check_dequant_bitwise<q2_k>("Q2_K.from_model.q.bin", "Q2_K.from_model.dequant.f32");
}

TEST_CASE("q2_k: quantize reproduces ggml_quantize_chunk bytes") {
  kq::check_quantize_bytes<q2_k>("Q2_K.q.bin");
  // The model file was quantized without an imatrix, so the reference quantizer applies too.
  kq::check_quantize_bytes<q2_k>("Q2_K.from_model.q.bin", "Q2_K.from_model.input.f32");
}

TEST_CASE("q2_k: round-trip error per distribution") { kq::check_round_trip<q2_k>("Q2_K"); }

TEST_CASE("q2_k: dot matches dequantized float dot") { kq::check_dot<q2_k>(0x2C); }

TEST_CASE("q2_k: edge blocks") { kq::check_edge_blocks<q2_k>(); }
