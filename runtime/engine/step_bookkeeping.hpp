// KV bookkeeping around one forward step, shared by every backend's model: checks that each
// token's position continues its sequence, reserves the slots, and records the tokens after
// the step (for prefix reuse).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/graph/batch.hpp"
#include "strata/kv/block_table.hpp"

namespace strata::rt {

class step_bookkeeping {
 public:
  void before(kv::block_table& t, const graph::batch& b) {
    pending_.assign(t.n_seq(), 0);
    for (std::size_t i = 0; i < b.size(); ++i) {
      const std::uint32_t seq = b.seq_ids[i];
      const std::uint32_t pos = std::uint32_t(b.positions[i]);
      if (seq >= t.n_seq())
        throw error("batch sequence id " + std::to_string(seq) + " out of range (" + std::to_string(t.n_seq()) + ")");
      if (pos != t.length(seq) + pending_[seq])
        throw error("batch position " + std::to_string(pos) + " does not continue sequence " + std::to_string(seq) +
                    " (length " + std::to_string(t.length(seq)) + ")");
      ++pending_[seq];
    }
    for (std::uint32_t s = 0; s < t.n_seq(); ++s)
      if (pending_[s]) t.reserve_append(s, pending_[s]);
  }

  void after(kv::block_table& t, const graph::batch& b) {
    for (std::uint32_t s = 0; s < t.n_seq(); ++s) {
      if (!pending_[s]) continue;
      seq_tokens_.clear();
      for (std::size_t i = 0; i < b.size(); ++i)
        if (b.seq_ids[i] == s) seq_tokens_.push_back(b.tokens[i]);
      t.commit(s, seq_tokens_);
    }
  }

 private:
  std::vector<std::uint32_t> pending_;  // tokens per sequence in the current batch
  std::vector<std::int32_t> seq_tokens_;
};

}  // namespace strata::rt
