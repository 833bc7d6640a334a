// Writing GBNF source: string literals, character-class members and decimal integer ranges
// (digit by digit, no leading zeros), for the generators (json_schema.hpp, regex.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "strata/grammar/char_class.hpp"

namespace strata::grammar::detail {

inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

inline std::string hex_escape(char32_t cp) {
  static constexpr char h[] = "0123456789ABCDEF";
  std::string s = cp < 0x100 ? "\\x" : cp < 0x10000 ? "\\u" : "\\U";
  const int digits = cp < 0x100 ? 2 : cp < 0x10000 ? 4 : 8;
  for (int i = digits - 1; i >= 0; --i) s += h[(cp >> (4 * i)) & 0xF];
  return s;
}

// "text" as a GBNF string literal (text is valid UTF-8).
inline std::string literal(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += hex_escape(c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// One member of a [...] class.
inline std::string class_char(char32_t cp) {
  if (cp == ']' || cp == '[' || cp == '\\' || cp == '^' || cp == '-' || cp == '"') return std::string("\\") + char(cp);
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || (cp >= 0xD800 && cp <= 0xDFFF) || cp >= 0xFFFE) return hex_escape(cp);
  std::string s;
  append_utf8(s, cp);
  return s;
}

// [ranges] for a non-empty class.
inline std::string class_expr(const char_class& c) {
  std::string s = "[";
  for (const cp_range r : c.ranges()) {
    s += class_char(r.lo);
    if (r.hi != r.lo) {
      if (r.hi > r.lo + 1) s += '-';
      s += class_char(r.hi);
    }
  }
  return s + "]";
}

// Decimal integers in [lo, hi] (0 <= lo <= hi), written without leading zeros, as one GBNF
// expression. Split by digit count, then each same-length range digit by digit: the numbers
// from X to Y share a prefix, then X's next digit + anything >= X's tail, the digits strictly
// between + any tail, and Y's next digit + anything <= Y's tail.
inline std::string same_length_range(const std::string& x, const std::string& y) {
  if (x.empty()) return "";
  const auto tail_any = [](std::size_t n) { return n == 0 ? std::string() : n == 1 ? " [0-9]" : " [0-9]{" + std::to_string(n) + "}"; };
  const auto digits = [](char a, char b) {
    return a == b ? std::string("\"") + a + "\"" : std::string("[") + a + "-" + b + "]";
  };
  if (x[0] == y[0]) {
    const std::string rest = same_length_range(x.substr(1), y.substr(1));
    return std::string("\"") + x[0] + "\"" + (rest.empty() ? "" : " " + rest);
  }
  const std::size_t n = x.size() - 1;
  const bool x_tail_min = x.find_first_not_of('0', 1) == std::string::npos;
  const bool y_tail_max = y.find_first_not_of('9', 1) == std::string::npos;
  std::string alts;
  const auto add = [&](const std::string& a) { alts += (alts.empty() ? "" : " | ") + a; };
  char lo_mid = x[0], hi_mid = y[0];
  if (!x_tail_min) {
    add(std::string("\"") + x[0] + "\" (" + same_length_range(x.substr(1), std::string(n, '9')) + ")");
    ++lo_mid;
  }
  if (!y_tail_max) --hi_mid;
  if (lo_mid <= hi_mid) add(digits(lo_mid, hi_mid) + tail_any(n));
  if (!y_tail_max) add(std::string("\"") + y[0] + "\" (" + same_length_range(std::string(n, '0'), y.substr(1)) + ")");
  return "(" + alts + ")";
}

inline std::string uint_range(std::uint64_t lo, std::uint64_t hi) {
  std::string alts;
  std::uint64_t p10 = 1;  // 10^(d-1)
  for (int d = 1; d <= 20 && lo <= hi; ++d) {
    const std::uint64_t first = d == 1 ? 0 : p10;
    const std::uint64_t last = d >= 20 ? UINT64_MAX : p10 * 10 - 1;
    if (lo <= last) {
      const std::uint64_t a = std::max(lo, first), b = std::min(hi, last);
      if (a <= b) alts += (alts.empty() ? "" : " | ") + same_length_range(std::to_string(a), std::to_string(b));
    }
    if (d < 20) p10 *= 10;
  }
  return "(" + alts + ")";
}

}  // namespace strata::grammar::detail
