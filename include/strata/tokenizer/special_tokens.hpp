// Splits raw text into text fragments and special tokens before the model's tokenizer runs,
// with the result of llama.cpp's tokenizer_st_partition (d32676d77): special tokens are tried
// longest text first; each one claims its non-overlapping occurrences, left to right, inside the
// text no earlier token claimed. USER_DEFINED tokens always match; CONTROL and UNKNOWN ones only
// with parse_special. LSTRIP / RSTRIP drop the whitespace (C isspace) beside a match.
//
// llama.cpp rescans the text once per special token (256 scans for Llama 3); this finds every
// occurrence of every token in one pass over a trie and then replays the claims in token order,
// which gives the same fragments.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/tokenizer/vocab.hpp"

namespace strata::tokenizer {

// A run of raw text [begin, end) when token == null_token, else one special token.
struct fragment {
  std::size_t begin;
  std::size_t end;
  token_id token;
};

class special_token_matcher {
 public:
  explicit special_token_matcher(const vocab& v)
      : vocab_(&v), tokens_(v.special_tokens().begin(), v.special_tokens().end()) {
    nodes_.emplace_back();
    for (std::uint32_t rank = 0; rank < tokens_.size(); ++rank) {
      const std::string_view t = v.text(tokens_[rank]);
      std::uint32_t at = 0;
      for (const char c : t) at = child(at, static_cast<unsigned char>(c), true);
      nodes_[at].rank = std::int32_t(rank);
      first_byte_[static_cast<unsigned char>(t[0])] = true;
    }
  }

  // Replaces `out` with the fragments of `text` in order (none for empty text).
  void partition(std::string_view text, bool parse_special, std::vector<fragment>& out) const {
    out.clear();
    if (text.empty()) return;
    const auto occ = occurrences(text, parse_special);
    if (occ.empty()) {
      out.push_back({0, text.size(), null_token});
      return;
    }

    // Claimed spans in text order: special tokens and (with LSTRIP/RSTRIP) dropped whitespace.
    std::vector<fragment> claimed;
    const auto overlaps = [&](std::size_t b, std::size_t e) {
      const auto it = std::upper_bound(claimed.begin(), claimed.end(), b,
                                       [](std::size_t x, const fragment& f) { return x < f.end; });
      return it != claimed.end() && it->begin < e;
    };
    const auto claim = [&](fragment f) {
      const auto it = std::lower_bound(claimed.begin(), claimed.end(), f.begin,
                                       [](const fragment& g, std::size_t x) { return g.begin < x; });
      claimed.insert(it, f);
    };
    const auto is_space = [&](std::size_t i) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      return c == ' ' || (c >= '\t' && c <= '\r');
    };
    for (const auto& [rank, pos] : occ) {
      const token_id id = tokens_[rank];
      const std::size_t end = pos + vocab_->text(id).size();
      if (overlaps(pos, end)) continue;
      claim({pos, end, id});
      if (vocab_->has_attr(id, token_attr::lstrip)) {
        std::size_t b = pos;
        while (b > 0 && is_space(b - 1) && !overlaps(b - 1, b)) --b;
        if (b < pos) claim({b, pos, null_token});
      }
      if (vocab_->has_attr(id, token_attr::rstrip)) {
        std::size_t e = end;
        while (e < text.size() && is_space(e) && !overlaps(e, e + 1)) ++e;
        if (e > end) claim({end, e, null_token});
      }
    }

    std::size_t pos = 0;
    for (const fragment& c : claimed) {
      if (c.begin > pos) out.push_back({pos, c.begin, null_token});
      if (c.token != null_token) out.push_back(c);
      pos = c.end;
    }
    if (pos < text.size()) out.push_back({pos, text.size(), null_token});
  }

 private:
  struct node {
    std::vector<std::pair<unsigned char, std::uint32_t>> next;  // sorted by byte
    std::int32_t rank = -1;  // index into tokens_ of the token spelled by the path, or -1
  };

  static constexpr auto by_byte = [](const std::pair<unsigned char, std::uint32_t>& p, unsigned char x) {
    return p.first < x;
  };

  std::uint32_t child(std::uint32_t at, unsigned char c, bool create) {
    auto& nx = nodes_[at].next;
    const auto it = std::lower_bound(nx.begin(), nx.end(), c, by_byte);
    if (it != nx.end() && it->first == c) return it->second;
    if (!create) return 0;
    const auto id = std::uint32_t(nodes_.size());
    nx.insert(it, {c, id});
    nodes_.emplace_back();
    return id;
  }
  std::uint32_t step(std::uint32_t at, unsigned char c) const {
    const auto& nx = nodes_[at].next;
    const auto it = std::lower_bound(nx.begin(), nx.end(), c, by_byte);
    return it != nx.end() && it->first == c ? it->second : 0;
  }

  // Every (token rank, byte offset) where an eligible special token occurs, overlaps included,
  // sorted by rank then offset: the order in which llama.cpp claims them.
  std::vector<std::pair<std::uint32_t, std::size_t>> occurrences(std::string_view text, bool parse_special) const {
    std::vector<std::pair<std::uint32_t, std::size_t>> occ;
    if (tokens_.empty()) return occ;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
      std::uint32_t at = 0;
      for (std::size_t j = i; j < text.size(); ++j) {
        at = step(at, static_cast<unsigned char>(text[j]));
        if (at == 0) break;
        const std::int32_t r = nodes_[at].rank;
        if (r < 0) continue;
        if (parse_special || !vocab_->has_attr(tokens_[std::size_t(r)], token_attr::control | token_attr::unknown))
          occ.emplace_back(std::uint32_t(r), i);
      }
    }
    std::sort(occ.begin(), occ.end());
    return occ;
  }

  const vocab* vocab_;
  std::vector<token_id> tokens_;  // vocab::special_tokens(): longest first
  std::vector<node> nodes_;       // trie over their texts; node 0 is the root
  std::array<bool, 256> first_byte_{};
};

}  // namespace strata::tokenizer
