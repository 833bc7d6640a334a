// Softmax over the candidate set, p_i = exp(l_i - max) / sum_j exp(l_j - max), in place and
// without sorting (llama.cpp's softmax sorts; nothing here needs it). exp is taken in float as
// llama.cpp does; the sum is accumulated in double so 200k-token vocabularies lose no mass.
#pragma once
#include <cmath>
#include <limits>

#include "strata/sampling/candidates.hpp"

namespace strata::sampling {

// Writes the unnormalized weights w_i = exp(l_i - max) into p and returns their sum. Guards the
// two degenerate rows: max = -inf (every token banned) gives all zeros and a sum of 0; max = +inf
// gives weight 1 to the +inf tokens and 0 to the rest instead of NaN.
// `m` must be max_logit(c); callers that already have it pass it to save a pass.
inline double exp_weights(candidates& c, float m) noexcept {
  constexpr float inf = std::numeric_limits<float>::infinity();
  double sum = 0.0;
  if (m == -inf || m == inf) {
    for (std::size_t i = 0; i < c.size; ++i) {
      c.data[i].p = (m == inf && c.data[i].logit == inf) ? 1.0f : 0.0f;
      sum += c.data[i].p;
    }
    return sum;
  }
  for (std::size_t i = 0; i < c.size; ++i) {
    const float w = std::exp(c.data[i].logit - m);
    c.data[i].p = w;
    sum += w;
  }
  return sum;
}
inline double exp_weights(candidates& c) noexcept { return exp_weights(c, max_logit(c)); }

// Normalized probabilities in p. An all-banned set keeps p = 0 everywhere.
inline void softmax(candidates& c) noexcept {
  const double sum = exp_weights(c);
  if (!(sum > 0.0)) return;
  for (std::size_t i = 0; i < c.size; ++i) c.data[i].p = static_cast<float>(c.data[i].p / sum);
}

}  // namespace strata::sampling
