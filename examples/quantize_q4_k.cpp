// Quantizes a random "weight matrix" to Q4_K with the reference quantizer (byte-exact with
// ggml's), dequantizes it back and reports the RMSE and the size per weight.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <strata/quant/q4_k.hpp>

int main() {
  using fmt = strata::quant::q4_k;
  constexpr std::size_t rows = 64, cols = 4096;  // cols must be a multiple of fmt::block_elems (256)
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);  // typical LLM weight scale
  std::vector<float> w(rows * cols);
  for (auto& x : w) x = normal(rng);

  std::vector<fmt::block> q(rows * cols / fmt::block_elems);
  strata::quant::quantize_row<fmt>(w.data(), q.data(), w.size());
  std::vector<float> back(w.size());
  strata::quant::dequant_row<fmt>(q.data(), back.data(), back.size());

  double err = 0, energy = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    err += double(w[i] - back[i]) * (w[i] - back[i]);
    energy += double(w[i]) * w[i];
  }
  const double rmse = std::sqrt(err / double(w.size()));
  const double rel = rmse / std::sqrt(energy / double(w.size()));
  const double bits = 8.0 * double(sizeof(fmt::block)) / double(fmt::block_elems);
  std::printf("Q4_K: %zu x %zu weights, %.2f bits/weight, RMSE %.3g (%.2f%% of the weights' RMS)\n", rows, cols,
              bits, rmse, 100.0 * rel);
  return rel < 0.15 ? 0 : 1;  // Q4_K on Gaussian weights: about 9%
}
