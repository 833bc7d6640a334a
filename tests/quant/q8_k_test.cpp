// Q8_K (activation format of the K-quants): quantize_row_q8_K_ref semantics, bsums, round
// trip bound and dot. No golden file exists (ggml never writes Q8_K tensors to GGUF).
#include "strata/quant/q8_k.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "quant/k_quant_checks.hpp"

using strata::quant::q8_k;
namespace kq = strata::test::kq;

namespace {
q8_k::block quantize_vec(const std::vector<float>& v) {
  return q8_k::quantize(std::span<const float, 256>(v.data(), 256));
}
}  // namespace

TEST_CASE("q8_k: codes, scale and bsums") {
  for (std::uint32_t seed = 1; seed <= 8; ++seed) {
    const auto x = kq::random_row(256, seed, seed % 2 ? 1.0f : 0.02f, seed % 3 ? 0.0f : 0.7f);
    const auto b = quantize_vec(x);
    // The element of largest magnitude maps to exactly −127 and fixes d = max / −127.
    const auto it = std::max_element(x.begin(), x.end(), [](float a, float c) { return std::fabs(a) < std::fabs(c); });
    const std::size_t imax = std::size_t(it - x.begin());
    CHECK(b.qs[imax] == -127);
    CHECK(b.d == 1.0f / (-127.0f / *it));
    for (std::size_t g = 0; g < 16; ++g) {
      int sum = 0;
      for (std::size_t l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
      CHECK(b.bsums[g] == sum);
    }
    // Round to nearest: every value is within half a step (plus float rounding of x/d).
    std::array<float, 256> y;
    q8_k::dequant(b, y);
    for (std::size_t j = 0; j < 256; ++j) CHECK(std::fabs(y[j] - x[j]) <= 0.5f * std::fabs(b.d) * 1.0001f);
  }
}

TEST_CASE("q8_k: extreme codes stay in [-127, 127] and bsums fit int16") {
  std::vector<float> x(256, 1.0f);  // all equal: every code is −127, each bsum −2032
  auto b = quantize_vec(x);
  for (auto q : b.qs) CHECK(q == -127);
  for (auto s : b.bsums) CHECK(s == -16 * 127);
  x.assign(256, -3.0f);
  b = quantize_vec(x);
  for (auto q : b.qs) CHECK(q == -127);  // the sign lives in d = max / −127, so codes are −127 again
  CHECK(b.d == doctest::Approx(3.0f / 127.0f));
}

TEST_CASE("q8_k: dot matches dequantized float dot") { kq::check_dot<q8_k>(0x8C); }

TEST_CASE("q8_k: edge blocks") {
  kq::check_edge_blocks<q8_k>();
  const auto b = q8_k::quantize(std::array<float, 256>{});
  CHECK(b.d == 0.0f);
  for (auto s : b.bsums) CHECK(s == 0);
}
