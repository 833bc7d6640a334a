// Interned strings with dense ids in insertion order: one byte arena plus an open-addressing
// hash table of ids. Token texts (vocab) and BPE symbols use it; compared with an
// unordered_map<string, id> it loads a 150k-entry vocabulary several times faster and copies
// and moves safely (entries are offsets, not pointers).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::tokenizer::detail {

class string_index {
 public:
  static constexpr std::uint32_t npos = ~std::uint32_t(0);

  void reserve(std::size_t n, std::size_t bytes) {
    arena_.reserve(bytes);
    offsets_.reserve(n + 1);
    rehash(n);
  }

  std::size_t size() const noexcept { return offsets_.size() - 1; }
  std::string_view at(std::uint32_t id) const noexcept {
    return {arena_.data() + offsets_[id], offsets_[id + 1] - offsets_[id]};
  }

  // Id of s, adding it if absent; second is true when it was added.
  std::pair<std::uint32_t, bool> insert(std::string_view s) {
    if (2 * (size() + 1) > slots_.size()) rehash(2 * slots_.size());
    const std::size_t h = hash(s);
    std::size_t i = h & mask_;
    for (; slots_[i] != empty; i = (i + 1) & mask_)
      if (tag(slots_[i]) == tag_of(h) && at(id(slots_[i])) == s) return {id(slots_[i]), false};
    const auto n = std::uint32_t(size());
    arena_.append(s);
    offsets_.push_back(arena_.size());
    slots_[i] = slot(h, n);
    return {n, true};
  }

  std::uint32_t find(std::string_view s) const noexcept {
    if (slots_.empty()) return npos;
    const std::size_t h = hash(s);
    for (std::size_t i = h & mask_; slots_[i] != empty; i = (i + 1) & mask_)
      if (tag(slots_[i]) == tag_of(h) && at(id(slots_[i])) == s) return id(slots_[i]);
    return npos;
  }

 private:
  // A slot holds the high 32 bits of the hash (checked before touching the arena) and the id.
  static constexpr std::uint64_t empty = ~std::uint64_t(0);
  static std::size_t hash(std::string_view s) noexcept { return std::hash<std::string_view>{}(s); }
  static std::uint32_t tag_of(std::size_t h) noexcept { return std::uint32_t(std::uint64_t(h) >> 32); }
  static std::uint64_t slot(std::size_t h, std::uint32_t id) noexcept { return std::uint64_t(tag_of(h)) << 32 | id; }
  static std::uint32_t tag(std::uint64_t slot) noexcept { return std::uint32_t(slot >> 32); }
  static std::uint32_t id(std::uint64_t slot) noexcept { return std::uint32_t(slot); }

  void rehash(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (cap <= slots_.size()) return;
    slots_.assign(cap, empty);
    mask_ = cap - 1;
    for (std::uint32_t k = 0; k < size(); ++k) {
      const std::size_t h = hash(at(k));
      std::size_t i = h & mask_;
      while (slots_[i] != empty) i = (i + 1) & mask_;
      slots_[i] = slot(h, k);
    }
  }

  std::string arena_;                    // every string back to back
  std::vector<std::size_t> offsets_{0};  // size() + 1 offsets into arena_
  std::vector<std::uint64_t> slots_;     // hash tag << 32 | id; at most half full
  std::size_t mask_ = 0;
};

}  // namespace strata::tokenizer::detail
