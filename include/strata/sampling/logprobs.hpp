// Log-probabilities of a logits row as the OpenAI `logprobs` / `top_logprobs` fields report them:
// log_softmax of the model's raw logits (before logit_bias, penalties, temperature or a grammar
// mask), for the sampled token and the k most likely tokens. One pass for the log-sum-exp (summed
// in double, as softmax.hpp does) and one for the top k (a small sorted array, k <= 20 in the
// API); nothing allocates.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include "strata/sampling/sampler_params.hpp"

namespace strata::sampling {

struct token_logprob {
  token_id id;    // vocabulary id
  float logprob;  // natural log of its probability under the raw logits
};

// log p = l - lse, in float; NaN logits (a broken row) read as -inf.
inline float logprob_of(float logit, double lse) noexcept {
  return std::isnan(logit) ? -std::numeric_limits<float>::infinity() : float(double(logit) - lse);
}

// log(sum_i exp(l_i)); NaN logits count as -inf. An all -inf row gives -inf.
inline double log_sum_exp(std::span<const float> logits) noexcept {
  float m = -std::numeric_limits<float>::infinity();
  for (const float l : logits)
    if (l > m) m = l;
  if (m == -std::numeric_limits<float>::infinity() || m == std::numeric_limits<float>::infinity()) return m;
  double sum = 0.0;
  for (const float l : logits)
    if (l > -std::numeric_limits<float>::infinity()) sum += std::exp(double(l) - double(m));
  return double(m) + std::log(sum);
}

// Writes the top.size() most likely tokens into `top` (highest first, lower id first among
// ties) with their log-probabilities, given lse = log_sum_exp(logits); returns how many were
// written (min(top.size(), logits.size())). The log-probability of any token t is then
// logits[t] - lse: a caller may mask the row (token_mask.hpp) after this call and still read the
// chosen token's raw value, since masking leaves allowed tokens untouched.
inline std::size_t top_logprobs(std::span<const float> logits, double lse, std::span<token_logprob> top) noexcept {
  const std::size_t k = std::min(top.size(), logits.size());
  std::size_t n = 0;
  // Insertion into a sorted array of at most k entries: after the first few hundred logits
  // almost every one fails the comparison with the current k-th best, so this is one pass.
  for (std::size_t i = 0; i < logits.size() && k > 0; ++i) {
    const float l = std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
    if (n == k && !(l > top[k - 1].logprob)) continue;
    std::size_t j = n < k ? n++ : k - 1;
    while (j > 0 && top[j - 1].logprob < l) {
      top[j] = top[j - 1];
      --j;
    }
    top[j] = {token_id(i), l};
  }
  for (std::size_t i = 0; i < n; ++i) top[i].logprob = logprob_of(top[i].logprob, lse);
  return n;
}

}  // namespace strata::sampling
