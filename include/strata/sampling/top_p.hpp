// Top-p / nucleus filter (llama.cpp `top_p`, Holtzman et al. 2019): keep the smallest prefix of
// the candidates by descending probability whose cumulative probability reaches p (the token
// that crosses p is kept), probabilities taken over the current set. p >= 1 is a no-op.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

#include "strata/sampling/candidates.hpp"
#include "strata/sampling/softmax.hpp"

namespace strata::sampling {

namespace detail {

// For a large unsorted set (top_k off): sorts only the entries that can be in the nucleus. A
// histogram of weight by logit bucket (1/16 logit wide, counted down from the max; the last
// bucket takes everything below) finds the bucket where the cumulative weight crosses `target`;
// the entries of that bucket and above are partitioned to the front and only they are sorted.
// Equal logits share a bucket, so the front is exactly the top entries in ranks_before order and
// everything behind it has a strictly lower logit: the sorted-prefix invariant holds. O(n) plus
// a sort of about the nucleus size, where growing a sorted prefix costs several passes.
inline void sort_nucleus(candidates& c, float m, double target) {
  constexpr int n_buckets = 1024;
  constexpr float buckets_per_logit = 16.0f;  // 1024 buckets span 64 logits; e^-64 is below any p
  const auto bucket = [m](float l) {
    const float d = (m - l) * buckets_per_logit;  // >= 0, monotone in l; +inf for -inf logits
    return d < float(n_buckets - 1) ? static_cast<int>(d) : n_buckets - 1;
  };
  std::array<double, n_buckets> mass{};
  for (std::size_t i = 0; i < c.size; ++i) mass[static_cast<std::size_t>(bucket(c.data[i].logit))] += c.data[i].p;
  double cum = 0.0;
  int last = 0;
  for (; last < n_buckets - 1; ++last) {
    cum += mass[static_cast<std::size_t>(last)];
    if (cum >= target) break;
  }
  token_data* mid = std::partition(c.data, c.data + c.size, [&](const token_data& t) { return bucket(t.logit) <= last; });
  std::sort(c.data, mid, ranks_before);
  c.n_sorted = static_cast<std::size_t>(mid - c.data);
}

}  // namespace detail

inline void top_p(candidates& c, float p) {
  if (p >= 1.0f || c.size <= 1) return;
  const float m = max_logit(c);
  const double sum = exp_weights(c, m);
  if (!(sum > 0.0)) return;
  // Compare unnormalized: cum_i >= p * sum  <=>  cum_i / sum >= p.
  const double target = static_cast<double>(p) * sum;
  if (c.n_sorted == 0 && c.size > 4096 && std::isfinite(m)) detail::sort_nucleus(c, m, target);
  // Scan the sorted prefix; if it runs out first (a small set, or rounding left the bucket sums
  // just above the running sum), grow it geometrically from the unsorted tail.
  double cum = 0.0;
  std::size_t i = 0;
  std::size_t k = std::max<std::size_t>(c.n_sorted, 64);
  for (;;) {
    sort_prefix(c, k);
    for (const std::size_t end = std::min(k, c.size); i < end; ++i) {
      cum += c.data[i].p;
      if (cum >= target) {
        c.truncate(i + 1);
        return;
      }
    }
    if (k >= c.size) return;  // rounding kept cum below target: keep everything
    k *= 4;
  }
}

}  // namespace strata::sampling
