// The fixed GBNF rules the JSON Schema converter builds on (whitespace, JSON strings, numbers,
// formats, any value), emitted only when used, and bounded numeric ranges as GBNF.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "strata/grammar/detail/gbnf_text.hpp"

namespace strata::grammar::detail {

class schema_primitives {
 public:
  explicit schema_primitives(bool compact) : compact_(compact) {}

  // Marks rule `name` (and what it uses) for output; returns the name.
  std::string use(std::string_view name) {
    for (std::size_t i = 0; i < defs().size(); ++i) {
      if (defs()[i].name != name) continue;
      if (!used_[i]) {
        used_[i] = true;
        for (const std::string_view dep : defs()[i].deps)
          if (!dep.empty()) use(dep);
      }
      return std::string(name);
    }
    return std::string(name);  // not a primitive: the caller's own rule
  }

  std::string text() const {
    std::string out;
    for (std::size_t i = 0; i < defs().size(); ++i) {
      if (!used_[i]) continue;
      out += std::string(defs()[i].name) + " ::= ";
      out += defs()[i].name == "ws" && compact_ ? std::string("\"\"") : std::string(defs()[i].body);
      out += "\n";
    }
    return out;
  }

  static bool reserved(std::string_view name) {
    for (const auto& d : defs())
      if (d.name == name) return true;
    return false;
  }

 private:
  struct def {
    std::string_view name, body;
    std::array<std::string_view, 6> deps;
  };
  static const std::array<def, 15>& defs() {
    static constexpr std::array<def, 15> d = {{
        {"ws", R"g(( " " | "\n" [ \t]{0,20} )?)g", {}},
        {"char", R"g([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))g", {}},
        {"string", R"g("\"" char* "\"")g", {"char"}},
        {"number", R"g("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)g", {}},
        {"integer", R"g("-"? ( "0" | [1-9] [0-9]{0,17} ))g", {}},
        {"boolean", R"g("true" | "false")g", {}},
        {"null", R"g("null")g", {}},
        {"value", "object | array | string | number | boolean | null",
         {"object", "array", "string", "number", "boolean", "null"}},
        {"member", R"g(string ws ":" ws value)g", {"string", "ws", "value"}},
        {"object", R"g("{" ws ( member ( ws "," ws member )* )? ws "}")g", {"member", "ws"}},
        {"array", R"g("[" ws ( value ( ws "," ws value )* )? ws "]")g", {"value", "ws"}},
        {"date", R"g([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))g", {}},
        {"time",
         R"g(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" ( [0-5] [0-9] | "60" ) ( "." [0-9]{1,9} )? ( [zZ] | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))g",
         {}},
        {"date-time", R"g(date [tT] time)g", {"date", "time"}},
        {"uuid", R"g([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})g", {}},
    }};
    return d;
  }

  bool compact_;
  std::array<bool, 15> used_{};
};

// Largest magnitude an integer rule writes (18 digits) and a bounded number's integer part (16).
inline constexpr std::int64_t max_integer_magnitude = 999'999'999'999'999'999;
inline constexpr std::int64_t max_number_magnitude = 9'999'999'999'999'999;

// Integers in [lo, hi] (either side open when absent), as GBNF; "" when none.
inline std::string integer_range(std::optional<std::int64_t> lo, std::optional<std::int64_t> hi) {
  const std::int64_t l = lo.value_or(-max_integer_magnitude), h = hi.value_or(max_integer_magnitude);
  if (l > h) return "";
  std::string alts;
  if (l < 0) {
    const std::uint64_t a = h < 0 ? std::uint64_t(-h) : 1, b = std::uint64_t(-l);
    alts += "\"-\" " + uint_range(a, b);
  }
  if (h >= 0) alts += (alts.empty() ? "" : " | ") + uint_range(std::uint64_t(std::max<std::int64_t>(l, 0)), std::uint64_t(h));
  return "(" + alts + ")";
}

// Non-negative decimals m = I.F (no sign, no exponent) with A <= m (A < m when a_excl) and
// m <= B (m < B when b_excl), for whole A >= 0 and B (absent: unbounded); "" when none.
// I = A with a_excl needs a nonzero fraction; I = B (inclusive) needs a zero one.
inline std::string magnitude_range(std::int64_t a, bool a_excl, std::optional<std::int64_t> b, bool b_excl) {
  static constexpr std::string_view any_frac = R"g(( "." [0-9]{1,16} )?)g";
  static constexpr std::string_view zero_frac = R"g(( "." "0"{1,16} )?)g";
  static constexpr std::string_view nonzero_frac = R"g("." "0"{0,15} [1-9] [0-9]{0,15})g";
  const std::int64_t top = b.value_or(max_number_magnitude);
  std::string alts;
  const auto add = [&](const std::string& s) { alts += (alts.empty() ? "" : " | ") + s; };
  if (a_excl && (!b || a < *b)) add(uint_range(std::uint64_t(a), std::uint64_t(a)) + " " + std::string(nonzero_frac));
  const std::int64_t lo = a_excl ? a + 1 : a;
  const std::int64_t hi = b ? top - 1 : top;  // whole parts with any fraction
  if (lo <= hi) add(uint_range(std::uint64_t(lo), std::uint64_t(hi)) + " " + std::string(any_frac));
  if (b && !b_excl && *b >= lo) add(uint_range(std::uint64_t(*b), std::uint64_t(*b)) + " " + std::string(zero_frac));
  return alts.empty() ? "" : "(" + alts + ")";
}

}  // namespace strata::grammar::detail
