// A set of Unicode code points as sorted, disjoint, non-adjacent inclusive ranges: the terminal
// of a GBNF grammar ("abc" is three one-point classes, [a-z0-9], [^"\\], `.`). Membership and
// "does this interval hold a member" are the two questions the byte-level matcher asks.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::grammar {

inline constexpr char32_t max_code_point = 0x10FFFF;

struct cp_range {
  char32_t lo;  // inclusive
  char32_t hi;  // inclusive, >= lo
};

class char_class {
 public:
  char_class() = default;

  // Normalizes any list of ranges (unsorted, overlapping, reversed ones are the caller's error:
  // the parser rejects [z-a] before it gets here); `negate` takes the complement in [0, 0x10FFFF].
  static char_class from_ranges(std::vector<cp_range> rs, bool negate = false) {
    std::sort(rs.begin(), rs.end(), [](cp_range a, cp_range b) { return a.lo < b.lo; });
    char_class c;
    for (const cp_range r : rs) {
      if (!c.ranges_.empty() && r.lo <= c.ranges_.back().hi + 1)
        c.ranges_.back().hi = std::max(c.ranges_.back().hi, r.hi);
      else
        c.ranges_.push_back(r);
    }
    if (negate) {
      std::vector<cp_range> inv;
      char32_t next = 0;
      for (const cp_range r : c.ranges_) {
        if (r.lo > next) inv.push_back({next, r.lo - 1});
        next = r.hi + 1;
      }
      if (next <= max_code_point) inv.push_back({next, max_code_point});
      c.ranges_ = std::move(inv);
    }
    return c;
  }
  static char_class single(char32_t cp) { return from_ranges({{cp, cp}}); }
  static char_class any() { return from_ranges({{0, max_code_point}}); }

  bool contains(char32_t cp) const noexcept {
    // Most classes hold one or two ranges; a linear scan beats binary search there.
    for (const cp_range r : ranges_) {
      if (cp < r.lo) return false;
      if (cp <= r.hi) return true;
    }
    return false;
  }

  // Whether some member lies in [lo, hi].
  bool intersects(char32_t lo, char32_t hi) const noexcept {
    for (const cp_range r : ranges_) {
      if (r.lo > hi) return false;
      if (r.hi >= lo) return true;
    }
    return false;
  }

  // Whether every code point in [lo, hi] is a member, UTF-16 surrogates (never text) excepted.
  bool covers(char32_t lo, char32_t hi) const noexcept {
    const auto inside = [&](char32_t a, char32_t b) {
      if (a > b) return true;
      for (const cp_range r : ranges_)
        if (r.lo <= a) {
          if (r.hi >= b) return true;
        } else {
          break;
        }
      return false;
    };
    return inside(lo, std::min<char32_t>(hi, 0xD7FF)) && inside(std::max<char32_t>(lo, 0xE000), hi);
  }

  bool empty() const noexcept { return ranges_.empty(); }
  std::span<const cp_range> ranges() const noexcept { return ranges_; }
  friend bool operator==(const char_class& a, const char_class& b) noexcept {
    return std::equal(a.ranges_.begin(), a.ranges_.end(), b.ranges_.begin(), b.ranges_.end(),
                      [](cp_range x, cp_range y) { return x.lo == y.lo && x.hi == y.hi; });
  }

 private:
  std::vector<cp_range> ranges_;
};

}  // namespace strata::grammar
