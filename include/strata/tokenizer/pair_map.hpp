// Open-addressing map from a pair of small ids to a small value (BPE: symbol pair -> merge rank;
// SentencePiece: token pair -> merged token), probed once per candidate pair while merging. A
// slot packs left (21 bits), right (21 bits) and value (22 bits) into 8 bytes, which keeps
// twice as much of the table in cache as {u64 key, u32, u32} would.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::tokenizer::detail {

class pair_map {
 public:
  static constexpr std::uint32_t max_id = (1u << 21) - 2;     // all-ones left marks an empty slot
  static constexpr std::uint32_t max_value = (1u << 22) - 1;

  // Callers keep ids <= max_id and values <= max_value, and reserve() for the final size: the
  // table does not grow.

  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < n + n / 2 + n / 8) cap *= 2;  // load factor <= 0.62
    slots_.assign(cap, empty);
    mask_ = cap - 1;
    shift_ = 64;
    for (std::size_t c = cap; c > 1; c >>= 1) --shift_;
  }
  // Keeps the first value of a repeated pair.
  void insert(std::uint32_t l, std::uint32_t r, std::uint32_t value) {
    if (slots_.empty()) reserve(1);
    const std::uint64_t key = std::uint64_t(l) << 43 | std::uint64_t(r) << 22;
    for (std::size_t i = hash(key);; i = (i + 1) & mask_) {
      if ((slots_[i] & key_mask) == key) return;
      if (slots_[i] == empty) {
        slots_[i] = key | value;
        return;
      }
    }
  }
  // Value of (l, r), or -1.
  std::int64_t find(std::uint32_t l, std::uint32_t r) const noexcept {
    if (slots_.empty()) return -1;
    const std::uint64_t key = std::uint64_t(l) << 43 | std::uint64_t(r) << 22;
    for (std::size_t i = hash(key);; i = (i + 1) & mask_) {
      if ((slots_[i] & key_mask) == key) return std::int64_t(slots_[i] & value_mask);
      if (slots_[i] == empty) return -1;
    }
  }

 private:
  static constexpr std::uint64_t empty = ~std::uint64_t(0);
  static constexpr std::uint64_t value_mask = (std::uint64_t(1) << 22) - 1;
  static constexpr std::uint64_t key_mask = ~value_mask;
  // Fibonacci hashing: the top bits of key * 2^64/phi.
  std::size_t hash(std::uint64_t k) const noexcept { return std::size_t((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<std::uint64_t> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace strata::tokenizer::detail
