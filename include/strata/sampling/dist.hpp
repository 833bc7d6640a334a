// Draw from the softmax of the candidate set (llama.cpp `dist`): one uniform u per call, then
// the first candidate whose running weight exceeds u * sum, scanning in the set's current order.
// Afterwards p holds the normalized distribution the token was drawn from (for logprobs).
#pragma once
#include <cstddef>

#include "strata/core/error.hpp"
#include "strata/sampling/candidates.hpp"
#include "strata/sampling/rng.hpp"
#include "strata/sampling/softmax.hpp"

namespace strata::sampling {

// Index into c.data of the drawn candidate. Throws strata::error if the set is empty or every
// candidate is banned (-inf). u is drawn even for a single candidate so the RNG advances once
// per token whatever the filters left (llama.cpp does the same).
inline std::size_t dist(candidates& c, rng& g) {
  if (c.size == 0) throw error("sampling: dist: no candidates");
  const double u = g.uniform();
  const double sum = exp_weights(c);
  if (!(sum > 0.0)) throw error("sampling: every candidate token has logit -inf (all banned)");
  // Strictly greater: with u = 0 a zero-weight (banned) first candidate is skipped, which the
  // >= of llama.cpp would pick.
  const double target = u * sum;
  double cum = 0.0;
  std::size_t selected = c.size;
  std::size_t last_positive = 0;
  for (std::size_t i = 0; i < c.size; ++i) {
    const double w = c.data[i].p;
    cum += w;
    if (w > 0.0) last_positive = i;
    if (selected == c.size && cum > target) selected = i;
    c.data[i].p = static_cast<float>(w / sum);
  }
  // u * sum can round up to sum itself; the draw then belongs to the last nonzero weight.
  return selected == c.size ? last_positive : selected;
}

}  // namespace strata::sampling
