// A compiled grammar: every rule as alternatives of flat element sequences (a terminal class, a
// reference to a rule, or the end of the alternative), with GBNF's groups and repetitions already
// rewritten into generated rules. This is what the parser (gbnf.hpp) produces and the matcher
// (automaton.hpp) runs; it is immutable once built and can be shared by any number of matchers.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/grammar/char_class.hpp"

namespace strata::grammar {

// A grammar problem found while parsing or checking; what() reads
// "grammar: line L, column C (rule 'name'): what went wrong" (position and rule when known).
class grammar_error : public error {
 public:
  grammar_error(const std::string& what, std::size_t line, std::size_t column, std::string rule)
      : error(format(what, line, column, rule)), line_(line), column_(column), rule_(std::move(rule)) {}
  std::size_t line() const noexcept { return line_; }      // 1-based; 0 when not tied to a place
  std::size_t column() const noexcept { return column_; }  // 1-based, in bytes
  const std::string& rule() const noexcept { return rule_; }

 private:
  static std::string format(const std::string& what, std::size_t line, std::size_t column, const std::string& rule) {
    std::string s = "grammar: ";
    if (line > 0) s += "line " + std::to_string(line) + ", column " + std::to_string(column);
    if (!rule.empty()) s += std::string(line > 0 ? " " : "") + "(rule '" + rule + "')";
    if (line > 0 || !rule.empty()) s += ": ";
    return s + what;
  }
  std::size_t line_, column_;
  std::string rule_;
};

enum class element_kind : std::uint8_t {
  end,       // end of an alternative
  chars,     // one code point from classes()[value]
  rule_ref,  // the rule rules()[value]
};

struct element {
  element_kind kind;
  std::uint32_t value;  // class index (chars), rule index (rule_ref), 0 (end)
};

struct rule {
  std::string name;                         // as written, or "<parent>_<n>" for generated rules
  std::vector<std::uint32_t> alternatives;  // index of each alternative's first element
  std::size_t line = 0, column = 0;         // where it is defined (generated: where its construct is)
  bool generated = false;                   // made for a group or repetition, not named by the user
};

class rule_set {
 public:
  std::span<const element> elements() const noexcept { return elements_; }
  std::span<const rule> rules() const noexcept { return rules_; }
  std::span<const char_class> classes() const noexcept { return classes_; }
  std::uint32_t root() const noexcept { return root_; }

  // Index of the user rule named `name`, or -1.
  std::int64_t find(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < rules_.size(); ++i)
      if (!rules_[i].generated && rules_[i].name == name) return static_cast<std::int64_t>(i);
    return -1;
  }

  // Builder interface used by the parser.
  std::uint32_t add_rule(std::string name, std::size_t line, std::size_t column) {
    rules_.push_back({std::move(name), {}, line, column, false});
    return static_cast<std::uint32_t>(rules_.size() - 1);
  }
  rule& rule_at(std::uint32_t r) { return rules_[r]; }
  std::uint32_t add_class(char_class c) {
    // Literal strings repeat the same few characters: share identical classes.
    for (std::size_t i = 0; i < classes_.size(); ++i)
      if (classes_[i] == c) return static_cast<std::uint32_t>(i);
    classes_.push_back(std::move(c));
    return static_cast<std::uint32_t>(classes_.size() - 1);
  }
  void add_alternative(std::uint32_t r, std::span<const element> seq) {
    rules_[r].alternatives.push_back(static_cast<std::uint32_t>(elements_.size()));
    elements_.insert(elements_.end(), seq.begin(), seq.end());
    elements_.push_back({element_kind::end, 0});
  }
  void set_root(std::uint32_t r) { root_ = r; }

 private:
  std::vector<element> elements_;
  std::vector<rule> rules_;
  std::vector<char_class> classes_;
  std::uint32_t root_ = 0;
};

}  // namespace strata::grammar
