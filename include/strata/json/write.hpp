// json::value -> text exactly as Python's json.dumps(x, ensure_ascii=False) writes what
// json.loads read (the `tojson` filter HF transformers gives chat templates): ", " and ": "
// separators (or indent=N with "," and newlines), integers as written (int("-0") is 0), other
// numbers through float() and repr() (shortest round trip; exponent form below 1e-4 and from
// 1e16, two-digit exponents, ".0" on whole values; inf as Infinity). Strings escape only '"',
// '\\' and C0 controls (\n \r \t \b \f short forms, else \u00xx); DEL and non-ASCII pass through.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>

#include "strata/json/value.hpp"

namespace strata::json {

struct dump_options {
  int indent = -1;             // < 0: one line; >= 0: Python's indent=N
  bool compact = false;        // one line with "," and ":" (separators=(",", ":"))
};

// Appends s as a JSON string literal.
inline void quote(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xF];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}
inline std::string quote(std::string_view s) {
  std::string out;
  quote(out, s);
  return out;
}

// Python repr() of a double.
inline std::string python_float_repr(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<std::size_t>(r.ptr - buf));  // d[.ddd]e±XX, shortest
  const std::size_t e_at = sci.find('e');
  std::string digits(sci.substr(0, e_at));
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exp10 = std::atoi(std::string(sci.substr(e_at + 1)).c_str());
  const int decpt = exp10 + 1;  // digits[0] sits just left of the point when decpt = 1
  std::string out = std::signbit(d) ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(std::size_t(-decpt), '0');
      out += digits;
    } else if (std::size_t(decpt) >= digits.size()) {
      out += digits + std::string(std::size_t(decpt) - digits.size(), '0') + ".0";
    } else {
      out.append(digits, 0, std::size_t(decpt));
      out += '.';
      out.append(digits, std::size_t(decpt));
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1);
  }
  const int e = decpt - 1;
  out += e < 0 ? "e-" : "e+";
  const std::string ed = std::to_string(std::abs(e));
  out += (ed.size() < 2 ? "0" : "") + ed;
  return out;
}

namespace detail {

inline void dump(std::string& out, const value& v, const dump_options& o, int level) {
  switch (v.type()) {
    case kind::null: out += "null"; return;
    case kind::boolean: out += v.as_bool() ? "true" : "false"; return;
    case kind::string: quote(out, v.as_string()); return;
    case kind::number: {
      const std::string& t = v.number_text();
      if (v.is_integer())
        out += t == "-0" ? "0" : t;
      else
        out += python_float_repr(std::strtod(t.c_str(), nullptr));
      return;
    }
    case kind::array:
    case kind::object: break;
  }
  const bool obj = v.is_object();
  const std::size_t n = obj ? v.members().size() : v.items().size();
  out += obj ? '{' : '[';
  if (n == 0) {
    out += obj ? '}' : ']';
    return;
  }
  const auto newline = [&](int lvl) {
    out += '\n';
    out.append(std::size_t(o.indent) * std::size_t(lvl), ' ');
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += o.indent >= 0 || o.compact ? "," : ", ";
    if (o.indent >= 0) newline(level + 1);
    if (obj) {
      quote(out, v.members()[i].first);
      out += o.compact ? ":" : ": ";
      dump(out, v.members()[i].second, o, level + 1);
    } else {
      dump(out, v.items()[i], o, level + 1);
    }
  }
  if (o.indent >= 0) newline(level);
  out += obj ? '}' : ']';
}

}  // namespace detail

inline std::string dumps(const value& v, const dump_options& o = {}) {
  std::string out;
  detail::dump(out, v, o, 0);
  return out;
}

}  // namespace strata::json
