// SentencePiece (Llama 2 style) tokenization of one text fragment, as llama.cpp's
// llm_tokenizer_spm_session (d32676d77): start from one symbol per UTF-8 character, repeatedly
// merge the adjacent pair whose concatenation is the highest-scoring token (ties: leftmost),
// then emit each symbol's token, or one <0xXX> byte token per byte for symbols that are not
// tokens. The caller has already replaced spaces by U+2581 and added the space prefix.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/tokenizer/lenient_utf8.hpp"
#include "strata/tokenizer/pair_map.hpp"
#include "strata/tokenizer/string_index.hpp"
#include "strata/tokenizer/vocab.hpp"

namespace strata::tokenizer {

class spm_model {
 public:
  explicit spm_model(const vocab& v) : vocab_(&v) {
    constexpr char hex[] = "0123456789ABCDEF";
    for (unsigned b = 0; b < 256; ++b) {
      const char spelled[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
      token_id id = v.find(std::string_view(spelled, 6));
      if (id == null_token) {  // some vocabularies spell byte tokens as the byte itself
        const char raw = char(b);
        id = v.find(std::string_view(&raw, 1));
      }
      byte_token_[b] = id;
    }
    for (unsigned c = 0; c < 0x80; ++c) {
      const char ch = char(c);
      ascii_token_[c] = v.find(std::string_view(&ch, 1));
    }
    space_token_ = v.find(space);

    // Every way to build a token from two tokens, split at its own character boundaries:
    // symbols are whole characters, so these are all the merges that can ever apply.
    use_pairs_ = std::size_t(v.size()) <= detail::pair_map::max_id;
    if (use_pairs_) {
      const auto splits = [&](auto&& f) {
        for (token_id id = 0; id < v.size(); ++id) {
          const std::string_view t = v.text(id);
          for (std::size_t k = lenient_utf8::lead_length(static_cast<unsigned char>(t[0])); k < t.size();
               k += lenient_utf8::lead_length(static_cast<unsigned char>(t[k]))) {
            const token_id a = v.find(t.substr(0, k)), b = v.find(t.substr(k));
            if (a != null_token && b != null_token) f(a, b, id);
          }
        }
      };
      std::size_t count = 0;
      splits([&](token_id, token_id, token_id) { ++count; });
      pairs_.reserve(count);
      splits([&](token_id a, token_id b, token_id id) {
        pairs_.insert(std::uint32_t(a), std::uint32_t(b), std::uint32_t(id));
      });
    }

    // A token spanning a cut before "▁" (with another character before it) would contain "▁"
    // right after a character other than "▁". Llama 2's only such tokens are runs of "▁".
    cut_before_space_ = true;
    for (token_id id = 0; id < v.size() && cut_before_space_; ++id) {
      const std::string_view t = v.text(id);
      for (std::size_t p = t.find(space, 1); p != std::string_view::npos; p = t.find(space, p + 1))
        if (p < space.size() || t.substr(p - space.size(), space.size()) != space) cut_before_space_ = false;
    }
  }

  struct scratch {
    struct symbol {
      std::uint32_t begin, len;  // bytes of the fragment; len 0 once merged into its left neighbour
      std::int32_t prev, next;   // neighbours in the chain, -1 at the ends
      token_id token;            // token spelled by the symbol, or null_token
    };
    struct bigram {
      float score;
      std::int32_t left, right;
      std::uint32_t len;  // left.len + right.len when queued; stale once that changes
      token_id merged;
    };
    std::vector<symbol> symbols;
    std::vector<bigram> heap;
    // Parts already encoded in this call (text repeats its words; a hit skips the merging).
    detail::string_index cached;            // part bytes -> entry
    std::vector<std::uint32_t> cached_end;  // entry -> end of its ids in cached_ids
    std::vector<token_id> cached_ids;
  };

  // Appends the tokens of `text` to out. `chunked` (the fast path) cuts the text before each
  // "▁" that follows another character when the vocabulary guarantees no token spans such a
  // cut, and merges each part (about a word) on its own, reusing the result for a part seen
  // before in this call: a merge never crosses the cut, and the merge order within a part is the
  // global order restricted to it, so the result is the one whole-text merging gives
  // (chunked = false, llama.cpp's way, whose single priority queue over a long text is slow).
  void encode(std::string_view text, std::vector<token_id>& out, scratch& s, bool chunked = true) const {
    auto& sym = s.symbols;
    sym.clear();
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t n = std::min(lenient_utf8::lead_length(static_cast<unsigned char>(text[at])), text.size() - at);
      const auto i = std::int32_t(sym.size());
      const unsigned char c = static_cast<unsigned char>(text[at]);
      const token_id t = n == 1 && c < 0x80                  ? ascii_token_[c]
                         : text.compare(at, n, space) == 0 ? space_token_
                                                           : vocab_->find(text.substr(at, n));
      sym.push_back({std::uint32_t(at), std::uint32_t(n), i - 1, at + n == text.size() ? -1 : i + 1, t});
      at += n;
    }
    const auto is_space = [&](std::int32_t i) {
      return text.substr(sym[std::size_t(i)].begin, sym[std::size_t(i)].len) == space;
    };
    const auto n = std::int32_t(sym.size());
    for (std::int32_t b = 0; b < n;) {
      std::int32_t e = n;
      if (chunked && cut_before_space_)
        for (e = b + 1; e < n && !(is_space(e) && !is_space(e - 1));) ++e;
      const std::size_t from = sym[std::size_t(b)].begin;
      const std::size_t to = e < n ? sym[std::size_t(e)].begin : text.size();
      const std::string_view part = text.substr(from, to - from);
      const bool cacheable = chunked && part.size() <= max_cached_part;
      if (const std::uint32_t c = cacheable ? s.cached.find(part) : detail::string_index::npos;
          c != detail::string_index::npos) {
        const std::uint32_t first = c == 0 ? 0 : s.cached_end[c - 1];
        out.insert(out.end(), s.cached_ids.begin() + first, s.cached_ids.begin() + s.cached_end[c]);
      } else {
        const std::size_t before = out.size();
        sym[std::size_t(b)].prev = -1;
        sym[std::size_t(e - 1)].next = -1;
        merge(text, s, b, e);
        emit(text, sym, b, out);
        if (cacheable && s.cached.size() < max_cache_entries) {
          s.cached.insert(part);
          s.cached_ids.insert(s.cached_ids.end(), out.begin() + std::ptrdiff_t(before), out.end());
          s.cached_end.push_back(std::uint32_t(s.cached_ids.size()));
        }
      }
      b = e;
    }
  }

 private:
  static constexpr std::string_view space = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  static constexpr std::size_t max_cached_part = 64;  // bytes
  static constexpr std::size_t max_cache_entries = 1u << 16;

  void merge(std::string_view text, scratch& s, std::int32_t b, std::int32_t e) const {
    auto& sym = s.symbols;
    auto& heap = s.heap;
    heap.clear();
    // Max-heap on score, then min on left index (llama.cpp's llm_bigram_spm order).
    const auto lower = [](const scratch::bigram& x, const scratch::bigram& y) {
      return x.score < y.score || (x.score == y.score && x.left > y.left);
    };
    const auto try_add = [&](std::int32_t l, std::int32_t r) {
      if (l < 0 || r < 0) return;
      const auto& a = sym[std::size_t(l)];
      const auto& c = sym[std::size_t(r)];
      const std::uint32_t len = a.len + c.len;
      token_id id = null_token;
      if (a.token != null_token && c.token != null_token && use_pairs_) {
        id = token_id(pairs_.find(std::uint32_t(a.token), std::uint32_t(c.token)));
      } else if (len <= vocab_->max_token_len()) {
        id = vocab_->find(text.substr(a.begin, len));  // a character that is no token
      }
      if (id < 0) return;
      heap.push_back({vocab_->score(id), l, r, len, id});
      std::push_heap(heap.begin(), heap.end(), lower);
    };
    for (std::int32_t i = b + 1; i < e; ++i) try_add(i - 1, i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), lower);
      const auto bg = heap.back();
      heap.pop_back();
      auto& l = sym[std::size_t(bg.left)];
      auto& r = sym[std::size_t(bg.right)];
      if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len) continue;
      l.len += r.len;
      l.token = bg.merged;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[std::size_t(r.next)].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }
  }

  // Each symbol's token, or its bytes' <0xXX> tokens when it is not one.
  void emit(std::string_view text, const std::vector<scratch::symbol>& sym, std::int32_t b,
            std::vector<token_id>& out) const {
    for (std::int32_t i = b; i != -1; i = sym[std::size_t(i)].next) {
      const auto& y = sym[std::size_t(i)];
      if (y.token != null_token) {
        out.push_back(y.token);
        continue;
      }
      const std::string_view piece = text.substr(y.begin, y.len);
      for (const char c : piece) {
        const token_id id = byte_token_[static_cast<unsigned char>(c)];
        if (id == null_token)
          throw error("SentencePiece vocabulary has no byte token for byte 0x" +
                      std::string{"0123456789ABCDEF"[static_cast<unsigned char>(c) >> 4],
                                  "0123456789ABCDEF"[static_cast<unsigned char>(c) & 15]} +
                      " needed to encode text that no token covers");
        out.push_back(id);
      }
    }
  }

  const vocab* vocab_;
  std::array<token_id, 256> byte_token_{};
  std::array<token_id, 128> ascii_token_{};  // token of each one-byte character, or null_token
  token_id space_token_ = null_token;         // token "▁"
  bool cut_before_space_ = false;  // see encode()
  bool use_pairs_ = false;
  detail::pair_map pairs_;          // (left token, right token) -> their concatenation's token
};

}  // namespace strata::tokenizer
