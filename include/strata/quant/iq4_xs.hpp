// IQ4_XS: 256 weights per super-block in 8 sub-blocks of 32; 4-bit indices into IQ4_NL's
// non-linear int8 grid, a 6-bit signed scale per sub-block and an fp16 super-scale d:
// x ≈ d·(ls − 32)·values[q]. Byte-compatible with GGUF tensor type IQ4_XS (ggml block_iq4_xs);
// quantize() is ggml's quantize_row_iq4_xs_ref (quantize_iq4_xs without an imatrix).
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "strata/core/fp16.hpp"
#include "strata/quant/detail/k_quant_search.hpp"
#include "strata/quant/detail/rounding.hpp"
#include "strata/quant/iq4_nl.hpp"
#include "strata/quant/q8_k.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

// Layout (136 bytes). Sub-block ib = e / 32 covers elements 32ib .. 32ib+31.
//   qs[16ib + j]   low nibble: index of element 32ib + j   high nibble: element 32ib + 16 + j
//   ls_ib (6 bits, value ls_ib − 32) is split:
//     scales_l[ib / 2]  nibble ib % 2 (low nibble for even ib) = ls_ib bits 0-3
//     scales_h          bits 2ib..2ib+1                         = ls_ib bits 4-5
struct iq4_xs {
  static constexpr std::string_view name = "iq4_xs";
  static constexpr gguf::type_id gguf_type = gguf::type_id::iq4_xs;
  static constexpr std::size_t block_elems = 256;
  using act = q8_k;
  static constexpr const auto& values = iq4_nl::values;  // ggml's kvalues_iq4nl, shared grid

  struct block {
    fp16 d;                               // super-scale of the 6-bit sub-block scales
    std::uint16_t scales_h;               // bits 4-5 of ls_ib at bits 2ib..2ib+1
    std::array<std::uint8_t, 4> scales_l; // bits 0-3 of ls_ib, two sub-blocks per byte
    std::array<std::uint8_t, 128> qs;     // grid indices, 2 per byte (layout above)
  };

  // Sub-block scale ib as a signed value ls_ib − 32 ∈ [−32, 31].
  static constexpr int scale(const block& b, std::size_t ib) noexcept {
    const int lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
    const int hi = (b.scales_h >> (2 * ib)) & 3;
    return (lo | hi << 4) - 32;
  }

  // Grid value of element e.
  static constexpr int value(const block& b, std::size_t e) noexcept {
    const std::uint8_t byte = b.qs[16 * (e / 32) + e % 16];
    return values[(e % 32) < 16 ? byte & 0xF : byte >> 4];
  }

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    for (std::size_t ib = 0; ib < 8; ++ib) {
      const float dl = d * float(scale(b, ib));
      for (std::size_t e = 32 * ib; e < 32 * ib + 32; ++e) y[e] = dl * float(value(b, e));
    }
  }

  // ggml's search (quantize_row_iq4_nl_impl with ntry = 7, weights x²): per sub-block a
  // scale fit over 16 candidate grid mappings, then 6-bit scales relative to the largest,
  // then grid indices re-chosen against d·(ls − 32) in fp32 (not the fp16-rounded d).
  static block quantize(std::span<const float, block_elems> x) noexcept { return quantize_block(x, {}); }

  // ggml's importance-weighted quantizer (quantize_iq4_xs with an imatrix): the same search with
  // weights qw·√(σ² + x²), σ² = 2·mean square of the super-block.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept {
    for (std::size_t i = 0; i < x.size() / block_elems; ++i)
      out[i] = quantize_block(x.subspan(i * block_elems).first<block_elems>(), qw.subspan(i * block_elems, block_elems));
  }

  // One super-block; qw: its 256 importance weights, or empty for the reference (weights x²).
  static block quantize_block(std::span<const float, block_elems> x, std::span<const float> qw) noexcept;

  // ggml vec_dot_iq4_xs_q8_K for one block, in its float order: each sub-block's integer
  // Σ values[q]·a.q is scaled by (d·a.d)·(ls − 32) and accumulated in float.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    const float d4d8 = to_float(w.d) * a.d;
    float sumf = 0.0f;
    for (std::size_t ib = 0; ib < 8; ++ib) {
      std::int32_t sumi = 0;
      for (std::size_t e = 32 * ib; e < 32 * ib + 32; ++e) sumi += value(w, e) * a.qs[e];
      sumf += d4d8 * float(scale(w, ib)) * float(sumi);
    }
    return sumf;
  }
};

// Out of line so that it sits in a no-FMA-contraction region (see detail/fp_exact_push.hpp).
#include "strata/quant/detail/fp_exact_push.hpp"
inline iq4_xs::block iq4_xs::quantize_block(std::span<const float, block_elems> x, std::span<const float> qw) noexcept {
  constexpr int ntry = 7;
  const float sigma2 = qw.empty() ? 0.0f : detail::sum_squares(x) * (2.0f / 256.0f);
  const float v0 = float(values[0]);  // −127: the grid end the candidate mappings aim at
  std::array<float, 8> scales{};
  float max_scale = 0.0f, amax_scale = 0.0f;  // the scale of largest magnitude, with its sign
  for (std::size_t ib = 0; ib < 8; ++ib) {
    const auto xb = x.subspan(32 * ib, 32);
    float amax = 0.0f, max = 0.0f;
    for (const float v : xb) {
      if (std::fabs(v) > amax) { amax = std::fabs(v); max = v; }
    }
    if (amax < detail::group_max_eps) continue;  // scale stays 0
    // Weighted (w = x², or the imatrix weights) fit of the scale for the indices chosen under
    // inverse scale id.
    std::array<float, 32> w;
    if (qw.empty())
      for (std::size_t j = 0; j < 32; ++j) w[j] = xb[j] * xb[j];
    else
      detail::importance_weights(xb, qw.subspan(32 * ib, 32), sigma2, w);
    const auto fit = [&xb, &w](float id, float& sumqx, float& sumq2) {
      sumqx = sumq2 = 0.0f;
      for (std::size_t j = 0; j < 32; ++j) {
        const float q = float(values[std::size_t(iq4_nl::nearest_index(id * xb[j]))]);
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
      }
    };
    float sumqx = 0.0f, sumq2 = 0.0f;
    fit(1.0f / (-max / v0), sumqx, sumq2);  // first guess: max lands on +127-ish (clipped at 113)
    float d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {  // max lands near −127 + itry instead
      fit(float(itry + values[0]) / max, sumqx, sumq2);
      if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) { amax_scale = std::fabs(d); max_scale = d; }
  }

  // ls_ib = clamp(round(scale_ib / d), −32, 31) + 32 with d = −max_scale / 32. An all-zero
  // block gets d = −0 (ggml stores fp16 0x8000 there) and every index at grid value +1.
  block b{};
  const float d = -max_scale / 32.0f;
  b.d = to_fp16(d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (std::size_t ib = 0; ib < 8; ++ib) {
    int l = detail::nearest_int(id * scales[ib]);
    l = l < -32 ? -32 : l > 31 ? 31 : l;
    const float dl = d * float(l);
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (std::size_t j = 0; j < 16; ++j) {
      const auto lo = unsigned(iq4_nl::nearest_index(idl * x[32 * ib + j]));
      const auto hi = unsigned(iq4_nl::nearest_index(idl * x[32 * ib + 16 + j]));
      b.qs[16 * ib + j] = std::uint8_t(lo | hi << 4);
    }
    const unsigned ls = unsigned(l + 32);
    b.scales_l[ib / 2] = std::uint8_t(b.scales_l[ib / 2] | (ls & 0xF) << (4 * (ib % 2)));
    b.scales_h = std::uint16_t(b.scales_h | (ls >> 4) << (2 * ib));
  }
  return b;
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(iq4_xs::block) == 136);
static_assert(quant_format<iq4_xs>);

}  // namespace strata::quant
