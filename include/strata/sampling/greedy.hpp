// Greedy selection: the highest logit, lowest token id among ties (argmax over a logits row
// returns the first maximum, which is the same rule).
#pragma once
#include <cstddef>
#include <span>

#include "strata/core/error.hpp"
#include "strata/sampling/candidates.hpp"

namespace strata::sampling {

// Index into c.data of the best candidate. Throws strata::error on an empty set.
inline std::size_t greedy(const candidates& c) {
  if (c.size == 0) throw error("sampling: greedy: no candidates");
  std::size_t best = 0;
  for (std::size_t i = 1; i < c.size; ++i)
    if (detail::ranks_before(c.data[i], c.data[best])) best = i;
  return best;
}

// First index of the maximum of a logits row (NaN entries never win). Throws on an empty row.
inline token_id argmax(std::span<const float> logits) {
  if (logits.empty()) throw error("sampling: argmax of an empty logits row");
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best] || (logits[best] != logits[best] && logits[i] == logits[i])) best = i;
  return static_cast<token_id>(best);
}

}  // namespace strata::sampling
