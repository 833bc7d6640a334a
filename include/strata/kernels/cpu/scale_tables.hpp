// Block-scale decoding tables for the SIMD dots, built at compile time: every binary16 value
// as a float (2^16 entries, 256 KiB, from core/fp16.hpp) and every MXFP4 E8M0 exponent as its
// half scale 2^(e − 128). The SIMD dots read block scales through it: a lookup is a single load (or a
// broadcast straight from memory), where vcvtph2ps costs a shuffle-port uop per scale and
// made the scale, not the integer dot, the bottleneck of the 32-element block formats.
// Pure constant data, so sharing it between the ISA tiers' TUs is safe.
#pragma once
#include <bit>
#include <cstdint>

#include "strata/core/fp16.hpp"

namespace strata::kernels::cpu {

struct fp16_table_t {
  float v[65536];  // v[h] = to_float(fp16{h})
};

namespace detail {
constexpr fp16_table_t make_fp16_table() {
  fp16_table_t t{};
  for (std::uint32_t h = 0; h < 65536; ++h) t.v[h] = to_float(fp16{std::uint16_t(h)});
  return t;
}
}  // namespace detail

inline constexpr fp16_table_t fp16_table = detail::make_fp16_table();

// e8m0_half_table[e] = 2^(e − 128), exactly quant::mxfp4::half_scale(e) (e = 0, 1 subnormal;
// e = 255 is 2^127, not NaN).
inline constexpr auto e8m0_half_table = [] {
  struct table {
    float v[256];
  } t{};
  for (std::uint32_t e = 0; e < 256; ++e)
    t.v[e] = std::bit_cast<float>(e < 2 ? std::uint32_t(0x00200000u << e) : std::uint32_t(e - 1) << 23);
  return t;
}();

}  // namespace strata::kernels::cpu
