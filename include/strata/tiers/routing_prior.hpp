// The routing the planner expects of a trained MoE router: a few experts take most of the routed
// pairs, so a GPU expert cache holding the most-routed experts misses far less often than
// 1 - slots / experts (uniform routing, the worst case). The shape is one published measurement
// of Qwen3-30B-A3B (llama-imatrix per-expert counts over ~1k tokens of prose, code and math;
// gpu-container handbook, "Routing De-risk"): the busiest expert takes 4.3% of the routing mass
// and 65 of the 128 experts hold 90% of it. For other expert counts it is scaled by n (top share
// 4.3% x 128 / n, capped at 0.5 / k so that the top expert is picked by at most every other token;
// 51% of the experts hold 90%). `strata-mkmodel --router skewed` builds routers with this shape.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::tiers {

// Share of the routing mass per popularity rank (sums to 1): a geometric decay over the hot 51%
// of the experts from the top share down, summing to 90%, and the cold rest sharing 10%.
inline std::vector<double> routing_shares(std::uint32_t n, std::uint32_t k) {
  if (n == 0 || k == 0 || k > n) throw error("routing prior: k = " + std::to_string(k) + " of " + std::to_string(n) + " experts");
  std::vector<double> share(n, 0.0);
  if (k == n) return std::vector<double>(n, 1.0 / n);  // every expert every token: nothing to skew
  const double top = std::min(0.043 * 128.0 / n, 0.5 / k);  // at most every other token: reachable
  const std::uint32_t hot = std::clamp<std::uint32_t>(std::uint32_t(std::lround(0.508 * n)), 1, n - 1);
  // Geometric ratio r with top * (1 - r^hot) / (1 - r) = 0.9 (bisection; r in (0, 1]).
  double lo = 1e-6, hi = 1.0;
  const auto sum = [&](double r) { return r >= 1.0 ? top * hot : top * (1 - std::pow(r, hot)) / (1 - r); };
  if (sum(1.0) < 0.9) {
    // The cap 0.5 / k makes 90% unreachable in `hot` experts: flat hot set, the rest of the mass cold.
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

// The chance that some token of a step of `batch` tokens routes an expert of routing share `share`
// (each token picks k distinct experts, so it picks this one with probability k x share).
inline double touch_probability(std::uint32_t k, double share, std::uint32_t batch) {
  return 1.0 - std::pow(std::max(0.0, 1.0 - k * share), double(batch));
}

// Share of an expert tensor's bytes (n experts, k a token) that a step of `batch` tokens reads from
// outside `slots` slots holding the most-routed experts: each cold expert is read once a step if
// any token of the step picks it. Decode (batch 1): k / n x the cold experts' routing mass;
// long prompts: (n - slots) / n.
inline double cache_miss_share(std::uint32_t n, std::uint32_t k, std::uint32_t slots, std::uint32_t batch) {
  if (slots >= n) return 0.0;
  const std::vector<double> share = routing_shares(n, k);
  double touched = 0;
  for (std::uint32_t e = slots; e < n; ++e) touched += touch_probability(k, share[e], batch);
  return touched / n;
}

// The expected hit rate of one token's routed pairs on a cache of `slots` slots of n experts.
inline double cache_hit_rate(std::uint32_t n, std::uint32_t k, std::uint32_t slots) {
  if (slots >= n) return 1.0;
  const std::vector<double> share = routing_shares(n, k);
  return std::accumulate(share.begin(), share.begin() + slots, 0.0);
}

// The expected hit rate per distinct expert a step of `batch` tokens routes (what the engine's
// expert-cache counters measure): 1 - cold experts touched / experts touched. Batch 1: cache_hit_rate.
inline double cache_step_hit_rate(std::uint32_t n, std::uint32_t k, std::uint32_t slots, std::uint32_t batch) {
  if (slots >= n) return 1.0;
  const std::vector<double> share = routing_shares(n, k);
  double touched = 0, cold = 0;
  for (std::uint32_t e = 0; e < n; ++e) {
    const double p = touch_probability(k, share[e], batch);
    touched += p;
    if (e >= slots) cold += p;
  }
  return touched > 0 ? 1.0 - cold / touched : 1.0;
}

}  // namespace strata::tiers
