// Repetition, frequency and presence penalties over the last `repeat_last_n` accepted tokens,
// as llama.cpp's `penalties` sampler. For each distinct token t with count c_t > 0 in the window:
//   l_t = l_t > 0 ? l_t / repeat_penalty : l_t * repeat_penalty      (CTRL, with llama.cpp's sign fix)
//   l_t -= c_t * frequency_penalty + presence_penalty                  (OpenAI)
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/sampling/candidates.hpp"

namespace strata::sampling {

// Ring of the last `last_n` accepted tokens plus per-token counts and the list of distinct tokens
// in the window, so apply() touches each distinct token once: O(distinct) per sample, O(1) per
// accept, nothing allocated after construction. Memory: 8 bytes per vocabulary entry.
class penalty_window {
 public:
  penalty_window() = default;  // inactive: accept() does nothing, apply() changes nothing

  penalty_window(std::int32_t n_vocab, std::int32_t last_n) {
    if (n_vocab <= 0 || last_n <= 0) return;
    ring_.assign(static_cast<std::size_t>(last_n), 0);
    count_.assign(static_cast<std::size_t>(n_vocab), 0);
    slot_.assign(static_cast<std::size_t>(n_vocab), -1);
    distinct_.reserve(static_cast<std::size_t>(last_n));
  }

  bool active() const noexcept { return !ring_.empty(); }
  std::size_t size() const noexcept { return size_; }  // tokens currently in the window

  void accept(token_id t) {
    if (!active()) return;
    if (t < 0 || static_cast<std::size_t>(t) >= count_.size())
      throw error("sampling: accepted token " + std::to_string(t) + " is outside the vocabulary [0, " +
                  std::to_string(count_.size()) + ")");
    if (size_ == ring_.size()) {
      drop(ring_[head_]);
    } else {
      ++size_;
    }
    ring_[head_] = t;
    head_ = (head_ + 1) % ring_.size();
    if (count_[static_cast<std::size_t>(t)]++ == 0) {
      slot_[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(distinct_.size());
      distinct_.push_back(t);  // never reallocates: at most last_n distinct tokens
    }
  }

  void reset() noexcept {
    for (token_id t : distinct_) {
      count_[static_cast<std::size_t>(t)] = 0;
      slot_[static_cast<std::size_t>(t)] = -1;
    }
    distinct_.clear();
    head_ = size_ = 0;
  }

  std::int32_t count(token_id t) const noexcept {
    return t >= 0 && static_cast<std::size_t>(t) < count_.size() ? count_[static_cast<std::size_t>(t)] : 0;
  }
  std::span<const token_id> distinct() const noexcept { return distinct_; }

  // `c` must be the full vocabulary in id order (as fill() makes it), so token t sits at c.data[t].
  void apply(candidates& c, float repeat_penalty, float frequency_penalty, float presence_penalty) const {
    if (distinct_.empty()) return;
    if (c.size != count_.size() || c.data[c.size - 1].id != static_cast<token_id>(c.size - 1))
      throw error("sampling: penalties need the full vocabulary in id order (" + std::to_string(count_.size()) +
                  " candidates), got " + std::to_string(c.size));
    for (token_id t : distinct_) {
      float& l = c.data[static_cast<std::size_t>(t)].logit;
      const std::int32_t n = count_[static_cast<std::size_t>(t)];
      l = l > 0.0f ? l / repeat_penalty : l * repeat_penalty;
      l -= static_cast<float>(n) * frequency_penalty + presence_penalty;
    }
    c.n_sorted = 0;
  }

 private:
  void drop(token_id t) noexcept {
    const auto ti = static_cast<std::size_t>(t);
    if (--count_[ti] > 0) return;
    // Swap-remove from the distinct list, fixing the moved token's slot.
    const auto s = static_cast<std::size_t>(slot_[ti]);
    const token_id moved = distinct_.back();
    distinct_[s] = moved;
    slot_[static_cast<std::size_t>(moved)] = static_cast<std::int32_t>(s);
    distinct_.pop_back();
    slot_[ti] = -1;
  }

  std::vector<token_id> ring_;        // last_n slots; the oldest entry is at head_ once full
  std::size_t head_ = 0;              // next write position
  std::size_t size_ = 0;              // filled slots, <= ring_.size()
  std::vector<std::int32_t> count_;   // [n_vocab] occurrences in the window
  std::vector<std::int32_t> slot_;    // [n_vocab] index into distinct_, -1 if absent
  std::vector<token_id> distinct_;    // tokens with count_ > 0, capacity last_n
};

}  // namespace strata::sampling
