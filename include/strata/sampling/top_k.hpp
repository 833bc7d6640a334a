// Top-k filter (llama.cpp `top_k`): keep the k highest logits, sorted, ties at the boundary going
// to the lower id. Partial selection only: nth_element + sort of k entries, O(n + k log k),
// instead of sorting the vocabulary. k <= 0 or k >= size leaves the set unchanged.
#pragma once
#include <cstdint>

#include "strata/sampling/candidates.hpp"

namespace strata::sampling {

inline void top_k(candidates& c, std::int32_t k) {
  if (k <= 0 || static_cast<std::size_t>(k) >= c.size) return;
  sort_prefix(c, static_cast<std::size_t>(k));
  c.truncate(static_cast<std::size_t>(k));
}

}  // namespace strata::sampling
