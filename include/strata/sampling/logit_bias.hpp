// Logit bias (llama.cpp `logit_bias`, OpenAI `logit_bias`): l_t += bias for each entry, entries
// for the same token adding up; a -inf bias bans the token (its probability becomes exactly 0).
#pragma once
#include <span>
#include <string>

#include "strata/core/error.hpp"
#include "strata/sampling/candidates.hpp"

namespace strata::sampling {

// `c` must be the full vocabulary in id order (as fill() makes it), so token t sits at c.data[t].
inline void apply_logit_bias(candidates& c, std::span<const logit_bias_entry> biases) {
  if (biases.empty()) return;
  for (const auto& b : biases) {
    if (b.token < 0 || static_cast<std::size_t>(b.token) >= c.size)
      throw error("sampling: logit_bias token " + std::to_string(b.token) + " is outside the vocabulary [0, " +
                  std::to_string(c.size) + ")");
    token_data& d = c.data[static_cast<std::size_t>(b.token)];
    if (d.id != b.token) throw error("sampling: logit_bias needs the full vocabulary in id order");
    d.logit += b.bias;
  }
  c.n_sorted = 0;
}

}  // namespace strata::sampling
