// Q8_0: 32 weights per block, fp16 scale d, int8 codes q; x ≈ d·q with d = max|x| / 127.
// Also the activation format that Q4_0, Q5_0, Q8_0, IQ4_NL and MXFP4 dot products pair with.
// Byte-compatible with GGUF tensor type Q8_0 (ggml block_q8_0).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "strata/quant/detail/rounding.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

struct q8_0 {
  static constexpr std::string_view name        = "q8_0";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::q8_0;
  static constexpr std::size_t      block_elems = 32;
  using act = q8_0;  // ggml's vec_dot_type for Q8_0 is Q8_0 itself

  struct block {
    fp16                        d;   // scale; x[j] ≈ d·qs[j]
    std::array<std::int8_t, 32> qs;  // codes in element order; quantize() writes −127..127
  };

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    for (std::size_t j = 0; j < block_elems; ++j) y[j] = float(b.qs[j]) * d;
  }

  // ggml's quantize_row_q8_0_ref: q = roundf(x / d) (ties away from zero), computed as
  // x·(1/d) with the unrounded d; only the stored scale goes through fp16.
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept {
    float amax = 0.0f;
    for (const float v : x) amax = amax > detail::abs_f(v) ? amax : detail::abs_f(v);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block b{};
    b.d = to_fp16(d);
    for (std::size_t j = 0; j < block_elems; ++j) b.qs[j] = std::int8_t(detail::round_away(x[j] * id));
    return b;
  }

  // Integer dot of the codes, scaled once: sumi·(d_w·d_a), the order ggml's generic kernel uses.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    int sumi = 0;
    for (std::size_t j = 0; j < block_elems; ++j) sumi += int(w.qs[j]) * int(a.qs[j]);
    return float(sumi) * (to_float(w.d) * to_float(a.d));
  }
};
static_assert(sizeof(q8_0::block) == 34);
static_assert(quant_format<q8_0>);

}  // namespace strata::quant
