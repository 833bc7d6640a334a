// Byte-level BPE over one pre-tokenized piece, as llama.cpp's llm_tokenizer_bpe_session
// (d32676d77): start from one symbol per byte, repeatedly apply the lowest-ranked merge among
// adjacent pairs (tokenizer.ggml.merges order; ties: leftmost), then emit each symbol's token.
// With ignore_merges (Llama 3) a piece that is a token is emitted as is.
//
// llama.cpp works on byte-level spellings ("Ġthe") and looks merges up by string pair. Here the
// spellings are decoded back to raw bytes once at load, every string a merge can produce gets a
// symbol id (the token id when it is a token), and merges become a hash table from a pair of
// symbol ids to (rank, merged symbol): the merge order, and so the output, is unchanged.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/tokenizer/byte_level.hpp"
#include "strata/tokenizer/pair_map.hpp"
#include "strata/tokenizer/string_index.hpp"
#include "strata/tokenizer/vocab.hpp"

namespace strata::tokenizer {

class bpe_model {
 public:
  static constexpr std::uint32_t no_symbol = ~std::uint32_t(0);

  // `merges` are tokenizer.ggml.merges entries, spelled byte-level ("Ġ t").
  bpe_model(const vocab& v, std::span<const std::string_view> merges) : vocab_(&v) {
    const auto n = std::size_t(v.size());
    symbols_.reserve(n + merges.size() / 4, 8 * n);
    std::string raw, l, r;
    for (token_id id = 0; id < token_id(n); ++id) {
      // A token spelled with characters that stand for no byte can never be built by BPE.
      if (!byte_level::decode(v.text(id), raw)) continue;
      const std::uint32_t sym = intern(raw);
      symbol_token_[sym] = id;
    }
    if (merges.size() > detail::pair_map::max_value)
      throw error("tokenizer.ggml.merges: " + std::to_string(merges.size()) + " merges exceed the supported " +
                  std::to_string(detail::pair_map::max_value));
    merges_.reserve(merges.size());
    merged_.assign(merges.size(), no_symbol);
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string_view m = merges[rank];
      const std::size_t sp = m.find(' ', 1);
      if (sp == std::string_view::npos) continue;  // llama.cpp files it under ("", ""): never applies
      if (!byte_level::decode(m.substr(0, sp), l) || !byte_level::decode(m.substr(sp + 1), r)) continue;
      if (l.empty() || r.empty()) continue;  // cannot match any symbol
      const std::uint32_t ls = intern(l), rs = intern(r);
      l += r;
      merged_[rank] = intern(l);
      merges_.insert(ls, rs, std::uint32_t(rank));
    }
    if (symbols_.size() > detail::pair_map::max_id)
      throw error("byte-level BPE vocabulary has " + std::to_string(symbols_.size()) +
                  " distinct symbols, over the supported " + std::to_string(detail::pair_map::max_id));
    for (unsigned b = 0; b < 256; ++b) {
      const char c = char(b);
      const std::uint32_t sym = symbols_.find(std::string_view(&c, 1));
      byte_symbol_[b] = sym == detail::string_index::npos ? no_symbol : sym;
    }
  }

  struct scratch {
    struct symbol {
      std::uint32_t id;          // symbol id, no_symbol for a byte no merge mentions
      std::uint32_t begin, len;  // bytes of the piece; len 0 once merged into its left neighbour
      std::int32_t prev, next;
    };
    struct bigram {
      std::uint32_t rank;
      std::int32_t left, right;
      std::uint32_t len;  // left.len + right.len when queued
      std::uint32_t merged;
    };
    std::vector<symbol> symbols;
    std::vector<bigram> heap;
  };

  // Appends the tokens of one piece (the bytes llama.cpp's BPE sees) to out.
  void encode(std::string_view piece, std::vector<token_id>& out, scratch& s) const {
    if (piece.empty()) return;
    if (vocab_->ignore_merges())
      if (const token_id t = symbol_token(symbols_.find(piece)); t != null_token) {
        out.push_back(t);
        return;
      }
    auto& sym = s.symbols;
    auto& heap = s.heap;
    sym.clear();
    heap.clear();
    const auto n = std::int32_t(piece.size());
    for (std::int32_t i = 0; i < n; ++i)
      sym.push_back({byte_symbol_[static_cast<unsigned char>(piece[std::size_t(i)])], std::uint32_t(i), 1, i - 1,
                     i + 1 == n ? -1 : i + 1});

    // Min-heap on rank, then on left index (llama.cpp's llm_bigram_bpe order).
    const auto later = [](const scratch::bigram& a, const scratch::bigram& b) {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    const auto try_add = [&](std::int32_t l, std::int32_t r) {
      if (l < 0 || r < 0) return;
      const auto& a = sym[std::size_t(l)];
      const auto& b = sym[std::size_t(r)];
      if (a.id == no_symbol || b.id == no_symbol) return;
      const std::int64_t rank = merges_.find(a.id, b.id);
      if (rank < 0) return;
      heap.push_back({std::uint32_t(rank), l, r, a.len + b.len, merged_[std::size_t(rank)]});
      std::push_heap(heap.begin(), heap.end(), later);
    };
    for (std::int32_t i = 1; i < n; ++i) try_add(i - 1, i);

    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const auto b = heap.back();
      heap.pop_back();
      auto& l = sym[std::size_t(b.left)];
      auto& r = sym[std::size_t(b.right)];
      // Stale when either side changed since queued (same test as comparing the texts).
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
      l.len += r.len;
      l.id = b.merged;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[std::size_t(r.next)].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }

    for (std::int32_t i = 0; i != -1; i = sym[std::size_t(i)].next) {
      const auto& y = sym[std::size_t(i)];
      const token_id t = y.id == no_symbol ? null_token : symbol_token(y.id);
      if (t != null_token) {
        out.push_back(t);
        continue;
      }
      // Not a token: llama.cpp then looks up each byte of the spelling as a one-byte token,
      // silently skipping those that are not (every non-ASCII spelling byte).
      for (const char c : byte_level::encode(piece.substr(y.begin, y.len)))
        if (const token_id id = vocab_->find(std::string_view(&c, 1)); id != null_token) out.push_back(id);
    }
  }

 private:
  token_id symbol_token(std::uint32_t sym) const noexcept {
    return sym < symbol_token_.size() ? symbol_token_[sym] : null_token;
  }
  std::uint32_t intern(std::string_view raw) {
    const auto [id, fresh] = symbols_.insert(raw);
    if (fresh) symbol_token_.push_back(null_token);
    return id;
  }

  const vocab* vocab_;
  detail::string_index symbols_;        // raw bytes of every symbol BPE can hold
  std::vector<token_id> symbol_token_;  // symbol id -> token id, or null_token
  std::array<std::uint32_t, 256> byte_symbol_{};
  detail::pair_map merges_;
  std::vector<std::uint32_t> merged_;   // merge rank -> symbol id of its result
};

}  // namespace strata::tokenizer
