// String operations the chat templates perform, with the exact semantics of the Python/Jinja2
// calls they replace: Jinja's `trim` (Python str.strip(), Unicode whitespace), str.strip('\n')
// and friends, str.split(sep)[0] / [-1], and the `tojson` of a string (json.dumps, ensure_ascii=False).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "strata/core/utf8.hpp"
#include "strata/json/write.hpp"

namespace strata::chat::detail {

// Python's str.isspace() set, which str.strip() with no argument removes (Jinja2 `trim`).
constexpr bool is_py_space(std::uint32_t cp) noexcept {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Code point of the valid n-byte sequence at s[i] (n from utf8::valid_sequence_length).
constexpr std::uint32_t decode(std::string_view s, std::size_t i, std::size_t n) noexcept {
  const auto b = [&](std::size_t k) { return std::uint32_t(static_cast<unsigned char>(s[i + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
    case 3: return (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    default: return (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
  }
}

// Jinja2 `trim` / Python str.strip(). Invalid UTF-8 bytes count as non-space and stop the scan.
constexpr std::string_view py_strip(std::string_view s) noexcept {
  std::size_t b = 0;
  while (b < s.size()) {
    const std::size_t n = utf8::valid_sequence_length(s, b);
    if (n == 0 || !is_py_space(decode(s, b, n))) break;
    b += n;
  }
  std::size_t e = s.size();
  while (e > b) {
    std::size_t n = 0;  // length of the valid sequence ending at e, if any
    for (std::size_t k = 1; k <= 4 && k <= e - b && n == 0; ++k)
      if (utf8::valid_sequence_length(s, e - k) == k) n = k;
    if (n == 0 || !is_py_space(decode(s, e - n, n))) break;
    e -= n;
  }
  return s.substr(b, e - b);
}

constexpr std::string_view lstrip(std::string_view s, char c) noexcept {
  const std::size_t p = s.find_first_not_of(c);
  return p == std::string_view::npos ? std::string_view{} : s.substr(p);
}
constexpr std::string_view rstrip(std::string_view s, char c) noexcept {
  const std::size_t p = s.find_last_not_of(c);
  return p == std::string_view::npos ? std::string_view{} : s.substr(0, p + 1);
}
constexpr std::string_view strip(std::string_view s, char c) noexcept { return lstrip(rstrip(s, c), c); }

// s.split(sep)[0]: everything before the first sep (all of s when absent).
constexpr std::string_view before_first(std::string_view s, std::string_view sep) noexcept {
  return s.substr(0, s.find(sep));
}
// s.split(sep)[-1]: everything after the last sep (all of s when absent).
constexpr std::string_view after_last(std::string_view s, std::string_view sep) noexcept {
  const std::size_t p = s.rfind(sep);
  return p == std::string_view::npos ? s : s.substr(p + sep.size());
}

// Python json.dumps(s, ensure_ascii=False) of a string, the `tojson` HF transformers installs
// (json/write.hpp).
inline std::string json_quote(std::string_view s) { return json::quote(s); }

}  // namespace strata::chat::detail
