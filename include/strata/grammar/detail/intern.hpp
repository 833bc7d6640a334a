// Open-addressing hash tables for the grammar automaton: 64-bit key -> id, and interning of
// sorted 64-bit sequences -> id. They grow only when full past 1/2, so a warm automaton looks
// states up without allocating (std::unordered_map allocates a node per insert).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace strata::grammar::detail {

inline constexpr std::uint32_t no_id = 0xFFFFFFFFu;

constexpr std::uint64_t mix64(std::uint64_t x) noexcept {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// key -> id; ids are handed out by the caller.
class key_index {
 public:
  key_index() { slots_.assign(64, {0, no_id}); }
  std::uint32_t find(std::uint64_t key) const noexcept {
    for (std::size_t i = mix64(key) & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].id == no_id) return no_id;
      if (slots_[i].key == key) return slots_[i].id;
    }
  }
  void insert(std::uint64_t key, std::uint32_t id) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    place(key, id);
    ++count_;
  }
  void clear() {
    slots_.assign(64, {0, no_id});
    count_ = 0;
  }

 private:
  struct slot {
    std::uint64_t key;
    std::uint32_t id;
  };
  void place(std::uint64_t key, std::uint32_t id) noexcept {
    std::size_t i = mix64(key) & (slots_.size() - 1);
    while (slots_[i].id != no_id) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = {key, id};
  }
  void grow() {
    std::vector<slot> old(slots_.size() * 2, slot{0, no_id});
    old.swap(slots_);
    for (const slot& s : old)
      if (s.id != no_id) place(s.key, s.id);
  }
  std::vector<slot> slots_;
  std::size_t count_ = 0;
};

inline std::uint64_t hash_sequence(std::span<const std::uint64_t> v) noexcept {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
  for (const std::uint64_t x : v) h = mix64(h ^ x) + 0x9E3779B97F4A7C15ull;
  return h;
}

// Sequences -> dense ids 0, 1, 2, ...; contents live in one pool.
class sequence_index {
 public:
  sequence_index() { slots_.assign(64, no_id); }

  // Id of `v`, adding it if new; `added` tells which.
  std::uint32_t intern(std::span<const std::uint64_t> v, bool& added) {
    const std::uint64_t h = hash_sequence(v);
    std::size_t i = h & (slots_.size() - 1);
    for (; slots_[i] != no_id; i = (i + 1) & (slots_.size() - 1)) {
      const std::uint32_t id = slots_[i];
      if (hashes_[id] == h && equal(get(id), v)) {
        added = false;
        return id;
      }
    }
    const auto id = static_cast<std::uint32_t>(begin_.size());
    begin_.push_back(static_cast<std::uint32_t>(pool_.size()));
    pool_.insert(pool_.end(), v.begin(), v.end());
    end_.push_back(static_cast<std::uint32_t>(pool_.size()));
    hashes_.push_back(h);
    slots_[i] = id;
    if (2 * begin_.size() > slots_.size()) grow();
    added = true;
    return id;
  }
  std::span<const std::uint64_t> get(std::uint32_t id) const noexcept {
    return {pool_.data() + begin_[id], pool_.data() + end_[id]};
  }
  std::size_t size() const noexcept { return begin_.size(); }
  std::size_t pool_size() const noexcept { return pool_.size(); }
  void clear() {
    slots_.assign(64, no_id);
    pool_.clear();
    begin_.clear();
    end_.clear();
    hashes_.clear();
  }

 private:
  static bool equal(std::span<const std::uint64_t> a, std::span<const std::uint64_t> b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) return false;
    return true;
  }
  void grow() {
    slots_.assign(slots_.size() * 2, no_id);
    for (std::uint32_t id = 0; id < begin_.size(); ++id) {
      std::size_t i = hashes_[id] & (slots_.size() - 1);
      while (slots_[i] != no_id) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = id;
    }
  }
  std::vector<std::uint32_t> slots_;
  std::vector<std::uint64_t> pool_;
  std::vector<std::uint32_t> begin_, end_;
  std::vector<std::uint64_t> hashes_;
};

}  // namespace strata::grammar::detail
