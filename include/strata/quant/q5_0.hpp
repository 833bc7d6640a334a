// Q5_0: 32 weights per block, fp16 scale d, 5-bit codes q split into a low nibble and a high
// bit plane; x ≈ d·(q − 16), where d is the block's signed extreme / −16.
// Byte-compatible with GGUF tensor type Q5_0 (ggml block_q5_0).
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

struct q5_0 {
  static constexpr std::string_view name        = "q5_0";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::q5_0;
  static constexpr std::size_t      block_elems = 32;
  using act = q8_0;  // activation format for dot()

  struct block {
    fp16                         d;   // scale; x[j] ≈ d·(q[j] − 16)
    std::array<std::uint8_t, 4>  qh;  // bit 4 of q[j] at bit j of the little-endian u32 qh
    std::array<std::uint8_t, 16> qs;  // bits 0..3: qs[j] = q[j] & 15 | (q[j + 16] & 15) << 4
  };

  // The 5-bit code of element j (0..31).
  static constexpr int code(const block& b, std::size_t j) noexcept {
    const int lo = j < 16 ? b.qs[j] & 0x0F : b.qs[j - 16] >> 4;
    const int hi = (b.qh[j / 8] >> (j % 8)) & 1;
    return lo | hi << 4;
  }

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    for (std::size_t j = 0; j < block_elems; ++j) y[j] = float(code(b, j) - 16) * d;
  }

  // ggml's quantize_row_q5_0_ref: like Q4_0 with 16 levels each side; codes are
  // trunc(x·(1/d) + 16.5) capped at 31 (round half up) from the unrounded d.
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept {
    float amax = 0.0f;
    float max = 0.0f;
    for (const float v : x) {
      if (amax < detail::abs_f(v)) {
        amax = detail::abs_f(v);
        max = v;
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block b{};
    b.d = to_fp16(d);
    for (std::size_t j = 0; j < block_elems; ++j) {
      const float t = x[j] * id;
      const auto q = std::uint8_t(std::min(31, int(std::int8_t(detail::trunc_to_int(t + 16.5f)))));
      if (j < 16) b.qs[j] = std::uint8_t(b.qs[j] | (q & 0x0F));
      else b.qs[j - 16] = std::uint8_t(b.qs[j - 16] | (q & 0x0F) << 4);
      b.qh[j / 8] = std::uint8_t(b.qh[j / 8] | ((q >> 4) & 1) << (j % 8));
    }
    return b;
  }

  // ggml's importance-weighted quantizer (quantize_row_q5_0_impl, used with an imatrix): per
  // block, make_qx_quants with weights qw·√(σ² + x²), σ² the mean square of the whole row.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept;

  // Σ (q − 16)·a.q in integers, then (d_w·d_a)·sumi as ggml's generic kernel orders it.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    int sumi = 0;
    for (std::size_t j = 0; j < block_elems; ++j) sumi += (code(w, j) - 16) * int(a.qs[j]);
    return to_float(w.d) * to_float(a.d) * float(sumi);
  }
};
#include "strata/quant/detail/fp_exact_push.hpp"
inline void q5_0::quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept {
  detail::for_each_weighted_block<block_elems>(x, qw, [out](std::size_t ib, auto xb, auto w) {
    std::array<std::int8_t, block_elems> L;
    block b{};
    b.d = to_fp16(detail::make_qx_quants(xb, 16, L, w));
    for (std::size_t j = 0; j < 16; ++j) {
      b.qs[j] = std::uint8_t((L[j] & 0x0F) | (L[j + 16] & 0x0F) << 4);
      b.qh[j / 8] = std::uint8_t(b.qh[j / 8] | ((L[j] >> 4) & 1) << (j % 8));
      b.qh[2 + j / 8] = std::uint8_t(b.qh[2 + j / 8] | ((L[j + 16] >> 4) & 1) << (j % 8));
    }
    out[ib] = b;
  });
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(q5_0::block) == 22);
static_assert(quant_format<q5_0>);

}  // namespace strata::quant
