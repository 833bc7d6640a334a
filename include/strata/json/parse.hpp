// Strict RFC 8259 JSON parsing into json::value, with errors naming line and column, and a
// prefix mode for streaming: parse_prefix() reads one value at the start of a text that may stop
// early (a model still generating), telling "incomplete" apart from "invalid".
// Lone UTF-16 surrogates in \u escapes (valid JSON syntax, not valid text) become U+FFFD.
#pragma once
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "strata/core/error.hpp"
#include "strata/core/utf8.hpp"
#include "strata/json/value.hpp"

namespace strata::json {

class parse_error : public error {
 public:
  parse_error(const std::string& what, std::size_t offset) : error(what), offset_(offset) {}
  std::size_t offset() const noexcept { return offset_; }  // byte offset of the problem

 private:
  std::size_t offset_;
};

inline constexpr std::size_t max_depth = 256;  // nesting limit (arrays + objects)

namespace detail {

class parser {
 public:
  parser(std::string_view s, std::string_view what, bool prefix) : s_(s), what_(what), prefix_(prefix) {}

  // nullopt only in prefix mode, when the text ends inside the value.
  std::optional<value> run(std::size_t& end) {
    ws();
    value v;
    if (!parse_value(v, 0)) return std::nullopt;
    end = i_;
    if (!prefix_) {
      ws();
      if (i_ < s_.size()) fail("unexpected " + shown() + " after the JSON value");
    }
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const { fail_at(i_, msg); }
  [[noreturn]] void fail_at(std::size_t at, const std::string& msg) const {
    std::size_t line = 1, col = 1;
    for (std::size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw parse_error(std::string(what_) + ": line " + std::to_string(line) + ", column " + std::to_string(col) +
                          ": " + msg,
                      at);
  }
  std::string shown() const {
    if (i_ >= s_.size()) return "end of input";
    const std::size_t n = utf8::valid_sequence_length(s_, i_);
    return n ? "'" + std::string(s_.substr(i_, n)) + "'" : "byte 0x" + hex(static_cast<unsigned char>(s_[i_]));
  }
  static std::string hex(unsigned v) {
    static constexpr char h[] = "0123456789ABCDEF";
    return {h[v >> 4], h[v & 15]};
  }
  // End of input inside a value: incomplete in prefix mode, an error otherwise.
  bool truncated(const char* what) const {
    if (prefix_) return false;
    fail(std::string("unexpected end of input in ") + what);
  }

  void ws() noexcept {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  bool parse_value(value& out, std::size_t depth) {
    if (i_ >= s_.size()) return truncated("a value");
    const char c = s_[i_];
    if (c == '{' || c == '[') {
      if (depth >= max_depth) fail("nesting deeper than " + std::to_string(max_depth));
      return c == '{' ? parse_object(out, depth) : parse_array(out, depth);
    }
    if (c == '"') {
      std::string str;
      if (!parse_string(str)) return false;
      out = value::string(std::move(str));
      return true;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
    for (const auto& [word, v] : {std::pair<std::string_view, int>{"true", 1}, {"false", 0}, {"null", 2}}) {
      if (c != word[0]) continue;
      const std::string_view rest = s_.substr(i_);
      const std::size_t n = std::min(rest.size(), word.size());
      if (rest.substr(0, n) != word.substr(0, n)) fail("invalid literal (expected " + std::string(word) + ")");
      if (n < word.size()) return truncated("a literal");
      i_ += word.size();
      out = v == 2 ? value() : value::boolean(v == 1);
      return true;
    }
    fail("expected a JSON value, found " + shown());
  }

  bool parse_object(value& out, std::size_t depth) {
    ++i_;
    out = value::object();
    ws();
    if (i_ >= s_.size()) return truncated("an object");
    if (s_[i_] == '}') {
      ++i_;
      return true;
    }
    for (;;) {
      if (i_ >= s_.size()) return truncated("an object");
      if (s_[i_] != '"') fail("expected a string key in the object, found " + shown());
      std::string key;
      if (!parse_string(key)) return false;
      ws();
      if (i_ >= s_.size()) return truncated("an object");
      if (s_[i_] != ':') fail("expected ':' after the object key, found " + shown());
      ++i_;
      ws();
      value v;
      if (!parse_value(v, depth + 1)) return false;
      out.set(std::move(key), std::move(v));
      ws();
      if (i_ >= s_.size()) return truncated("an object");
      if (s_[i_] == '}') {
        ++i_;
        return true;
      }
      if (s_[i_] != ',') fail("expected ',' or '}' in the object, found " + shown());
      ++i_;
      ws();
    }
  }

  bool parse_array(value& out, std::size_t depth) {
    ++i_;
    out = value::array();
    ws();
    if (i_ >= s_.size()) return truncated("an array");
    if (s_[i_] == ']') {
      ++i_;
      return true;
    }
    for (;;) {
      value v;
      if (!parse_value(v, depth + 1)) return false;
      out.items().push_back(std::move(v));
      ws();
      if (i_ >= s_.size()) return truncated("an array");
      if (s_[i_] == ']') {
        ++i_;
        return true;
      }
      if (s_[i_] != ',') fail("expected ',' or ']' in the array, found " + shown());
      ++i_;
      ws();
    }
  }

  static void append_utf8(std::string& out, char32_t cp) {
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

  // 4 hex digits at i_; -1 if the text ends first.
  long hex4() {
    if (i_ + 4 > s_.size()) {
      for (std::size_t k = i_; k < s_.size(); ++k)
        if (!std::isxdigit(static_cast<unsigned char>(s_[k]))) fail_at(k, "invalid \\u escape");
      return -1;
    }
    long v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = s_[i_ + k];
      if (!std::isxdigit(static_cast<unsigned char>(c))) fail_at(i_ + k, "invalid \\u escape");
      v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    i_ += 4;
    return v;
  }

  bool parse_string(std::string& out) {
    ++i_;
    for (;;) {
      if (i_ >= s_.size()) return truncated("a string");
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) fail("raw control character 0x" + hex(c) + " in a string (write it as an escape)");
      if (c == '\\') {
        if (++i_ >= s_.size()) return truncated("a string");
        const char e = s_[i_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            const long hi = hex4();
            if (hi < 0) return truncated("a string");
            char32_t cp = char32_t(hi);
            if (hi >= 0xD800 && hi <= 0xDBFF) {
              // A high surrogate pairs with a following \uDC00-\uDFFF.
              if (i_ + 1 >= s_.size() && prefix_) return false;
              if (s_.substr(i_, 2) == "\\u") {
                const std::size_t save = i_;
                i_ += 2;
                const long lo = hex4();
                if (lo < 0) return truncated("a string");
                if (lo >= 0xDC00 && lo <= 0xDFFF)
                  cp = 0x10000 + ((char32_t(hi) - 0xD800) << 10) + (char32_t(lo) - 0xDC00);
                else
                  cp = 0xFFFD, i_ = save;
              } else {
                cp = 0xFFFD;
              }
            } else if (hi >= 0xDC00 && hi <= 0xDFFF) {
              cp = 0xFFFD;
            }
            append_utf8(out, cp);
            break;
          }
          default: fail_at(i_ - 2, "unknown escape '\\" + std::string(1, e) + "' in a string");
        }
        continue;
      }
      const std::size_t n = utf8::valid_sequence_length(s_, i_);
      if (n == 0) {
        // A multi-byte character cut by the end of a streaming prefix is not an error yet.
        if (prefix_ && s_.size() - i_ < 4 && c >= 0xC2 && c <= 0xF4) return false;
        fail("invalid UTF-8 byte 0x" + hex(c) + " in a string");
      }
      out.append(s_.substr(i_, n));
      i_ += n;
    }
  }

  bool parse_number(value& out) {
    const std::size_t start = i_;
    const auto digit = [&] { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; };
    const auto digits = [&] {
      const std::size_t b = i_;
      while (digit()) ++i_;
      return i_ > b;
    };
    if (s_[i_] == '-') ++i_;
    if (i_ >= s_.size()) return truncated("a number");
    if (s_[i_] == '0') {
      ++i_;
      if (digit()) fail("leading zero in a number");
    } else if (!digits()) {
      fail("expected a digit, found " + shown());
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (i_ >= s_.size()) return truncated("a number");
      if (!digits()) fail("expected a digit after '.', found " + shown());
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (i_ >= s_.size()) return truncated("a number");
      if (!digits()) fail("expected a digit in the exponent, found " + shown());
    }
    // In a stream the number may go on: it is complete only once something follows it.
    if (i_ >= s_.size() && prefix_) return false;
    out = value::number(std::string(s_.substr(start, i_ - start)));
    return true;
  }

  std::string_view s_;
  std::string_view what_;
  bool prefix_;
  std::size_t i_ = 0;
};

}  // namespace detail

// The whole text must be one JSON value (whitespace around it allowed). `what` starts messages.
inline value parse(std::string_view text, std::string_view what = "json") {
  std::size_t end = 0;
  return *detail::parser(text, what, false).run(end);
}

struct prefix_value {
  value v;
  std::size_t end;  // offset just past the value
};

// One value at the start of `text` (after whitespace); the rest of the text is not read.
// nullopt: the text ends inside the value (it may still be completed). Throws parse_error when
// no continuation could make it valid.
inline std::optional<prefix_value> parse_prefix(std::string_view text, std::string_view what = "json") {
  std::size_t end = 0;
  auto v = detail::parser(text, what, true).run(end);
  if (!v) return std::nullopt;
  return prefix_value{std::move(*v), end};
}

}  // namespace strata::json
