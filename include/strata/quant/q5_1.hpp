// Q5_1: 32 weights per block, fp16 scale d and min m, 5-bit codes q split into a low nibble
// and a high bit plane; x ≈ d·q + m, with m the block minimum and d = (max − min) / 31.
// Byte-compatible with GGUF tensor type Q5_1 (ggml block_q5_1).
#pragma once
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

struct q5_1 {
  static constexpr std::string_view name        = "q5_1";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::q5_1;
  static constexpr std::size_t      block_elems = 32;
  using act = q8_1;  // dot() needs the activation's s = d·Σq for the min term

  struct block {
    fp16                         d;   // scale; x[j] ≈ d·q[j] + m
    fp16                         m;   // offset: the block minimum, rounded to fp16
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
    const float m = to_float(b.m);
    for (std::size_t j = 0; j < block_elems; ++j) y[j] = float(code(b, j)) * d + m;
  }

  // ggml's quantize_row_q5_1_ref: codes are trunc((x − min)·(1/d) + 0.5) with no cap
  // (the largest value lands on 31 within float error; only 5 bits are stored regardless).
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept {
    float min = std::numeric_limits<float>::max();
    float max = -std::numeric_limits<float>::max();
    for (const float v : x) {
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block b{};
    b.d = to_fp16(d);
    b.m = to_fp16(min);
    for (std::size_t j = 0; j < block_elems; ++j) {
      const float t = (x[j] - min) * id;
      const auto q = std::uint8_t(detail::trunc_to_int(t + 0.5f));
      if (j < 16) b.qs[j] = std::uint8_t(b.qs[j] | (q & 0x0F));
      else b.qs[j - 16] = std::uint8_t(b.qs[j - 16] | (q & 0x0F) << 4);
      b.qh[j / 8] = std::uint8_t(b.qh[j / 8] | ((q >> 4) & 1) << (j % 8));
    }
    return b;
  }

  // ggml's importance-weighted quantizer (quantize_row_q5_1_impl, used with an imatrix): per
  // block, make_qkx2_quants (codes 0..31, offset ≤ 0) with weights qw·√(σ² + x²), σ² the mean
  // square of the whole row.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept;

  // As Q4_1: d_w·d_a·Σ q_w·q_a + m·s, with s = d_a·Σq_a carried (fp16-rounded) by the activation.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    int sumi = 0;
    for (std::size_t j = 0; j < block_elems; ++j) sumi += code(w, j) * int(a.qs[j]);
    return to_float(w.d) * to_float(a.d) * float(sumi) + to_float(w.m) * to_float(a.s);
  }
};
#include "strata/quant/detail/fp_exact_push.hpp"
inline void q5_1::quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept {
  detail::for_each_weighted_block<block_elems>(x, qw, [out](std::size_t ib, auto xb, auto w) {
    std::array<std::uint8_t, block_elems> L;
    float min = 0.0f;
    const float d = detail::make_qkx2_quants(xb, w, L, min,
                                             {.nmax = 31, .rmin = -0.9f, .rdelta = 0.05f, .nstep = 36, .use_mad = false});
    block b{};
    b.d = to_fp16(d);
    b.m = to_fp16(-min);
    for (std::size_t j = 0; j < 16; ++j) {
      b.qs[j] = std::uint8_t((L[j] & 0x0F) | (L[j + 16] & 0x0F) << 4);
      b.qh[j / 8] = std::uint8_t(b.qh[j / 8] | ((L[j] >> 4) & 1) << (j % 8));
      b.qh[2 + j / 8] = std::uint8_t(b.qh[2 + j / 8] | ((L[j + 16] >> 4) & 1) << (j % 8));
    }
    out[ib] = b;
  });
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(q5_1::block) == 24);
static_assert(quant_format<q5_1>);

}  // namespace strata::quant
