// GBNF (llama.cpp's grammar format, grammars/README.md there) -> rule_set. Syntax:
//   name ::= alternatives        one rule per line; names are [a-zA-Z0-9_-]+; `root` starts
//   a b | c d                    sequence and alternation; a newline after `|` continues the rule
//   "lit" [a-z0-9] [^"\\] .      string, class (ranges, ^ negation), any code point
//   ( ... )                      grouping; newlines are allowed inside parentheses
//   x* x+ x? x{m} x{m,} x{m,n}   repetition
//   \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH   escapes; other text is raw UTF-8
//   # ...                        comment to the end of the line
// Not supported (rejected with an error): llama.cpp's token references <[id]>, <text>, !<...>.
// Every error names the line, the column and the rule (grammar_error).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "strata/core/utf8.hpp"
#include "strata/grammar/char_class.hpp"
#include "strata/grammar/rule_set.hpp"

namespace strata::grammar {

struct parse_options {
  std::string_view root = "root";         // start rule
  std::size_t max_elements = std::size_t(1) << 21;  // after expanding repetitions; guards {m,n} bombs
};

rule_set parse_gbnf(std::string_view text, const parse_options& opt = {});

namespace detail {

class gbnf_parser {
 public:
  gbnf_parser(std::string_view src, const parse_options& opt) : src_(src), opt_(opt) {}

  rule_set run() {
    skip_space(true);
    while (!eof()) {
      parse_rule();
      skip_space(true);
    }
    const auto root = names_.find(std::string(opt_.root));
    if (root == names_.end() || !defined_[root->second])
      throw grammar_error("no rule named '" + std::string(opt_.root) + "' (the start rule)", 0, 0, "");
    for (std::uint32_t r = 0; r < uses_.size(); ++r)
      if (!defined_[r] && uses_[r].set)
        throw grammar_error("undefined rule '" + out_.rules()[r].name + "'", uses_[r].line, uses_[r].column,
                            uses_[r].in_rule);
    out_.set_root(root->second);
    check_left_recursion();
    return std::move(out_);
  }

 private:
  struct use_site {
    bool set = false;
    std::size_t line = 0, column = 0;
    std::string in_rule;
  };

  bool eof() const noexcept { return pos_ >= src_.size(); }
  char peek(std::size_t k = 0) const noexcept { return pos_ + k < src_.size() ? src_[pos_ + k] : '\0'; }
  static bool is_name_char(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  std::pair<std::size_t, std::size_t> line_col(std::size_t at) const noexcept {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return {line, col};
  }
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    const auto [line, col] = line_col(at);
    throw grammar_error(what, line, col, rule_name_);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  std::string shown(std::size_t at) const {
    if (at >= src_.size()) return "end of input";
    const char c = src_[at];
    if (c == '\n') return "end of line";
    const std::size_t n = utf8::valid_sequence_length(src_, at);
    return "'" + (n ? std::string(src_.substr(at, n)) : "\\x" + hex2(static_cast<unsigned char>(c))) + "'";
  }
  static std::string hex2(unsigned v) {
    static constexpr char h[] = "0123456789ABCDEF";
    return {h[v >> 4], h[v & 15]};
  }

  // Spaces, tabs and comments; line breaks too when `newlines` (inside parentheses, after `|`,
  // between rules).
  void skip_space(bool newlines) {
    while (!eof()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++pos_;
      } else if (c == '#') {
        while (!eof() && peek() != '\n') ++pos_;
      } else if (c == '\r' && peek(1) == '\n' && !newlines) {
        ++pos_;  // CRLF: the \n ends the line
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const std::size_t b = pos_;
    while (!eof() && is_name_char(peek())) ++pos_;
    return std::string(src_.substr(b, pos_ - b));
  }

  std::uint32_t rule_index(const std::string& name) {
    const auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    const std::uint32_t r = out_.add_rule(name, 0, 0);
    names_.emplace(name, r);
    defined_.push_back(false);
    uses_.emplace_back();
    return r;
  }
  std::uint32_t new_generated_rule(std::size_t at) {
    const auto [line, col] = line_col(at);
    const std::uint32_t r = out_.add_rule(rule_name_ + "_" + std::to_string(++generated_), line, col);
    out_.rule_at(r).generated = true;
    defined_.push_back(true);
    uses_.emplace_back();
    return r;
  }

  void parse_rule() {
    const std::size_t start = pos_;
    if (peek() == '|') fail("a line cannot start with '|'; put the '|' at the end of the previous line");
    std::string name = parse_name();
    if (name.empty()) fail("expected a rule name, found " + shown(pos_));
    rule_name_ = name;
    generated_ = 0;
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") fail("expected '::=' after the rule name, found " + shown(pos_));
    pos_ += 3;
    const std::uint32_t r = rule_index(name);
    if (defined_[r]) {
      const rule& first = out_.rules()[r];
      fail_at(start, "rule '" + name + "' is defined twice (first at line " + std::to_string(first.line) + ")");
    }
    const auto [line, col] = line_col(start);
    out_.rule_at(r).line = line;
    out_.rule_at(r).column = col;
    defined_[r] = true;
    skip_space(true);
    parse_alternatives(r, false);
    if (!eof() && peek() != '\n' && peek() != '\r') fail("unexpected " + shown(pos_));
  }

  void parse_alternatives(std::uint32_t r, bool nested) {
    for (;;) {
      const std::vector<element> seq = parse_sequence(nested);
      out_.add_alternative(r, seq);
      check_size();
      if (peek() != '|') return;
      ++pos_;
      skip_space(true);
    }
  }

  std::vector<element> parse_sequence(bool nested) {
    std::vector<element> seq;
    std::size_t last = SIZE_MAX;  // first element of the last item, for a following repetition
    for (;;) {
      const char c = peek();
      const std::size_t at = pos_;
      if (c == '"') {
        last = seq.size();
        ++pos_;
        while (peek() != '"') {
          if (eof() || peek() == '\n') fail_at(at, "unterminated string literal");
          seq.push_back(chars(char_class::single(parse_char())));
        }
        ++pos_;
        if (seq.size() == last) last = SIZE_MAX;  // "" matches the empty string: nothing to repeat
      } else if (c == '[') {
        last = seq.size();
        seq.push_back(chars(parse_class()));
      } else if (c == '.') {
        last = seq.size();
        ++pos_;
        seq.push_back(chars(char_class::any()));
      } else if (is_name_char(c)) {
        last = seq.size();
        const std::string name = parse_name();
        const std::uint32_t r = rule_index(name);
        if (!uses_[r].set) {
          const auto [line, col] = line_col(at);
          uses_[r] = {true, line, col, rule_name_};
        }
        seq.push_back({element_kind::rule_ref, r});
      } else if (c == '(') {
        last = seq.size();
        ++pos_;
        skip_space(true);
        const std::uint32_t sub = new_generated_rule(at);
        parse_alternatives(sub, true);
        if (peek() != ')') fail_at(at, "unclosed '(': expected ')' before " + shown(pos_));
        ++pos_;
        seq.push_back({element_kind::rule_ref, sub});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last == SIZE_MAX) fail(std::string("'") + c + "' has nothing to repeat");
        repeat(seq, last, at);
      } else if (c == '<' || c == '!') {
        fail("token references (<...>, !<...>) are not supported");
      } else {
        break;
      }
      skip_space(nested);
    }
    return seq;
  }

  element chars(char_class c) { return {element_kind::chars, out_.add_class(std::move(c))}; }

  char32_t parse_hex(std::size_t digits, std::size_t at) {
    char32_t v = 0;
    for (std::size_t i = 0; i < digits; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail_at(at, "escape needs " + std::to_string(digits) + " hex digits, found " + shown(pos_));
      v = v * 16 + char32_t(d);
      ++pos_;
    }
    if (v > max_code_point) fail_at(at, "code point above U+10FFFF");
    return v;
  }

  // One character of a string or class: an escape or one UTF-8 sequence.
  char32_t parse_char() {
    const std::size_t at = pos_;
    if (peek() == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': return char32_t(e);
        case 'x': return parse_hex(2, at);
        case 'u': return parse_hex(4, at);
        case 'U': return parse_hex(8, at);
        default: fail_at(at, "unknown escape " + shown(at + 1) + " (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\^ \\x \\u \\U)");
      }
    }
    const std::size_t n = utf8::valid_sequence_length(src_, pos_);
    if (n == 0) fail("invalid UTF-8 byte 0x" + hex2(static_cast<unsigned char>(peek())));
    const auto b = [&](std::size_t k) { return char32_t(static_cast<unsigned char>(src_[pos_ + k])); };
    char32_t cp = n == 1 ? b(0)
                  : n == 2 ? (b(0) & 0x1F) << 6 | (b(1) & 0x3F)
                  : n == 3 ? (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F)
                           : (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
    pos_ += n;
    return cp;
  }

  char_class parse_class() {
    const std::size_t at = pos_;
    ++pos_;  // [
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<cp_range> ranges;
    while (peek() != ']') {
      if (eof() || peek() == '\n') fail_at(at, "unterminated character class");
      const std::size_t range_at = pos_;
      const char32_t lo = parse_char();
      char32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail_at(range_at, "character range " + std::string(src_.substr(range_at, pos_ - range_at)) +
                                           " is reversed");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    if (ranges.empty()) fail_at(at, "empty character class");
    char_class c = char_class::from_ranges(std::move(ranges), negate);
    if (c.empty()) fail_at(at, "character class matches nothing");
    return c;
  }

  void repeat(std::vector<element>& seq, std::size_t last, std::size_t at) {
    std::size_t min = 0, max = SIZE_MAX;
    const char c = peek();
    ++pos_;
    if (c == '+') {
      min = 1;
    } else if (c == '?') {
      max = 1;
    } else if (c == '{') {
      skip_space(false);
      min = max = parse_count();
      skip_space(false);
      if (peek() == ',') {
        ++pos_;
        skip_space(false);
        max = peek() >= '0' && peek() <= '9' ? parse_count() : SIZE_MAX;
        skip_space(false);
      }
      if (peek() != '}') fail("expected '}' to close the repetition, found " + shown(pos_));
      ++pos_;
      if (max < min) fail_at(at, "repetition {" + std::to_string(min) + "," + std::to_string(max) + "} has min > max");
    }
    // The repeated item must be one element: wrap a multi-character literal in its own rule.
    element item = seq[last];
    if (seq.size() - last != 1) {
      const std::uint32_t r = new_generated_rule(at);
      out_.add_alternative(r, std::span<const element>(seq).subspan(last));
      item = {element_kind::rule_ref, r};
    }
    seq.resize(last);
    const std::size_t budget = opt_.max_elements;
    if (min > budget || (max != SIZE_MAX && max > budget)) fail_at(at, "repetition count is too large");
    for (std::size_t i = 0; i < min; ++i) seq.push_back(item);
    if (max == SIZE_MAX) {  // star ::= item star |
      const std::uint32_t star = new_generated_rule(at);
      const element body[] = {item, {element_kind::rule_ref, star}};
      out_.add_alternative(star, body);
      out_.add_alternative(star, {});
      seq.push_back({element_kind::rule_ref, star});
    } else if (max > min) {  // opt_1 ::= item | ; opt_k ::= item opt_{k-1} |
      std::uint32_t prev = 0;
      for (std::size_t k = 1; k <= max - min; ++k) {
        const std::uint32_t r = new_generated_rule(at);
        const element body[] = {item, {element_kind::rule_ref, prev}};
        out_.add_alternative(r, std::span<const element>(body, k == 1 ? 1 : 2));
        out_.add_alternative(r, {});
        prev = r;
        check_size();
      }
      seq.push_back({element_kind::rule_ref, prev});
    }
    check_size(seq.size());
  }

  std::size_t parse_count() {
    const std::size_t at = pos_;
    std::size_t v = 0;
    if (!(peek() >= '0' && peek() <= '9')) fail("expected a repetition count, found " + shown(pos_));
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + std::size_t(peek() - '0');
      if (v > opt_.max_elements) fail_at(at, "repetition count is too large");
      ++pos_;
    }
    return v;
  }

  void check_size(std::size_t pending = 0) const {
    if (out_.elements().size() + pending > opt_.max_elements)
      fail("grammar is too large: more than " + std::to_string(opt_.max_elements) +
           " elements once repetitions are expanded");
  }

  // A rule that can reach itself without consuming a character would make the matcher loop;
  // llama.cpp rejects the same grammars.
  void check_left_recursion() const {
    const auto rules = out_.rules();
    const auto elems = out_.elements();
    std::vector<char> nullable(rules.size(), 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t r = 0; r < rules.size(); ++r) {
        if (nullable[r]) continue;
        for (const std::uint32_t a : rules[r].alternatives) {
          std::size_t p = a;
          while (elems[p].kind == element_kind::rule_ref && nullable[elems[p].value]) ++p;
          if (elems[p].kind == element_kind::end) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    // DFS over "may start with" edges; a back edge is a left-recursive cycle.
    std::vector<char> color(rules.size(), 0);  // 0 new, 1 on path, 2 done
    std::vector<std::uint32_t> path;
    const auto dfs = [&](auto&& self, std::uint32_t r) -> void {
      color[r] = 1;
      path.push_back(r);
      for (const std::uint32_t a : rules[r].alternatives) {
        for (std::size_t p = a; elems[p].kind == element_kind::rule_ref; ++p) {
          const std::uint32_t t = elems[p].value;
          if (color[t] == 1) {
            std::string cycle;
            bool on = false;
            for (const std::uint32_t q : path) {
              on = on || q == t;
              if (on) cycle += rules[q].name + " -> ";
            }
            const rule& at = rules[t];
            throw grammar_error("left recursion: " + cycle + rules[t].name +
                                    " can reach itself without consuming a character",
                                at.line, at.column, at.name);
          }
          if (color[t] == 0) self(self, t);
          if (!nullable[t]) break;
        }
      }
      path.pop_back();
      color[r] = 2;
    };
    for (std::uint32_t r = 0; r < rules.size(); ++r)
      if (color[r] == 0) dfs(dfs, r);
  }

  std::string_view src_;
  const parse_options& opt_;
  std::size_t pos_ = 0;
  rule_set out_;
  std::unordered_map<std::string, std::uint32_t> names_;
  std::vector<char> defined_;
  std::vector<use_site> uses_;
  std::string rule_name_;  // rule being parsed, for errors and generated names
  std::size_t generated_ = 0;
};

}  // namespace detail

inline rule_set parse_gbnf(std::string_view text, const parse_options& opt) {
  return detail::gbnf_parser(text, opt).run();
}

}  // namespace strata::grammar
