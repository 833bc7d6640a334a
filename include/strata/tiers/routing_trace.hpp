// Synthetic MoE routing for evaluating expert caches without a trained model (random-weight
// models route almost uniformly, the worst case for a cache). Each layer has a popularity over
// its experts - Zipf with exponent `zipf_s` over a seeded random order (0: uniform) - and
// temporal reuse: each of a token's k choices repeats one of the previous token's experts with
// probability `reuse`, else is drawn by popularity (k distinct experts per token).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::tiers {

struct routing_params {
  std::uint32_t n_expert = 128;
  std::uint32_t k = 8;       // experts per token
  double zipf_s = 0;         // popularity of the r-th most popular expert ~ r^-s
  double reuse = 0;          // chance a choice repeats one of the previous token's experts
  std::uint64_t seed = 1;
};

class routing_trace {
 public:
  explicit routing_trace(const routing_params& p) : p_(p), rng_(p.seed), cdf_(p.n_expert), cur_(p.k), prev_(p.k) {
    if (p.n_expert == 0 || p.k == 0 || p.k > p.n_expert)
      throw error("routing trace: k = " + std::to_string(p.k) + " of " + std::to_string(p.n_expert) + " experts");
    std::vector<std::uint32_t> order(p.n_expert);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), rng_);
    std::vector<double> w(p.n_expert);
    for (std::uint32_t r = 0; r < p.n_expert; ++r) w[order[r]] = std::pow(double(r + 1), -p.zipf_s);
    std::partial_sum(w.begin(), w.end(), cdf_.begin());
    for (double& c : cdf_) c /= cdf_.back();
  }

  // The next token's k distinct experts (valid until the next call).
  std::span<const std::uint32_t> next() {
    std::swap(cur_, prev_);
    std::uniform_real_distribution<double> u(0, 1);
    for (std::uint32_t j = 0; j < p_.k; ++j) {
      std::uint32_t e;
      do {
        e = have_prev_ && u(rng_) < p_.reuse ? prev_[std::uniform_int_distribution<std::uint32_t>(0, p_.k - 1)(rng_)]
                                             : draw(u(rng_));
      } while (std::find(cur_.begin(), cur_.begin() + j, e) != cur_.begin() + j);
      cur_[j] = e;
    }
    have_prev_ = true;
    return cur_;
  }

 private:
  std::uint32_t draw(double x) const {
    return std::uint32_t(std::lower_bound(cdf_.begin(), cdf_.end(), x) - cdf_.begin());
  }
  routing_params p_;
  std::mt19937_64 rng_;
  std::vector<double> cdf_;
  std::vector<std::uint32_t> cur_, prev_;
  bool have_prev_ = false;
};

}  // namespace strata::tiers
