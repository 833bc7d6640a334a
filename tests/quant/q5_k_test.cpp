// Q5_K against ggml's golden bytes and floats (tests/fixtures/quant/Q5_K.*), its reference
// quantizer, and dot() against the dequantized float dot.
#include "strata/quant/q5_k.hpp"

#include "quant/k_quant_checks.hpp"

using strata::quant::q5_k;
namespace kq = strata::test::kq;

TEST_CASE("q5_k: dequant of golden blocks is bitwise ggml") {
  kq::check_dequant_bitwise<q5_k>("Q5_K.q.bin", "Q5_K.dequant.f32");
  kq::check_dequant_bitwise<q5_k>("Q5_K.from_model.q.bin", "Q5_K.from_model.dequant.f32");
}

TEST_CASE("q5_k: quantize reproduces ggml_quantize_chunk bytes") {
  kq::check_quantize_bytes<q5_k>("Q5_K.q.bin");
  // The model file was quantized without an imatrix, so the reference quantizer applies too.
  kq::check_quantize_bytes<q5_k>("Q5_K.from_model.q.bin", "Q5_K.from_model.input.f32");
}

TEST_CASE("q5_k: round-trip error per distribution") { kq::check_round_trip<q5_k>("Q5_K"); }

TEST_CASE("q5_k: dot matches dequantized float dot") { kq::check_dot<q5_k>(0x5C); }

TEST_CASE("q5_k: edge blocks") { kq::check_edge_blocks<q5_k>(); }
