// The importance-weighted quantizers (quantize_row_weighted, what llama-quantize runs with
// --imatrix) against ggml's bytes: tests/fixtures/quant/<TYPE>.imatrix.q.bin is
// ggml_quantize_chunk over input.f32 with the weights in imatrix.f32
// (tools/gen_weighted_quant_goldens.cpp). Also: quantize_rows dispatches to them only when given
// weights, and they lower the importance-weighted error they are built to lower.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "strata/quant/quantize_rows.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace strata;
using test::fixture_dir;
using test::read_bytes;
using test::read_f32;

constexpr std::size_t n_rows = 8, row_len = 1024;  // input.f32

struct weighted_case {
  const char* name;    // fixture file prefix
  gguf::type_id type;
};
constexpr weighted_case cases[] = {
    {"Q4_0", gguf::type_id::q4_0}, {"Q4_1", gguf::type_id::q4_1}, {"Q5_0", gguf::type_id::q5_0},
    {"Q5_1", gguf::type_id::q5_1}, {"Q2_K", gguf::type_id::q2_k}, {"Q3_K", gguf::type_id::q3_k},
    {"Q4_K", gguf::type_id::q4_k}, {"Q5_K", gguf::type_id::q5_k}, {"Q6_K", gguf::type_id::q6_k},
    {"IQ4_NL", gguf::type_id::iq4_nl}, {"IQ4_XS", gguf::type_id::iq4_xs},
};

std::vector<std::byte> quantize(gguf::type_id t, const std::vector<float>& x, std::span<const float> imatrix) {
  std::vector<std::byte> out(quant::row_bytes(t, row_len) * n_rows);
  quant::quantize_rows(t, x.data(), n_rows, row_len, imatrix, out.data());
  return out;
}

// Σ_rows Σ_i w_i (x_i − x̃_i)²: the error an imatrix quantizer minimizes.
double weighted_error(gguf::type_id t, const std::vector<std::byte>& q, const std::vector<float>& x,
                      const std::vector<float>& w) {
  std::vector<float> y(x.size());
  quant::dequantize_rows(t, q.data(), x.size(), y.data());
  double e = 0;
  for (std::size_t i = 0; i < x.size(); ++i) e += double(w[i % row_len]) * (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  return e;
}

}  // namespace

TEST_CASE("weighted quantizers reproduce ggml_quantize_chunk with an imatrix, byte for byte") {
  const auto x = read_f32(fixture_dir() / "quant" / "input.f32");
  const auto w = read_f32(fixture_dir() / "quant" / "imatrix.f32");
  REQUIRE(x.size() == n_rows * row_len);
  REQUIRE(w.size() == row_len);
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto want = read_bytes(fixture_dir() / "quant" / (std::string(c.name) + ".imatrix.q.bin"));
    const auto got = quantize(c.type, x, w);
    REQUIRE(got.size() == want.size());
    std::size_t first = got.size();
    for (std::size_t i = 0; i < got.size() && first == got.size(); ++i)
      if (got[i] != want[i]) first = i;
    if (first != got.size()) MESSAGE("first differing byte " << first << " (row " << first / quant::row_bytes(c.type, row_len) << ")");
    CHECK(first == got.size());
  }
}

TEST_CASE("weighted quantizers: used only with weights, and they lower the weighted error") {
  const auto x = read_f32(fixture_dir() / "quant" / "input.f32");
  const auto w = read_f32(fixture_dir() / "quant" / "imatrix.f32");
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto plain = quantize(c.type, x, {});
    const auto weighted = quantize(c.type, x, w);
    // Without weights: the reference quantizer, whose bytes the per-format tests pin to ggml's.
    const auto golden_path = fixture_dir() / "quant" / (std::string(c.name) + ".q.bin");
    if (std::filesystem::exists(golden_path)) {  // IQ4_NL/IQ4_XS have none
      const auto golden = read_bytes(golden_path);
      REQUIRE(golden.size() == plain.size());
      CHECK(std::memcmp(golden.data(), plain.data(), plain.size()) == 0);
    }
    CHECK(plain != weighted);
    // The weighted search trades error in unimportant columns for error in important ones.
    CHECK(weighted_error(c.type, weighted, x, w) < weighted_error(c.type, plain, x, w));
  }
}

TEST_CASE("quantize_rows: importance length and row length are checked") {
  std::vector<float> x(256, 0.5f), w(128, 1.0f);
  std::vector<std::byte> out(256);
  try {
    quant::quantize_rows(gguf::type_id::q4_k, x.data(), 1, 256, w, out.data());
    FAIL("a short importance vector must be rejected");
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("128 values for rows of 256") != std::string::npos);
  }
  try {
    quant::quantize_rows(gguf::type_id::q4_k, x.data(), 1, 100, {}, out.data());
    FAIL("a row not made of whole blocks must be rejected");
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("not a multiple of the Q4_K block size 256") != std::string::npos);
  }
}
