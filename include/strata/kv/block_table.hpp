// KV-cache bookkeeping: a pool of fixed-size blocks of token slots and, per sequence, the list of
// blocks holding its positions 0..len-1 plus the tokens stored there (for prefix reuse). One
// table per model, owned by the engine model; every backend's storage reads it (a slot index
// addresses the storage) and none changes it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/kv/kv_config.hpp"

namespace strata::kv {

class block_table {
 public:
  block_table() = default;
  explicit block_table(const kv_config& c) : block_table(c.n_ctx, c.block_size, c.n_seq) {}
  // n_slots total token slots in blocks of block_size; up to n_seq sequences.
  block_table(std::uint32_t n_slots, std::uint32_t block_size, std::uint32_t n_seq)
      : block_size_(checked(block_size, n_seq)), n_blocks_((n_slots + block_size - 1) / block_size), capacity_(n_slots),
        seqs_(n_seq) {
    free_.reserve(n_blocks_);
    for (std::uint32_t b = n_blocks_; b-- > 0;) free_.push_back(b);
    for (auto& s : seqs_) {
      s.blocks.reserve(n_blocks_);
      s.tokens.reserve(std::size_t(n_blocks_) * block_size_);
    }
  }

  std::uint32_t block_size() const noexcept { return block_size_; }
  std::uint32_t n_blocks() const noexcept { return n_blocks_; }
  std::uint32_t n_slots() const noexcept { return n_blocks_ * block_size_; }
  // Context size as configured: no sequence grows beyond it (blocks may round the pool up).
  std::uint32_t capacity() const noexcept { return capacity_; }
  std::uint32_t n_seq() const noexcept { return std::uint32_t(seqs_.size()); }
  std::uint32_t free_blocks() const noexcept { return std::uint32_t(free_.size()); }
  std::uint32_t used_slots() const noexcept {
    std::uint32_t n = 0;
    for (const auto& s : seqs_) n += std::uint32_t(s.tokens.size());
    return n;
  }

  std::uint32_t length(std::uint32_t seq) const { return std::uint32_t(at(seq).tokens.size()); }
  std::span<const std::int32_t> tokens(std::uint32_t seq) const { return at(seq).tokens; }
  // Block ids holding seq's positions in order (position p is in blocks(seq)[p / block_size()]).
  std::span<const std::uint32_t> blocks(std::uint32_t seq) const { return at(seq).blocks; }

  // Slot of position pos of seq (pos < length, or < capacity after reserve()).
  std::uint32_t slot(std::uint32_t seq, std::uint32_t pos) const noexcept {
    const auto& s = seqs_[seq];
    return s.blocks[pos / block_size_] * block_size_ + pos % block_size_;
  }

  // Makes room for `n` more tokens after the current length; throws when the pool is exhausted.
  // Allocation happens only when a block boundary is crossed, never per token otherwise.
  void reserve_append(std::uint32_t seq, std::uint32_t n) {
    auto& s = at(seq);
    const std::size_t need_tokens = s.tokens.size() + n;
    if (need_tokens > capacity_)
      throw error("context full: sequence " + std::to_string(seq) + " would hold " + std::to_string(need_tokens) +
                  " tokens, the context size is " + std::to_string(capacity_));
    const std::size_t need_blocks = (need_tokens + block_size_ - 1) / block_size_;
    if (need_blocks > s.blocks.size() + free_.size())
      throw error("kv cache full: sequence " + std::to_string(seq) + " needs " + std::to_string(need_tokens) +
                  " token slots but only " + std::to_string((s.blocks.size() + free_.size()) * block_size_) +
                  " are available (context size " + std::to_string(n_slots()) + ")");
    while (s.blocks.size() < need_blocks) {
      s.blocks.push_back(free_.back());
      free_.pop_back();
    }
  }
  // Records that tokens were written at positions length..length+n-1 (after reserve_append).
  void commit(std::uint32_t seq, std::span<const std::int32_t> toks) {
    auto& s = at(seq);
    s.tokens.insert(s.tokens.end(), toks.begin(), toks.end());
  }
  // The bookkeeping of one forward step that appends tokens to several sequences (token i to
  // seq_ids[i] at positions[i]): checks that each token continues its sequence, in batch order,
  // and reserves the slots; commit_step() records the tokens once the step has stored them.
  // Allocation-free after the first step.
  void reserve_step(std::span<const std::uint32_t> seq_ids, std::span<const std::int32_t> positions) {
    step_pending_.assign(seqs_.size(), 0);
    for (std::size_t i = 0; i < seq_ids.size(); ++i) {
      const std::uint32_t seq = seq_ids[i];
      if (seq >= seqs_.size())
        throw error("batch sequence id " + std::to_string(seq) + " out of range (" + std::to_string(seqs_.size()) + ")");
      if (positions[i] < 0 || std::uint32_t(positions[i]) != length(seq) + step_pending_[seq])
        throw error("batch position " + std::to_string(positions[i]) + " does not continue sequence " +
                    std::to_string(seq) + " (length " + std::to_string(length(seq)) + ")");
      ++step_pending_[seq];
    }
    for (std::uint32_t s = 0; s < seqs_.size(); ++s)
      if (step_pending_[s]) reserve_append(s, step_pending_[s]);
  }
  void commit_step(std::span<const std::uint32_t> seq_ids, std::span<const std::int32_t> tokens) {
    for (std::size_t i = 0; i < seq_ids.size(); ++i) seqs_[seq_ids[i]].tokens.push_back(tokens[i]);
  }
  // Keeps the first `len` positions, returning whole freed blocks to the pool.
  void truncate(std::uint32_t seq, std::uint32_t len) {
    auto& s = at(seq);
    if (len >= s.tokens.size()) return;
    s.tokens.resize(len);
    const std::size_t keep = (std::size_t(len) + block_size_ - 1) / block_size_;
    while (s.blocks.size() > keep) {
      free_.push_back(s.blocks.back());
      s.blocks.pop_back();
    }
  }
  void clear(std::uint32_t seq) { truncate(seq, 0); }

  // Length of the common prefix between what seq holds and `prompt`.
  std::uint32_t common_prefix(std::uint32_t seq, std::span<const std::int32_t> prompt) const {
    const auto& t = at(seq).tokens;
    std::uint32_t n = 0;
    while (n < t.size() && n < prompt.size() && t[n] == prompt[n]) ++n;
    return n;
  }

 private:
  struct sequence {
    std::vector<std::uint32_t> blocks;
    std::vector<std::int32_t> tokens;
  };
  // Checked before the block count divides by it.
  static std::uint32_t checked(std::uint32_t block_size, std::uint32_t n_seq) {
    if (block_size == 0 || n_seq == 0) throw error("kv cache: block size and sequence count must be non-zero");
    return block_size;
  }
  const sequence& at(std::uint32_t seq) const {
    if (seq >= seqs_.size())
      throw error("kv cache: sequence id " + std::to_string(seq) + " out of range (" + std::to_string(seqs_.size()) + ")");
    return seqs_[seq];
  }
  sequence& at(std::uint32_t seq) { return const_cast<sequence&>(std::as_const(*this).at(seq)); }

  std::uint32_t block_size_ = 32;
  std::uint32_t n_blocks_ = 0;
  std::uint32_t capacity_ = 0;
  std::vector<std::uint32_t> free_;
  std::vector<sequence> seqs_;
  std::vector<std::uint32_t> step_pending_;  // tokens per sequence in the step being reserved
};

}  // namespace strata::kv
