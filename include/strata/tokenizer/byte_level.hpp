// GPT-2's byte <-> code point map: byte-level BPE vocabularies spell every byte as a printable
// code point (the 188 printable Latin-1 bytes as themselves, the other 68 as U+0100..U+0143 in
// byte order), so " " is "Ġ" (U+0120) and "\n" is "Ċ" (U+010A). Spec: openai/gpt-2 encoder.py
// bytes_to_unicode(); llama.cpp unicode.cpp uses the same table.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "strata/tokenizer/lenient_utf8.hpp"

namespace strata::tokenizer::byte_level {

namespace detail {

constexpr bool maps_to_itself(unsigned b) noexcept {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char16_t, 256> make_byte_to_cp() noexcept {
  std::array<char16_t, 256> t{};
  unsigned next = 256;
  for (unsigned b = 0; b < 256; ++b) t[b] = maps_to_itself(b) ? char16_t(b) : char16_t(next++);
  return t;
}

}  // namespace detail

inline constexpr std::array<char16_t, 256> byte_to_cp = detail::make_byte_to_cp();
static_assert(byte_to_cp[' '] == 0x120 && byte_to_cp['\n'] == 0x10A && byte_to_cp[0xAD] == 0x143);

// Inverse map; nullopt for code points that stand for no byte.
constexpr std::optional<std::uint8_t> cp_to_byte(char32_t cp) noexcept {
  if (cp < 256 && detail::maps_to_itself(unsigned(cp))) return std::uint8_t(cp);
  if (cp >= 256 && cp < 256 + 68) {
    unsigned k = unsigned(cp) - 256;  // index among the bytes that do not map to themselves
    for (unsigned b = 0; b < 256; ++b)
      if (!detail::maps_to_itself(b) && k-- == 0) return std::uint8_t(b);
  }
  return std::nullopt;
}

// Raw bytes -> their byte-level spelling (UTF-8).
inline std::string encode(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (const char c : raw) lenient_utf8::append(out, byte_to_cp[static_cast<unsigned char>(c)]);
  return out;
}

// A byte-level spelling -> raw bytes, replacing `out`; false unless `spelled` is exactly encode()
// of something (every code point stands for a byte and is in shortest form), so the map stays
// one-to-one.
inline bool decode(std::string_view spelled, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < spelled.size();) {
    const std::size_t at = i;
    const char32_t cp = lenient_utf8::decode(spelled, i);
    const auto b = cp_to_byte(cp);
    if (!b || i - at != (cp < 0x80 ? 1u : 2u)) return false;
    out += char(*b);
  }
  return true;
}

inline std::optional<std::string> decode(std::string_view spelled) {
  std::string out;
  if (!decode(spelled, out)) return std::nullopt;
  return out;
}

}  // namespace strata::tokenizer::byte_level
