// Stop conditions for generation: end-of-generation token ids, a generated-token limit, and stop
// strings matched on the detokenized text stream (OpenAI/llama.cpp `stop`). Text that could be
// the start of a stop string is held back until it is resolved, so a streaming server never
// sends bytes it must later retract; the emitted text never contains a stop string.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/sampling/sampler_params.hpp"

namespace strata::sampling {

// Matching rule: generation stops at the first byte where some stop string is complete, and the
// output is cut where that stop string starts (the longest one, if several end at that byte).
// This depends only on the concatenated text, never on how it was split into pieces. (llama.cpp's
// server picks the earliest *start* among matches found in a piece, which can depend on the split.)
class stop_string_matcher {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  struct result {
    std::string_view emit;        // text safe to send now; valid until the next call
    bool stopped = false;         // a stop string completed; emit is the text before it
    std::size_t stop_index = npos;  // index into stop_strings() of the one that matched
  };

  stop_string_matcher() = default;
  explicit stop_string_matcher(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
    for (std::size_t i = 0; i < stops_.size(); ++i) {
      if (stops_[i].empty()) throw error("sampling: stop[" + std::to_string(i) + "] is an empty string");
      max_len_ = std::max(max_len_, stops_[i].size());
    }
    held_.reserve(2 * max_len_);
    out_.reserve(2 * max_len_);
  }

  // Appends a piece of generated text. With `last`, nothing is held back (end of stream).
  result feed(std::string_view piece, bool last = false) {
    if (stopped_) return {{}, true, stop_index_};
    held_ += piece;
    // First completed stop string by end position, then by start (longest), then by index.
    // Every match lies inside held_: a match reaching back into emitted text would have had a
    // proper prefix as a suffix of the stream when that text was emitted, and was held instead.
    std::size_t best_end = npos, best_start = npos, best = npos;
    for (std::size_t i = 0; i < stops_.size(); ++i) {
      const std::size_t pos = held_.find(stops_[i]);
      if (pos == std::string::npos) continue;
      const std::size_t end = pos + stops_[i].size();
      if (end < best_end || (end == best_end && pos < best_start)) {
        best_end = end;
        best_start = pos;
        best = i;
      }
    }
    if (best != npos) {
      stopped_ = true;
      stop_index_ = best;
      return {take(best_start, true), true, best};
    }
    return {take(held_.size() - (last ? 0 : holdback()), false), false, npos};
  }

  // End of stream without a stop string: everything still held.
  std::string_view flush() { return feed({}, true).emit; }

  void reset() {
    held_.clear();
    out_.clear();
    stopped_ = false;
    stop_index_ = npos;
  }

  bool stopped() const noexcept { return stopped_; }
  std::size_t stop_index() const noexcept { return stop_index_; }
  std::string_view held() const noexcept { return held_; }
  std::span<const std::string> stop_strings() const noexcept { return stops_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of some stop string. Stop
  // strings are short (OpenAI allows 4), so the quadratic scan costs less than a KMP table would.
  std::size_t holdback() const noexcept {
    const std::string_view h = held_;
    std::size_t keep = 0;
    for (const std::string& s : stops_) {
      for (std::size_t len = std::min(s.size() - 1, h.size()); len > keep; --len) {
        if (h.substr(h.size() - len) == std::string_view(s).substr(0, len)) {
          keep = len;
          break;
        }
      }
    }
    return keep;
  }

  // Moves held_[0, n) to out_; with `drop_rest` the remainder is discarded (stop string and after).
  std::string_view take(std::size_t n, bool drop_rest) {
    out_.assign(held_, 0, n);
    if (drop_rest) {
      held_.clear();
    } else {
      held_.erase(0, n);
    }
    return out_;
  }

  std::vector<std::string> stops_;
  std::size_t max_len_ = 0;
  std::string held_;  // undecided text, always shorter than the longest stop string
  std::string out_;   // storage behind the last result's emit
  bool stopped_ = false;
  std::size_t stop_index_ = npos;
};

enum class stop_reason : std::uint8_t {
  none,         // keep generating
  eog,          // an end-of-generation token was sampled (its text is not emitted)
  max_tokens,   // the token limit was reached (the last token's text is emitted)
  stop_string,  // a stop string completed (it and anything after it are not emitted)
};

// Per-request stop state. Engine loop, with a tokenizer::streaming_detokenizer `detok`:
//   const token_id t = smp.sample(logits); smp.accept(t);
//   auto s = stop.on_token(t, stop.is_eog(t) ? std::string() : detok.feed(t));
//   send(s.emit);
//   if (s.reason != stop_reason::none) { auto f = stop.finish(detok.flush()); send(f.emit); done(f.reason); }
// and finish(detok.flush()) likewise when generation ends for another reason (context full).
class stop_conditions {
 public:
  static constexpr std::size_t npos = stop_string_matcher::npos;

  struct step {
    std::string_view emit;          // text to send now; valid until the next call
    stop_reason reason = stop_reason::none;
    std::size_t stop_index = npos;  // for stop_reason::stop_string
  };

  stop_conditions() = default;
  // max_tokens: -1 for no limit (sampler_params::max_tokens). EOG ids may repeat; order is free.
  stop_conditions(std::vector<token_id> eog_tokens, std::int32_t max_tokens, std::vector<std::string> stop_strings)
      : eog_(std::move(eog_tokens)), max_tokens_(max_tokens), matcher_(std::move(stop_strings)) {
    if (max_tokens < -1) throw error("sampling: max_tokens must be >= -1 (-1: unlimited), got " +
                                     std::to_string(max_tokens));
    std::sort(eog_.begin(), eog_.end());
    eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
    if (max_tokens_ == 0) reason_ = stop_reason::max_tokens;
  }

  bool is_eog(token_id t) const noexcept { return std::binary_search(eog_.begin(), eog_.end(), t); }

  // True once a stop condition fired; with max_tokens = 0 it is true before the first token.
  bool finished() const noexcept { return reason_ != stop_reason::none; }
  stop_reason reason() const noexcept { return reason_; }
  std::int32_t n_generated() const noexcept { return n_generated_; }

  // One generated token and the text it completed. After a stop, further calls emit nothing.
  step on_token(token_id t, std::string_view piece) {
    if (finished()) return {{}, reason_, matcher_.stop_index()};
    if (is_eog(t)) {
      reason_ = stop_reason::eog;
      return {{}, reason_, npos};
    }
    ++n_generated_;
    const auto r = matcher_.feed(piece);
    if (r.stopped) {
      reason_ = stop_reason::stop_string;
      return {r.emit, reason_, r.stop_index};
    }
    if (max_tokens_ >= 0 && n_generated_ >= max_tokens_) reason_ = stop_reason::max_tokens;
    return {r.emit, reason_, npos};
  }

  // End of the stream: `tail` (the detokenizer's flush) is matched like any piece, then all held
  // text is released. A stop string completed by the tail still wins (reason becomes stop_string).
  step finish(std::string_view tail = {}) {
    const auto r = matcher_.feed(tail, true);
    if (r.stopped) {
      reason_ = stop_reason::stop_string;
      return {r.emit, reason_, r.stop_index};
    }
    return {r.emit, reason_, npos};
  }

  void reset() {
    matcher_.reset();
    n_generated_ = 0;
    reason_ = max_tokens_ == 0 ? stop_reason::max_tokens : stop_reason::none;
  }

  const stop_string_matcher& matcher() const noexcept { return matcher_; }

 private:
  std::vector<token_id> eog_;  // sorted, unique
  std::int32_t max_tokens_ = -1;
  std::int32_t n_generated_ = 0;
  stop_reason reason_ = stop_reason::none;
  stop_string_matcher matcher_;
};

}  // namespace strata::sampling
