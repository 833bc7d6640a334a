// GLSL declarations of one TurboQuant KV format, generated from the C++ definitions (block.hpp,
// codebooks, hadamard::sign_of) so that shaders never carry a second hand-written copy. A GPU
// backend prepends glsl_layout(head_dim, bits, "K") before compiling its attention shader.
// Everything emitted is a compile-time constant; the names are prefixed with TQ<prefix>_.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "strata/turboquant/format.hpp"

namespace strata::turboquant {

inline std::string glsl_layout(const format& f, std::string_view prefix = "") {
  const std::string p = "TQ" + std::string(prefix) + "_";
  const auto segs = f.segments();
  const auto& rot = f.rotation();
  const auto u = [](std::size_t v) { return std::to_string(v) + "u"; };
  std::string s;
  const auto def = [&](std::string_view name, const std::string& value) {
    s += "#define " + p + std::string(name) + " " + value + "\n";
  };
  const auto uint_array = [&](std::string_view name, auto&& values, std::size_t n) {
    s += "const uint " + p + std::string(name) + "[" + std::to_string(n) + "] = uint[](";
    for (std::size_t i = 0; i < n; ++i) s += (i ? ", " : "") + u(values(i));
    s += ");\n";
  };
  def("BITS", u(f.bits()));
  def("HEAD_DIM", u(f.head_dim()));
  def("ROW_BYTES", u(f.row_bytes()));                        // packed bytes per head vector
  def("SCALE_OFFSET", u(block_scale_offset));                 // fp16 scale, within a block
  def("LOW_PLANE_OFFSET", u(block_header_bytes));             // within a block
  def("LOW_BITS", u(low_plane_bits(f.bits())));               // bits per element in the low plane
  def("HIGH_BITS", u(high_plane_bits(f.bits())));             // 1 for 3-bit formats, else 0
  def("SEGMENTS", u(segs.size()));
  def("ROUNDS", u(rot.rounds()));
  uint_array("SEG_N", [&](std::size_t i) { return segs[i].n; }, segs.size());
  uint_array("SEG_ELEM_OFFSET", [&](std::size_t i) { return segs[i].elem_offset; }, segs.size());
  uint_array("SEG_BYTE_OFFSET", [&](std::size_t i) { return segs[i].byte_offset; }, segs.size());
  // High plane of segment i starts at SEG_BYTE_OFFSET[i] + SEG_HIGH_OFFSET[i].
  uint_array("SEG_HIGH_OFFSET", [&](std::size_t i) { return high_plane_offset(segs[i].n, f.bits()); }, segs.size());
  // Centroids of segment i at [i·16, i·16 + 2^bits), unit-variance domain; multiply by
  // scale/√n (SEG_INV_SQRT_N) to get rotated coordinates.
  s += "const float " + p + "CENTROIDS[" + std::to_string(16 * segs.size()) + "] = float[](";
  for (std::size_t i = 0; i < segs.size(); ++i)
    for (std::size_t k = 0; k < 16; ++k) {
      const float c = k < segs[i].cb.centroids.size() ? segs[i].cb.centroids[k] : 0.0f;
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9e", double(c));
      s += (i || k ? ", " : "") + std::string(buf);
    }
  s += ");\n";
  // Cell boundaries of segment i at [i·16, i·16 + 2^bits − 1) (codebook::index_of: the index
  // is the number of boundaries below z), so a quantizing shader picks the same cells.
  s += "const float " + p + "BOUNDARIES[" + std::to_string(16 * segs.size()) + "] = float[](";
  for (std::size_t i = 0; i < segs.size(); ++i)
    for (std::size_t k = 0; k < 16; ++k) {
      const float b = k < segs[i].cb.boundaries.size() ? segs[i].cb.boundaries[k] : 0.0f;
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9e", double(b));
      s += (i || k ? ", " : "") + std::string(buf);
    }
  s += ");\n";
  s += "const float " + p + "SEG_INV_SQRT_N[" + std::to_string(segs.size()) + "] = float[](";
  for (std::size_t i = 0; i < segs.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9e", double(segs[i].inv_sqrt_n));
    s += (i ? ", " : "") + std::string(buf);
  }
  s += ");\n";
  // Sign pattern D_r: bit (i mod 32) of word r·HEAD_DIM/32 + i/32 set = coordinate i negated in
  // round r. Forward rotation: for r = 0..ROUNDS−1, flip signs then WHT per segment (normalized);
  // inverse: rounds in reverse, WHT then flip.
  const std::size_t words = (f.head_dim() + 31) / 32;
  uint_array("SIGN_BITS", [&](std::size_t w) {
    const std::size_t r = w / words, base = (w % words) * 32;
    std::uint32_t bits = 0;
    for (std::size_t b = 0; b < 32 && base + b < f.head_dim(); ++b)
      bits |= std::uint32_t(rot.signs(std::uint32_t(r))[base + b] < 0) << b;
    return std::size_t(bits);
  }, words * rot.rounds());
  return s;
}

}  // namespace strata::turboquant
