// Reference matcher for the tests: the plain llama.cpp-style algorithm over the same rule_set,
// sharing no code with automaton.hpp. A stack is a vector of element positions (top at the back,
// a return position below each rule reference, no tail-call trick); text is decoded to code
// points up front; a trailing incomplete character is checked by enumerating its completions.
// Slow by design: the automaton's answers (viable prefix, complete match) must equal these.
#pragma once
#include <cstdint>
#include <set>
#include <string_view>
#include <vector>

#include "strata/grammar/rule_set.hpp"

namespace grammar_test {

class reference_matcher {
 public:
  explicit reference_matcher(const strata::grammar::rule_set& g) : g_(g) {}

  // -1: `text` is no viable prefix; 0: viable, not a complete match; 1: a complete match.
  int classify(std::string_view text) const {
    std::set<stack> cur;
    for (const std::uint32_t a : g_.rules()[g_.root()].alternatives) expand({a}, cur);
    std::size_t i = 0;
    while (i < text.size()) {
      const auto b0 = static_cast<unsigned char>(text[i]);
      const std::size_t n = b0 < 0x80 ? 1 : b0 >= 0xC2 && b0 <= 0xDF ? 2 : b0 >= 0xE0 && b0 <= 0xEF ? 3
                                         : b0 >= 0xF0 && b0 <= 0xF4 ? 4 : 0;
      if (n == 0) return -1;
      if (i + n > text.size()) return partial_viable(cur, text.substr(i)) ? 0 : -1;
      const std::int64_t cp = decode(text.substr(i, n));
      if (cp < 0) return -1;
      cur = step(cur, static_cast<char32_t>(cp));
      if (cur.empty()) return -1;
      i += n;
    }
    return cur.count(stack{}) ? 1 : 0;
  }

 private:
  using stack = std::vector<std::uint32_t>;

  void expand(stack s, std::set<stack>& out) const {
    if (s.empty()) {
      out.insert(s);
      return;
    }
    const std::uint32_t pos = s.back();
    const auto e = g_.elements()[pos];
    using strata::grammar::element_kind;
    if (e.kind == element_kind::chars) {
      out.insert(s);
    } else if (e.kind == element_kind::end) {
      s.pop_back();
      expand(s, out);
    } else {
      s.back() = pos + 1;  // where to resume after the rule
      for (const std::uint32_t a : g_.rules()[e.value].alternatives) {
        stack t = s;
        t.push_back(a);
        expand(t, out);
      }
    }
  }

  std::set<stack> step(const std::set<stack>& cur, char32_t cp) const {
    std::set<stack> next;
    for (const stack& s : cur) {
      if (s.empty()) continue;
      const auto e = g_.elements()[s.back()];
      if (!g_.classes()[e.value].contains(cp)) continue;
      stack t = s;
      t.back() += 1;
      expand(t, next);
    }
    return next;
  }

  // Strict RFC 3629 decode of one whole sequence; -1 if invalid.
  static std::int64_t decode(std::string_view s) {
    const auto b = [&](std::size_t k) { return std::uint32_t(static_cast<unsigned char>(s[k])); };
    for (std::size_t k = 1; k < s.size(); ++k)
      if ((b(k) & 0xC0) != 0x80) return -1;
    std::uint32_t cp = 0;
    if (s.size() == 1) cp = b(0);
    if (s.size() == 2) cp = (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
    if (s.size() == 3) cp = (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    if (s.size() == 4) cp = (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
    const std::uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[s.size()] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    return cp;
  }

  // Some completion of the incomplete sequence `head` is a valid character that a stack accepts.
  // Enumerates completions, at most 64^3 when only the lead byte is known.
  bool partial_viable(const std::set<stack>& cur, std::string_view head) const {
    const auto lead = static_cast<unsigned char>(head[0]);
    const std::size_t n = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    std::string buf(head);
    const std::size_t missing = n - head.size();
    for (std::uint32_t k = 0; k < (1u << (6 * missing)); ++k) {
      buf.resize(head.size());
      for (std::size_t j = 0; j < missing; ++j) buf += char(0x80 | ((k >> (6 * (missing - 1 - j))) & 0x3F));
      const std::int64_t cp = decode(buf);
      if (cp < 0) continue;
      for (const stack& s : cur)
        if (!s.empty() && g_.classes()[g_.elements()[s.back()].value].contains(static_cast<char32_t>(cp))) return true;
    }
    return false;
  }

  const strata::grammar::rule_set& g_;
};

}  // namespace grammar_test
