// Shared helpers for the sampling tests: candidate sets built from literal logits, their kept
// id sets, and logits of a known distribution (l_i = ln p_i).
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "strata/sampling/candidates.hpp"

namespace sampling_test {

using namespace strata::sampling;

inline constexpr float inf = std::numeric_limits<float>::infinity();

// Owns the buffer a `candidates` window points into.
struct cand_set {
  std::vector<token_data> buf;
  candidates c;
  explicit cand_set(const std::vector<float>& logits) : buf(logits.size()) { c = fill(buf, logits); }

  // Ids still in the set, sorted, so tests compare sets regardless of order.
  std::vector<token_id> ids() const {
    std::vector<token_id> v;
    for (const auto& d : c.view()) v.push_back(d.id);
    std::sort(v.begin(), v.end());
    return v;
  }
  const token_data* find(token_id id) const {
    for (const auto& d : c.view())
      if (d.id == id) return &d;
    return nullptr;
  }
};

inline std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

}  // namespace sampling_test
