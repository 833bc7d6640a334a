// Temperature (llama.cpp `temp`): l_i /= t for t > 0. For t <= 0 llama.cpp keeps only the
// highest logit; here the set shrinks to that one token (lowest id among ties), which makes the
// distribution step return it with p = 1.
#pragma once
#include <cstddef>

#include "strata/sampling/candidates.hpp"

namespace strata::sampling {

inline void temperature(candidates& c, float t) noexcept {
  if (c.size == 0 || t == 1.0f) return;
  if (t > 0.0f) {
    // Division by a positive number is monotone, so a sorted prefix stays sorted.
    for (std::size_t i = 0; i < c.size; ++i) c.data[i].logit /= t;
    return;
  }
  std::size_t best = 0;
  for (std::size_t i = 1; i < c.size; ++i)
    if (detail::ranks_before(c.data[i], c.data[best])) best = i;
  c.data[0] = c.data[best];
  c.size = 1;
  c.n_sorted = 1;
}

}  // namespace strata::sampling
