// Min-p filter (llama.cpp `min_p`, Nguyen et al. 2024): keep tokens with p_i >= min_p * p_max,
// tested in logit space as l_i >= l_max + log(min_p), so no softmax is needed. The pass is a
// stable in-place compaction, which keeps any sorted prefix valid. min_p <= 0 is a no-op.
#pragma once
#include <cmath>
#include <cstddef>

#include "strata/sampling/candidates.hpp"

namespace strata::sampling {

inline void min_p(candidates& c, float p) noexcept {
  if (p <= 0.0f || c.size <= 1) return;
  const float threshold = max_logit(c) + std::log(p);
  std::size_t kept = 0;
  std::size_t kept_sorted = 0;
  for (std::size_t i = 0; i < c.size; ++i) {
    if (c.data[i].logit >= threshold) {
      if (i < c.n_sorted) ++kept_sorted;
      c.data[kept++] = c.data[i];
    }
  }
  // Survivors of a non-increasing prefix are a prefix of it; if any prefix entry fell, every
  // later entry (all <= it) fell too, so the kept sorted count is exact.
  c.size = kept;
  c.n_sorted = kept_sorted;
}

}  // namespace strata::sampling
