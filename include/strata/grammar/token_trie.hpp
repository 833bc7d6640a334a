// The vocabulary as the grammar matcher sees it: every token's bytes in a byte trie laid out in
// preorder (a node's subtree is the index range [node, end)), so masking the vocabulary is one
// linear scan that skips whole subtrees the grammar rejects. Built once per vocabulary; immutable
// and shareable between matchers and threads.
//
// Which tokens can appear: end-of-generation tokens are allowed exactly when the grammar may end;
// CONTROL, UNKNOWN and UNUSED tokens never (their text, e.g. "<|im_start|>", is not output text);
// every other token by its bytes (token_to_piece with special = true, so USER_DEFINED tokens such as
// Qwen3's "<tool_call>" match their text). llama.cpp instead matches non-EOG control tokens by their
// text too; excluding them keeps a JSON string from containing a chat-template marker.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace strata::grammar {

using token_id = std::int32_t;

enum class token_kind : std::uint8_t {
  text,               // matched by its bytes
  end_of_generation,  // allowed when the grammar is complete
  excluded,           // never allowed (control token, empty piece)
};

class token_trie {
 public:
  // The walk reads nodes in order, so what it needs of one sits together (12 bytes).
  struct node {
    std::uint32_t end;          // one past the last node of this node's subtree
    std::uint32_t first_token;  // tokens ending here: tokens()[first_token, next node's first_token)
    std::uint16_t depth;        // bytes from the root; the root is node 0 at depth 0
    std::uint8_t byte;          // byte on the edge from the parent
    std::uint8_t unused;
  };
  static constexpr std::size_t max_token_bytes = 65535;  // longer tokens are excluded

  // kinds[id] and pieces[id] for every id; pieces of non-text tokens are ignored.
  token_trie(std::span<const token_kind> kinds, std::span<const std::string_view> pieces) {
    if (kinds.size() != pieces.size())
      throw error("grammar: token_trie needs one kind per piece (" + std::to_string(kinds.size()) + " vs " +
                  std::to_string(pieces.size()) + ")");
    build(kinds, pieces);
  }

  static token_trie from_tokenizer(const tokenizer::tokenizer& tok) {
    const auto n = static_cast<std::size_t>(tok.n_vocab());
    std::vector<token_kind> kinds(n);
    std::vector<std::string_view> pieces(n);
    const auto never = tokenizer::token_attr::control | tokenizer::token_attr::unknown | tokenizer::token_attr::unused;
    for (std::size_t i = 0; i < n; ++i) {
      const auto id = static_cast<token_id>(i);
      if (tok.is_eog(id)) {
        kinds[i] = token_kind::end_of_generation;
      } else if (tok.vocabulary().has_attr(id, never)) {
        kinds[i] = token_kind::excluded;
      } else {
        pieces[i] = tok.token_to_piece(id, true);
        kinds[i] = token_kind::text;
      }
    }
    return token_trie(kinds, pieces);
  }

  std::int32_t n_vocab() const noexcept { return static_cast<std::int32_t>(kinds_.size()); }
  std::size_t mask_words() const noexcept { return (kinds_.size() + 63) / 64; }
  token_kind kind(token_id t) const noexcept { return kinds_[static_cast<std::size_t>(t)]; }
  std::string_view piece(token_id t) const noexcept {
    const auto i = static_cast<std::size_t>(t);
    return std::string_view(bytes_).substr(piece_begin_[i], piece_begin_[i + 1] - piece_begin_[i]);
  }
  std::span<const token_id> end_of_generation() const noexcept { return eog_; }
  // Preorder nodes, root first; one sentinel node past the last closes the token ranges.
  std::span<const node> nodes() const noexcept { return {nodes_.data(), nodes_.size() - 1}; }
  // Tokens whose bytes end at node i.
  std::span<const token_id> tokens_at(std::uint32_t i) const noexcept {
    return {tokens_.data() + nodes_[i].first_token, tokens_.data() + nodes_[i + 1].first_token};
  }
  const node* node_data() const noexcept { return nodes_.data(); }
  const token_id* tokens() const noexcept { return tokens_.data(); }
  std::size_t max_depth() const noexcept { return max_depth_; }

 private:
  void build(std::span<const token_kind> kinds, std::span<const std::string_view> pieces) {
    const std::size_t n = kinds.size();
    kinds_.assign(kinds.begin(), kinds.end());
    piece_begin_.reserve(n + 1);
    piece_begin_.push_back(0);
    for (std::size_t i = 0; i < n; ++i) {
      if (kinds_[i] == token_kind::text && (pieces[i].empty() || pieces[i].size() > max_token_bytes))
        kinds_[i] = token_kind::excluded;
      if (kinds_[i] == token_kind::text) bytes_ += pieces[i];
      if (kinds_[i] == token_kind::end_of_generation) eog_.push_back(static_cast<token_id>(i));
      piece_begin_.push_back(static_cast<std::uint32_t>(bytes_.size()));
    }
    std::vector<token_id> order;
    order.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      if (kinds_[i] == token_kind::text) order.push_back(static_cast<token_id>(i));
    std::sort(order.begin(), order.end(), [&](token_id a, token_id b) {
      const auto pa = piece(a), pb = piece(b);
      return pa < pb || (pa == pb && a < b);
    });
    // Sorted pieces visit the trie in preorder: a new piece shares its longest common prefix
    // with the previous one, closes the nodes below it and opens nodes for its remaining bytes.
    nodes_.push_back({0, 0, 0, 0, 0});
    std::vector<std::uint32_t> path = {0};
    std::string_view prev;
    for (const token_id t : order) {
      const std::string_view p = piece(t);
      std::size_t l = 0;
      while (l < prev.size() && l < p.size() && prev[l] == p[l]) ++l;
      while (path.size() - 1 > l) {
        nodes_[path.back()].end = static_cast<std::uint32_t>(nodes_.size());
        path.pop_back();
      }
      for (std::size_t k = l; k < p.size(); ++k) {
        path.push_back(static_cast<std::uint32_t>(nodes_.size()));
        nodes_.push_back({0, static_cast<std::uint32_t>(tokens_.size()), static_cast<std::uint16_t>(k + 1),
                          static_cast<std::uint8_t>(p[k]), 0});
      }
      tokens_.push_back(t);
      max_depth_ = std::max(max_depth_, p.size());
      prev = p;
    }
    for (const std::uint32_t i : path) nodes_[i].end = static_cast<std::uint32_t>(nodes_.size());
    nodes_.push_back({0, static_cast<std::uint32_t>(tokens_.size()), 0, 0, 0});  // sentinel
  }

  std::vector<token_kind> kinds_;
  std::string bytes_;                      // text tokens' bytes, back to back
  std::vector<std::uint32_t> piece_begin_;  // n_vocab + 1 offsets into bytes_
  std::vector<token_id> eog_;
  std::vector<node> nodes_;  // preorder, then the sentinel
  std::vector<token_id> tokens_;
  std::size_t max_depth_ = 0;
};

}  // namespace strata::grammar
