// The lenient UTF-8 reading llama.cpp's tokenizers apply to arbitrary bytes (unicode.cpp,
// d32676d77): sequence length from the lead byte's high nibble alone, no overlong or surrogate
// checks, and each byte that cannot start a sequence read as U+FFFD. Matching it is what makes
// invalid input tokenize as llama.cpp does instead of failing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tokenizer::lenient_utf8 {

inline constexpr char32_t replacement = 0xFFFD;

// Sequence length claimed by a lead byte (1 for ASCII and for stray continuation bytes).
constexpr std::size_t lead_length(unsigned char c) noexcept {
  constexpr unsigned char by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return by_nibble[c >> 4];
}

// Decodes the code point at s[i] and advances i. A byte that does not start a complete sequence
// (stray continuation, 0xF8..0xFF, truncated or malformed tail) yields U+FFFD and advances by 1.
// Sequences decoding above U+10FFFF are treated the same way: llama.cpp decodes them and then
// throws while re-encoding, so there is no llama.cpp behaviour to match for them.
constexpr char32_t decode(std::string_view s, std::size_t& i) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const auto cont = [&](std::size_t k) { return k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(i);
  if (c < 0x80) {
    ++i;
    return c;
  }
  if ((c & 0x40) == 0) {
    ++i;
    return replacement;
  }
  if ((c & 0x20) == 0) {
    if (!cont(i + 1)) { ++i; return replacement; }
    const char32_t cp = char32_t(c & 0x1F) << 6 | char32_t(b(i + 1) & 0x3F);
    i += 2;
    return cp;
  }
  if ((c & 0x10) == 0) {
    if (!cont(i + 1) || !cont(i + 2)) { ++i; return replacement; }
    const char32_t cp = char32_t(c & 0x0F) << 12 | char32_t(b(i + 1) & 0x3F) << 6 | char32_t(b(i + 2) & 0x3F);
    i += 3;
    return cp;
  }
  if ((c & 0x08) == 0) {
    if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) { ++i; return replacement; }
    const char32_t cp = char32_t(c & 0x07) << 18 | char32_t(b(i + 1) & 0x3F) << 12 |
                        char32_t(b(i + 2) & 0x3F) << 6 | char32_t(b(i + 3) & 0x3F);
    if (cp > 0x10FFFF) { ++i; return replacement; }
    i += 4;
    return cp;
  }
  ++i;
  return replacement;
}

// Appends cp in the shortest form without rejecting surrogates (as llama.cpp's encoder does).
inline void append(std::string& out, char32_t cp) {
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

// The bytes llama.cpp's BPE path actually sees for `s` (decode + re-encode), and a copy that is
// strict UTF-8 for the regex engine: surrogates, the only code points the first may encode that
// strict UTF-8 forbids, become U+E000 there. Both are "other" (\p{C}) to every pre-tokenizer
// regex and both take 3 bytes, so byte offsets agree between the two strings.
inline void repair(std::string_view s, std::string& bytes, std::string& regex_text) {
  bytes.clear();
  regex_text.clear();
  for (std::size_t i = 0; i < s.size();) {
    const char32_t cp = decode(s, i);
    append(bytes, cp);
    append(regex_text, cp >= 0xD800 && cp <= 0xDFFF ? char32_t(0xE000) : cp);
  }
}

}  // namespace strata::tokenizer::lenient_utf8
