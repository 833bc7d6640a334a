#include "router_skew.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "strata/core/error.hpp"
#include "strata/tiers/routing_prior.hpp"

namespace strata::mkmodel {

std::vector<double> skewed_router_shares(std::uint32_t n, std::uint32_t k) { return tiers::routing_shares(n, k); }

std::vector<double> simulate_router(const std::vector<float>& scales, std::uint32_t k, std::uint32_t tokens,
                                    std::uint64_t seed) {
  const std::size_t n = scales.size();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> z(0.0f, 1.0f);
  std::vector<double> count(n, 0.0);
  std::vector<std::pair<float, std::uint32_t>> logits(n);
  for (std::uint32_t t = 0; t < tokens; ++t) {
    for (std::uint32_t e = 0; e < n; ++e) logits[e] = {scales[e] * z(rng), e};
    std::partial_sort(logits.begin(), logits.begin() + k, logits.end(), std::greater<>());
    for (std::uint32_t j = 0; j < k; ++j) count[logits[j].second] += 1;
  }
  return count;
}

std::vector<float> skewed_router_rank_scales(std::uint32_t n, std::uint32_t k) {
  const std::vector<double> share = skewed_router_shares(n, k);
  std::vector<float> scale(n, 1.0f);
  if (k == n) return scale;
  // Raise the scale of ranks chosen less often than their target, lower the others, in log space
  // (an expert's selection rate rises monotonically with its scale).
  constexpr std::uint32_t tokens = 4000;
  for (int it = 0; it < 40; ++it) {
    const auto count = simulate_router(scale, k, tokens, 1000 + std::uint64_t(it));
    for (std::uint32_t e = 0; e < n; ++e) {
      const double got = std::max(count[e], 0.5) / (double(tokens) * k);
      scale[e] = float(scale[e] * std::exp(0.25 * std::log(share[e] / got)));
    }
    const float mean = std::accumulate(scale.begin(), scale.end(), 0.0f) / float(n);
    // The floor keeps every row non-zero where a target is unreachable (tiny n: a cold expert
    // is picked more often than its share even at logit 0).
    for (float& s : scale) s = std::max(s / mean, 0.05f);
  }
  return scale;
}

std::vector<float> scales_for_layer(const std::vector<float>& rank_scales, std::uint64_t seed) {
  std::vector<std::uint32_t> perm(rank_scales.size());
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  std::vector<float> by_expert(rank_scales.size());
  for (std::size_t e = 0; e < perm.size(); ++e) by_expert[e] = rank_scales[perm[e]];
  return by_expert;
}

}  // namespace strata::mkmodel
