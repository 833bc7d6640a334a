// Incremental detokenization for streaming generated text: feed ids one at a time and get back
// only complete UTF-8. A byte token that starts a multi-byte character is held until the
// character completes; bytes that can no longer complete a character are emitted as U+FFFD.
// Invariant (tested): the concatenation of every feed() and the final flush() equals
// utf8::sanitize(tokenizer.decode(ids, render_special)), i.e. exactly decode() whenever that
// is valid UTF-8. Where the vocabulary cleans spaces (clean_spaces.hpp), text is also held back
// until no later byte can change it.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include "strata/core/utf8.hpp"
#include "strata/tokenizer/clean_spaces.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace strata::tokenizer {

class streaming_detokenizer {
 public:
  explicit streaming_detokenizer(const tokenizer& tok, bool render_special = false)
      : tok_(tok), render_special_(render_special) {}

  // Text completed by `id` (possibly empty). Throws strata::error for an id outside the vocabulary.
  std::string feed(token_id id) {
    std::string_view p = tok_.token_to_piece(id, render_special_);
    if (first_ && tok_.vocabulary().add_space_prefix() && !p.empty() && p.front() == ' ') p.remove_prefix(1);
    first_ = false;
    if (!tok_.vocabulary().clean_spaces()) {
      held_ += p;
    } else {
      raw_ += p;
      // Finalize up to the last cut that no later byte can reach across.
      std::size_t cut = raw_.size();
      while (cut > 0 && !is_clean_cut(raw_, cut)) --cut;
      if (cut > 0) {
        std::string done = raw_.substr(0, cut);
        clean_spaces(done);
        held_ += done;
        raw_.erase(0, cut);
      }
    }
    return take_complete();
  }

  // Everything still held, invalid or unfinished sequences as U+FFFD; the stream then restarts.
  std::string flush() {
    clean_spaces(raw_);
    held_ += raw_;
    std::string out = utf8::sanitize(held_);
    raw_.clear();
    held_.clear();
    first_ = true;
    return out;
  }

 private:
  // Could `s` (shorter than its lead byte announces) still grow into a valid sequence?
  static bool viable_prefix(std::string_view s) noexcept {
    const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char c = b(0);
    const std::size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (need == 0 || s.size() >= need) return false;
    for (std::size_t i = 1; i < s.size(); ++i) {
      unsigned char lo = 0x80, hi = 0xBF;
      if (i == 1) {
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
      }
      if (b(i) < lo || b(i) > hi) return false;
    }
    return true;
  }

  // Emits held_ up to an unfinished trailing sequence, replacing bytes as utf8::sanitize does.
  std::string take_complete() {
    std::string out;
    std::size_t i = 0;
    while (i < held_.size()) {
      const std::size_t n = utf8::valid_sequence_length(held_, i);
      if (n > 0) {
        out.append(held_, i, n);
        i += n;
      } else if (viable_prefix(std::string_view(held_).substr(i))) {
        break;
      } else {
        out += "\xEF\xBF\xBD";
        ++i;
      }
    }
    held_.erase(0, i);
    return out;
  }

  tokenizer tok_;
  bool render_special_;
  bool first_ = true;  // the first piece loses one leading space when add_space_prefix
  std::string raw_;    // clean_spaces only: pieces not yet past a safe cut
  std::string held_;   // final bytes not yet emitted (an unfinished UTF-8 sequence)
};

}  // namespace strata::tokenizer
