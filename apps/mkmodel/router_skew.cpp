#include "router_skew.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "strata/core/error.hpp"

namespace strata::mkmodel {

std::vector<double> skewed_router_shares(std::uint32_t n, std::uint32_t k) {
  if (n == 0 || k == 0 || k > n) throw error("skewed router: k = " + std::to_string(k) + " of " + std::to_string(n));
  std::vector<double> share(n, 0.0);
  if (k == n) return std::vector<double>(n, 1.0 / n);  // every expert every token: nothing to skew
  const double top = std::min(0.043 * 128.0 / n, 0.5 / k);  // at most every other token: reachable
  const std::uint32_t hot = std::clamp<std::uint32_t>(std::uint32_t(std::lround(0.508 * n)), 1, n - 1);
  // Geometric ratio r with top * (1 - r^hot) / (1 - r) = 0.9 (bisection; r in (0, 1]).
  double lo = 1e-6, hi = 1.0;
  const auto sum = [&](double r) { return r >= 1.0 ? top * hot : top * (1 - std::pow(r, hot)) / (1 - r); };
  if (sum(1.0) < 0.9) {
    // The cap 1/k makes 90% unreachable in `hot` experts: flat hot set, the rest of the mass cold.
    for (std::uint32_t i = 0; i < hot; ++i) share[i] = top;
  } else {
    for (int it = 0; it < 100; ++it) ((sum((lo + hi) / 2) < 0.9) ? lo : hi) = (lo + hi) / 2;
    const double r = (lo + hi) / 2;
    for (std::uint32_t i = 0; i < hot; ++i) share[i] = top * std::pow(r, double(i));
  }
  const double hot_mass = std::accumulate(share.begin(), share.begin() + hot, 0.0);
  for (std::uint32_t i = hot; i < n; ++i) share[i] = (1.0 - hot_mass) / (n - hot);
  return share;
}

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
