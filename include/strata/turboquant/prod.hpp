// TurboQuant_prod (arXiv:2504.19874, Algorithm 2): TurboQuant_mse at b − 1 bits plus a 1-bit
// QJL sketch of the residual, sign(S·r) with S i.i.d. N(0, 1), and γ = ‖r‖. The inner-product
// estimate ⟨y, x̃_mse⟩ + √(π/2)/d·γ·⟨S·y, sign(S·r)⟩ is unbiased (Thm 2). Practice drops it for
// KV caches (QJL variance hurts softmax, turboquant.md §4.1), so it is used by strata-quantcheck
// and tests only. S is d×d floats, generated from a seed (splitmix64 + Box–Muller, portable).
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "strata/hadamard/randomized.hpp"
#include "strata/turboquant/format.hpp"

namespace strata::turboquant {

class prod_quantizer {
 public:
  struct code {
    std::vector<std::uint8_t> mse_row;  // TurboQuant_mse row at b − 1 bits (empty at b = 1)
    std::vector<std::uint8_t> signs;    // d bits: bit i = S_i·r < 0
    float gamma = 0;                    // ‖r‖
  };

  prod_quantizer(std::uint32_t dim, std::uint32_t bits, std::uint64_t seed = 0x514A4Cull)
      : dim_(dim), bits_(bits), s_(std::size_t(dim) * dim), scratch_(dim), r_(dim) {
    if (bits < 1 || bits > 4) throw error("TurboQuant_prod: " + std::to_string(bits) + " bits (supported: 1..4)");
    if (bits > 1) mse_.emplace(dim, bits - 1, scale_mode::plain);
    std::uint64_t state = seed;
    for (std::size_t i = 0; i < s_.size(); i += 2) {  // Box–Muller on 53-bit uniforms
      const double u1 = (double((state = hadamard::splitmix64(state)) >> 11) + 1.0) * 0x1.0p-53;
      const double u2 = double((state = hadamard::splitmix64(state)) >> 11) * 0x1.0p-53;
      const double rad = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * 3.14159265358979323846 * u2;
      s_[i] = float(rad * std::cos(th));
      if (i + 1 < s_.size()) s_[i + 1] = float(rad * std::sin(th));
    }
  }

  std::uint32_t dim() const noexcept { return dim_; }
  std::uint32_t bits() const noexcept { return bits_; }

  // Not thread-safe (uses member scratch); one quantizer per thread.
  void quantize(const float* x, code& c) {
    if (mse_) {
      c.mse_row.resize(mse_->row_bytes());
      mse_->quantize(x, c.mse_row.data(), scratch_.data());
      mse_->dequantize(c.mse_row.data(), r_.data());
      for (std::uint32_t i = 0; i < dim_; ++i) r_[i] = x[i] - r_[i];
    } else {
      for (std::uint32_t i = 0; i < dim_; ++i) r_[i] = x[i];
    }
    double g = 0;
    for (float v : r_) g += double(v) * v;
    c.gamma = float(std::sqrt(g));
    c.signs.assign((dim_ + 7) / 8, 0);
    for (std::uint32_t i = 0; i < dim_; ++i) {
      double p = 0;
      for (std::uint32_t j = 0; j < dim_; ++j) p += double(s_[std::size_t(i) * dim_ + j]) * r_[j];
      if (p < 0) c.signs[i / 8] |= std::uint8_t(1u << (i % 8));
    }
  }

  // Unbiased estimate of ⟨y, x⟩.
  double inner_product(const float* y, const code& c) {
    double mse_part = 0;
    if (mse_) {
      mse_->dequantize(c.mse_row.data(), scratch_.data());
      for (std::uint32_t i = 0; i < dim_; ++i) mse_part += double(y[i]) * scratch_[i];
    }
    double qjl = 0;
    for (std::uint32_t i = 0; i < dim_; ++i) {
      double p = 0;
      for (std::uint32_t j = 0; j < dim_; ++j) p += double(s_[std::size_t(i) * dim_ + j]) * y[j];
      qjl += (c.signs[i / 8] >> (i % 8) & 1) ? -p : p;
    }
    return mse_part + std::sqrt(3.14159265358979323846 / 2) / dim_ * c.gamma * qjl;
  }

 private:
  std::uint32_t dim_, bits_;
  std::optional<format> mse_;
  std::vector<float> s_;  // S, row-major d×d
  std::vector<float> scratch_, r_;
};

}  // namespace strata::turboquant
