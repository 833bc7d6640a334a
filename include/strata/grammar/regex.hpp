// JSON Schema `pattern` (ECMA-262 regex, a subset) -> GBNF over the *content* of a JSON string:
// each regex character is matched in its JSON-encoded form ('"' as \", '\' as \\, controls as
// their escapes). Supported: literals; . (any but newline); [...] with ranges and ^; \d \D \w \W
// \s \S; escapes \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation; groups ( ) (?: ) and
// named groups (?<n> ) (?P<n> ); alternation |; * + ? {m} {m,} {m,n} (lazy forms accepted: the
// set of full matches is the same); ^ at the start and $ at the end. A pattern without ^ may be
// preceded, one without $ followed, by any characters (JSON Schema patterns are not anchored).
// Rejected with an error: backreferences, lookaround, \b \B, \p{..}, inline flags.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/grammar/char_class.hpp"
#include "strata/grammar/detail/gbnf_text.hpp"

namespace strata::grammar {

// Thrown for a pattern outside the subset; what() names the offset.
class regex_error : public error {
 public:
  using error::error;
};

// GBNF for one JSON-string character (raw or escaped) whose decoded code point is in `c`.
inline std::string json_char_expr(const char_class& c) {
  std::vector<cp_range> raw;
  std::string alts;
  const auto add = [&](const std::string& a) { alts += (alts.empty() ? "" : " | ") + a; };
  for (const cp_range r : c.ranges()) {
    // Raw: everything but '"', '\' and C0 controls, which JSON must escape.
    char32_t lo = std::max<char32_t>(r.lo, 0x20);
    const char32_t hi = r.hi;
    while (lo <= hi) {
      const char32_t stop = lo <= '"' && hi >= '"' ? '"' : lo <= '\\' && hi >= '\\' ? '\\' : 0;
      if (stop == 0) {
        raw.push_back({lo, hi});
        break;
      }
      if (lo < stop) raw.push_back({lo, stop - 1});
      lo = stop + 1;
    }
  }
  if (!raw.empty()) add(detail::class_expr(char_class::from_ranges(raw)));
  static constexpr struct {
    char32_t cp;
    const char* esc;
  } short_forms[] = {{'"', "\"\\\\\\\"\""}, {'\\', "\"\\\\\\\\\""}, {'\n', "\"\\\\n\""}, {'\r', "\"\\\\r\""},
                     {'\t', "\"\\\\t\""},   {'\b', "\"\\\\b\""},    {'\f', "\"\\\\f\""}};
  for (const auto& f : short_forms)
    if (c.contains(f.cp)) add(f.esc);
  for (char32_t cp = 0; cp < 0x20; ++cp) {
    if (!c.contains(cp) || cp == '\n' || cp == '\r' || cp == '\t' || cp == '\b' || cp == '\f') continue;
    static constexpr char h[] = "0123456789abcdef";
    add(std::string("\"\\\\u00") + h[cp >> 4] + h[cp & 15] + "\"");
  }
  if (alts.empty()) throw regex_error("pattern: a character class matches nothing");
  return "(" + alts + ")";
}

namespace detail {

class regex_converter {
 public:
  explicit regex_converter(std::string_view p) : p_(p) {}

  std::string run() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      ++i_;
    }
    std::string body = alternation(0);
    if (i_ < p_.size() && p_[i_] == '$') {
      anchored_end = true;
      ++i_;
    }
    if (i_ < p_.size()) fail(p_[i_] == ')' ? "unbalanced ')'" : p_[i_] == '^' || p_[i_] == '$'
                                                                   ? "anchors are supported only at the start and end"
                                                                   : "unexpected character");
    const std::string any = json_char_expr(char_class::any()) + "*";
    return (anchored_start ? "" : any + " ") + "(" + body + ")" + (anchored_end ? "" : " " + any);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw regex_error("pattern: " + what + " at offset " + std::to_string(i_) + " in '" + std::string(p_) + "'");
  }
  bool at(char c) const noexcept { return i_ < p_.size() && p_[i_] == c; }

  std::string alternation(int depth) {
    if (depth > 64) fail("groups nested too deeply");
    std::string out = sequence(depth);
    while (at('|')) {
      ++i_;
      out += " | " + sequence(depth);
    }
    return out;
  }

  std::string sequence(int depth) {
    std::string out;
    while (i_ < p_.size() && !at('|') && !at(')')) {
      if (at('$') && i_ + 1 == p_.size()) break;
      std::string atom_expr = atom(depth);
      atom_expr += quantifier();
      out += (out.empty() ? "" : " ") + atom_expr;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantifier() {
    std::string q;
    if (at('*') || at('+') || at('?')) {
      q = p_[i_++];
    } else if (at('{')) {
      const std::size_t close = p_.find('}', i_);
      if (close == std::string_view::npos) fail("unterminated {m,n}");
      const std::string_view body = p_.substr(i_ + 1, close - i_ - 1);
      for (const char c : body)
        if (!(c >= '0' && c <= '9') && c != ',') fail("invalid {m,n}");
      if (body.empty() || body[0] == ',') fail("invalid {m,n}");
      q = "{" + std::string(body) + "}";
      i_ = close + 1;
    } else {
      return "";
    }
    if (at('?')) ++i_;  // lazy: same full-match language
    if (at('*') || at('+') || at('{')) fail("nested quantifier");
    return q;
  }

  std::string atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (at('?')) {
        ++i_;
        if (at(':')) {
          ++i_;
        } else if (at('P') || at('<')) {
          if (at('P')) ++i_;
          if (!at('<') || (i_ + 1 < p_.size() && (p_[i_ + 1] == '=' || p_[i_ + 1] == '!')))
            fail("lookbehind is not supported");
          const std::size_t close = p_.find('>', i_);
          if (close == std::string_view::npos) fail("unterminated group name");
          i_ = close + 1;
        } else if (at('=') || at('!')) {
          fail("lookahead is not supported");
        } else {
          fail("inline flags are not supported");
        }
      }
      const std::string inner = alternation(depth + 1);
      if (!at(')')) fail("missing ')'");
      ++i_;
      return "(" + inner + ")";
    }
    if (c == '[') return json_char_expr(bracket());
    if (c == '.') {
      ++i_;
      return json_char_expr(char_class::from_ranges({{'\n', '\n'}}, true));
    }
    if (c == '\\') return json_char_expr(escape(false));
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("quantifier without anything to repeat");
    if (c == '^' || c == '$') fail("anchors are supported only at the start and end");
    return json_char_expr(char_class::single(utf8_char()));
  }

  char32_t utf8_char() {
    const auto b0 = static_cast<unsigned char>(p_[i_]);
    const std::size_t n = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    if (i_ + n > p_.size()) fail("invalid UTF-8");
    char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (std::size_t k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(p_[i_ + k]) & 0x3F);
    i_ += n;
    return cp;
  }

  static char_class shorthand(char c) {
    switch (c) {
      case 'd': return char_class::from_ranges({{'0', '9'}});
      case 'D': return char_class::from_ranges({{'0', '9'}}, true);
      case 'w': return char_class::from_ranges({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}});
      case 'W': return char_class::from_ranges({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}, true);
      case 's': return char_class::from_ranges({{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}});
      default: return char_class::from_ranges({{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}}, true);
    }
  }

  std::uint32_t hex(std::size_t digits) {
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < digits; ++k, ++i_) {
      if (i_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) fail("invalid hex escape");
      const char c = p_[i_];
      v = v * 16 + std::uint32_t(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After a backslash; in a class, \b is a backspace.
  char_class escape(bool in_class) {
    ++i_;
    if (i_ >= p_.size()) fail("pattern ends with a backslash");
    const char e = p_[i_++];
    switch (e) {
      case 'd': case 'D': case 'w': case 'W': case 's': case 'S': return shorthand(e);
      case 't': return char_class::single('\t');
      case 'n': return char_class::single('\n');
      case 'r': return char_class::single('\r');
      case 'f': return char_class::single('\f');
      case 'v': return char_class::single('\v');
      case '0': return char_class::single(0);
      case 'x': return char_class::single(hex(2));
      case 'u': return char_class::single(hex(4));
      case 'b':
        if (in_class) return char_class::single('\b');
        i_ -= 2;
        fail("\\b (word boundary) is not supported");
      case 'B': i_ -= 2; fail("\\B is not supported");
      case 'p': case 'P': i_ -= 2; fail("Unicode property classes are not supported");
      default:
        if (e >= '1' && e <= '9') {
          i_ -= 2;
          fail("backreferences are not supported");
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          i_ -= 2;
          fail(std::string("unknown escape \\") + e);
        }
        return char_class::single(static_cast<unsigned char>(e));
    }
  }

  char_class bracket() {
    ++i_;
    bool negate = false;
    if (at('^')) {
      negate = true;
      ++i_;
    }
    std::vector<cp_range> rs;
    bool first = true;
    while (!at(']') || first) {
      if (i_ >= p_.size()) fail("unterminated character class");
      first = false;
      char_class lo_set;
      char32_t lo = 0;
      bool single = true;
      if (at('\\')) {
        lo_set = escape(true);
        single = lo_set.ranges().size() == 1 && lo_set.ranges()[0].lo == lo_set.ranges()[0].hi;
        lo = single ? lo_set.ranges()[0].lo : 0;
      } else {
        lo = utf8_char();
      }
      if (!single) {
        for (const cp_range r : lo_set.ranges()) rs.push_back(r);
        continue;
      }
      if (at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        char32_t hi;
        if (at('\\')) {
          const char_class h = escape(true);
          if (h.ranges().size() != 1 || h.ranges()[0].lo != h.ranges()[0].hi) fail("invalid class range");
          hi = h.ranges()[0].lo;
        } else {
          hi = utf8_char();
        }
        if (hi < lo) fail("reversed class range");
        rs.push_back({lo, hi});
      } else {
        rs.push_back({lo, lo});
      }
    }
    ++i_;
    char_class c = char_class::from_ranges(std::move(rs), negate);
    if (c.empty()) fail("character class matches nothing");
    return c;
  }

  std::string_view p_;
  std::size_t i_ = 0;
};

}  // namespace detail

// GBNF expression for the content of a JSON string matching `pattern` (no quotes included).
inline std::string regex_to_gbnf(std::string_view pattern) { return detail::regex_converter(pattern).run(); }

}  // namespace strata::grammar
