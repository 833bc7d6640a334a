// Byte sizes as people type them on a command line ("12G", "1.5GiB", "512M", "4096") and as
// the tools print them. Suffixes are binary (K = 1024): `--gpu-budget 24G` means what a 24 GB
// card reports (nvidia-smi's MiB), and llama.cpp's -ub/--mlock sizes use the same convention.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

#include "strata/core/error.hpp"

namespace strata {

// "12G", "12g", "12GB", "12GiB", "1.5G", "800M", "64K", "4096", "4096B", "1T". `what` names the
// option in the error ("--gpu-budget").
inline std::uint64_t parse_byte_size(std::string_view text, std::string_view what) {
  const auto fail = [&](std::string_view why) -> std::uint64_t {
    throw error(std::string(what) + ": '" + std::string(text) + "' is not a size (" + std::string(why) +
                "; examples: 24G, 1.5G, 512M, 4096)");
  };
  std::size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  if (i == 0) return fail("no number");
  double number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + i, number);
  if (ec != std::errc{} || end != text.data() + i || !std::isfinite(number)) return fail("bad number");
  std::string_view unit = text.substr(i);
  double scale = 1;
  if (!unit.empty()) {
    switch (unit.front()) {
      case 'k': case 'K': scale = 0x1p10; break;
      case 'm': case 'M': scale = 0x1p20; break;
      case 'g': case 'G': scale = 0x1p30; break;
      case 't': case 'T': scale = 0x1p40; break;
      case 'b': case 'B': scale = 1; break;
      default: return fail("unknown unit '" + std::string(unit) + "'");
    }
    if (unit.front() != 'b' && unit.front() != 'B') unit.remove_prefix(1);
    if (unit == "iB" || unit == "ib") unit = {};
    if (unit == "B" || unit == "b") unit = {};
    if (!unit.empty()) return fail("unknown unit '" + std::string(text.substr(i)) + "'");
  }
  const double bytes = number * scale;
  if (bytes >= 0x1p63) return fail("too large");
  if (bytes != std::floor(bytes)) return fail("not a whole number of bytes");
  return std::uint64_t(bytes);
}

// 1536 -> "1.50 KiB"; below 1 KiB the exact count ("512 B").
inline std::string format_byte_size(std::uint64_t bytes) {
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = double(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace strata
