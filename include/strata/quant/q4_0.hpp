// Q4_0: 32 weights per block, fp16 scale d, 4-bit codes q; x ≈ d·(q − 8), where d is the
// block's signed extreme / −8 so that extreme lands exactly on code 0.
// Byte-compatible with GGUF tensor type Q4_0 (ggml block_q4_0).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "strata/quant/detail/rounding.hpp"
#include "strata/quant/q8_0.hpp"
#include "strata/quant/detail/k_quant_search.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

struct q4_0 {
  static constexpr std::string_view name        = "q4_0";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::q4_0;
  static constexpr std::size_t      block_elems = 32;
  using act = q8_0;  // activation format for dot()

  struct block {
    fp16                         d;   // scale; x[j] ≈ d·(q[j] − 8)
    std::array<std::uint8_t, 16> qs;  // qs[j] = q[j] | q[j + 16] << 4, q in 0..15
  };

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    for (std::size_t j = 0; j < 16; ++j) {
      y[j]      = float(int(b.qs[j] & 0x0F) - 8) * d;
      y[j + 16] = float(int(b.qs[j] >> 4) - 8) * d;
    }
  }

  // ggml's quantize_row_q4_0_ref. The extreme with the largest |x| (first one on ties) sets
  // d = extreme / −8; codes are trunc(x/d + 8.5) capped at 15, i.e. round half up, with
  // x/d computed as x·(1/d) from the unrounded d.
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept {
    float amax = 0.0f;
    float max = 0.0f;
    for (const float v : x) {
      if (amax < detail::abs_f(v)) {
        amax = detail::abs_f(v);
        max = v;
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const auto code = [id](float v) {
      const float t = v * id;
      return std::uint8_t(std::min(15, int(std::int8_t(detail::trunc_to_int(t + 8.5f)))));
    };
    block b{};
    b.d = to_fp16(d);
    for (std::size_t j = 0; j < 16; ++j) b.qs[j] = std::uint8_t(code(x[j]) | code(x[j + 16]) << 4);
    return b;
  }

  // ggml's importance-weighted quantizer (quantize_row_q4_0_impl, used with an imatrix): per
  // block, make_qx_quants with weights qw·√(σ² + x²), σ² the mean square of the whole row; the
  // codes are not re-rounded against the fp16 d.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept;

  // Σ (q − 8)·a.q in integers, then (sumi·d_w)·d_a as ggml's generic kernel orders it.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    int sumi = 0;
    for (std::size_t j = 0; j < 16; ++j) {
      sumi += (int(w.qs[j] & 0x0F) - 8) * int(a.qs[j]);
      sumi += (int(w.qs[j] >> 4) - 8) * int(a.qs[j + 16]);
    }
    return float(sumi) * to_float(w.d) * to_float(a.d);
  }
};
#include "strata/quant/detail/fp_exact_push.hpp"
inline void q4_0::quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept {
  detail::for_each_weighted_block<block_elems>(x, qw, [out](std::size_t ib, auto xb, auto w) {
    std::array<std::int8_t, block_elems> L;
    const float d = detail::make_qx_quants(xb, 8, L, w);
    out[ib].d = to_fp16(d);
    for (std::size_t j = 0; j < 16; ++j) out[ib].qs[j] = std::uint8_t(L[j] | L[j + 16] << 4);
  });
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(q4_0::block) == 18);
static_assert(quant_format<q4_0>);

}  // namespace strata::quant
