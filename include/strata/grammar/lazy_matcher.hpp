// A grammar that starts constraining only once the output reaches a trigger text (llama.cpp's
// "lazy grammar"): for tool_choice auto the model writes freely, and from the moment it opens a
// call (Qwen3's "<tool_call>", Llama's '{"name": "' at the start) the call must be well formed.
// Before the trigger every token is allowed; the token that completes the trigger is fed to the
// grammar from the trigger's first byte (so the grammar must start with the trigger text).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/grammar/matcher.hpp"

namespace strata::grammar {

class lazy_matcher final : public sampling::token_constraint {
 public:
  // at_start: the trigger counts only at the start of the output, after whitespace; once other
  // text came first the grammar never starts. skip_open/skip_close: a block the output may open
  // with (Qwen3's <think>…</think>) in which the trigger does not count; the output "starts"
  // after it.
  lazy_matcher(std::shared_ptr<automaton> a, std::string trigger, bool at_start, std::string skip_open = {},
               std::string skip_close = {})
      : inner_(a), trie_(&a->trie()), trigger_(std::move(trigger)), at_start_(at_start),
        skip_open_(std::move(skip_open)), skip_close_(std::move(skip_close)),
        all_(a->mask_words(), ~std::uint64_t(0)), phase_(skip_open_.empty() ? phase::watching : phase::opening) {
    if (trigger_.empty()) throw error("grammar: lazy_matcher needs a non-empty trigger");
    if (skip_open_.empty() != skip_close_.empty())
      throw error("grammar: lazy_matcher needs both ends of the skipped block or neither");
    seen_.reserve(256);
    const std::size_t tail = std::size_t(trie_->n_vocab()) % 64;
    if (tail) all_.back() = (std::uint64_t(1) << tail) - 1;
  }

  bool active() const noexcept { return active_; }
  // The output went past the trigger in a way the grammar rejects (the token that completed the
  // trigger carried bytes the grammar does not allow); the output is no longer constrained.
  bool failed() const noexcept { return failed_; }

  bool allows(token_id t) override {
    if (active_) return inner_.allows(t);
    return t >= 0 && t < trie_->n_vocab();
  }
  std::span<const std::uint64_t> allowed() override { return active_ ? inner_.allowed() : all_; }

  void accept(token_id t) {
    if (active_) {
      inner_.accept(t);
      return;
    }
    if (failed_ || done_ || trie_->kind(t) != token_kind::text) return;
    seen_ += trie_->piece(t);
    scan();
  }

  const matcher& inner() const noexcept { return inner_; }

 private:
  enum class phase { opening, skipping, watching };

  void scan() {
    for (;;) {
      const std::size_t first = seen_.find_first_not_of(" \t\r\n");
      if (phase_ == phase::opening) {  // does the output open the block the trigger ignores?
        if (first == std::string::npos) return;
        const std::string_view rest = std::string_view(seen_).substr(first);
        if (rest.starts_with(skip_open_)) {
          seen_.erase(0, first + skip_open_.size());
          phase_ = phase::skipping;
        } else if (std::string_view(skip_open_).starts_with(rest)) {
          return;
        } else {
          phase_ = phase::watching;
        }
        continue;
      }
      if (phase_ == phase::skipping) {
        const std::size_t close = seen_.find(skip_close_);
        if (close == std::string::npos) {
          if (seen_.size() >= skip_close_.size()) seen_.erase(0, seen_.size() - (skip_close_.size() - 1));
          return;
        }
        seen_.erase(0, close + skip_close_.size());
        phase_ = phase::watching;
        continue;
      }
      const std::size_t start = at_start_ ? first : seen_.find(trigger_);
      if (at_start_) {
        if (start == std::string::npos) return;  // only whitespace yet
        const std::string_view rest = std::string_view(seen_).substr(start);
        if (!rest.starts_with(trigger_)) {
          if (!std::string_view(trigger_).starts_with(rest)) done_ = true;  // something else came first
          return;
        }
      } else if (start == std::string::npos) {
        // Keep only what may still begin the trigger.
        if (seen_.size() >= trigger_.size()) seen_.erase(0, seen_.size() - (trigger_.size() - 1));
        return;
      }
      active_ = true;
      if (!inner_.accept_bytes(std::string_view(seen_).substr(start))) {
        active_ = false;
        failed_ = true;
      }
      seen_.clear();
      return;
    }
  }

  matcher inner_;
  const token_trie* trie_;
  std::string trigger_;
  bool at_start_;
  std::string skip_open_, skip_close_;
  std::vector<std::uint64_t> all_;  // every token (before the trigger)
  std::string seen_;                // output so far that may still contain the trigger
  bool active_ = false, failed_ = false, done_ = false;
  phase phase_;
};

}  // namespace strata::grammar
