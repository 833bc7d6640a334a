// Q4_1: 32 weights per block, fp16 scale d and min m, 4-bit codes q; x ≈ d·q + m, where
// m is the block minimum and d = (max − min) / 15.
// Byte-compatible with GGUF tensor type Q4_1 (ggml block_q4_1).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "strata/quant/detail/rounding.hpp"
#include "strata/quant/q8_1.hpp"
#include "strata/quant/detail/k_quant_search.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

struct q4_1 {
  static constexpr std::string_view name        = "q4_1";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::q4_1;
  static constexpr std::size_t      block_elems = 32;
  using act = q8_1;  // dot() needs the activation's s = d·Σq for the min term

  struct block {
    fp16                         d;   // scale; x[j] ≈ d·q[j] + m
    fp16                         m;   // offset: the block minimum, rounded to fp16
    std::array<std::uint8_t, 16> qs;  // qs[j] = q[j] | q[j + 16] << 4, q in 0..15
  };

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    const float m = to_float(b.m);
    for (std::size_t j = 0; j < 16; ++j) {
      y[j]      = float(b.qs[j] & 0x0F) * d + m;
      y[j + 16] = float(b.qs[j] >> 4) * d + m;
    }
  }

  // ggml's quantize_row_q4_1_ref: codes are trunc((x − min)/d + 0.5) capped at 15 (round
  // half up), using the unrounded min and 1/d; only the stored d and m go through fp16.
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept {
    float min = std::numeric_limits<float>::max();
    float max = -std::numeric_limits<float>::max();
    for (const float v : x) {
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const auto code = [id, min](float v) {
      const float t = (v - min) * id;
      return std::uint8_t(std::min(15, int(std::int8_t(detail::trunc_to_int(t + 0.5f)))));
    };
    block b{};
    b.d = to_fp16(d);
    b.m = to_fp16(min);
    for (std::size_t j = 0; j < 16; ++j) b.qs[j] = std::uint8_t(code(x[j]) | code(x[j + 16]) << 4);
    return b;
  }

  // ggml's importance-weighted quantizer (quantize_row_q4_1_impl, used with an imatrix): per
  // block, make_qkx2_quants (codes 0..15, offset ≤ 0) with weights qw·√(σ² + x²), σ² the mean
  // square of the whole row.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept;

  // Σ (d_w·q_w + m)·(d_a·q_a) = d_w·d_a·Σ q_w·q_a + m·(d_a·Σ q_a), and the activation carries
  // the last factor as s. s is fp16-rounded, so this differs from dequant·dequant by m·(s − d_a·Σq_a).
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    int sumi = 0;
    for (std::size_t j = 0; j < 16; ++j) {
      sumi += int(w.qs[j] & 0x0F) * int(a.qs[j]);
      sumi += int(w.qs[j] >> 4) * int(a.qs[j + 16]);
    }
    return to_float(w.d) * to_float(a.d) * float(sumi) + to_float(w.m) * to_float(a.s);
  }
};
#include "strata/quant/detail/fp_exact_push.hpp"
inline void q4_1::quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept {
  detail::for_each_weighted_block<block_elems>(x, qw, [out](std::size_t ib, auto xb, auto w) {
    std::array<std::uint8_t, block_elems> L;
    float min = 0.0f;
    const float d = detail::make_qkx2_quants(xb, w, L, min,
                                             {.nmax = 15, .rmin = -0.9f, .rdelta = 0.05f, .nstep = 36, .use_mad = false});
    block b{};
    b.d = to_fp16(d);
    b.m = to_fp16(-min);
    for (std::size_t j = 0; j < 16; ++j) b.qs[j] = std::uint8_t(L[j] | L[j + 16] << 4);
    out[ib] = b;
  });
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(q4_1::block) == 20);
static_assert(quant_format<q4_1>);

}  // namespace strata::quant
