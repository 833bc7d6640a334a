// Q6_K: 256 weights per super-block in 16 sub-blocks of 16; signed 6-bit codes q ∈ [−32, 31]
// with an int8 scale per sub-block and an fp16 super-scale d: x ≈ d·sc_j·q.
// Byte-compatible with GGUF tensor type Q6_K (ggml block_q6_K); quantize() is ggml's
// quantize_row_q6_K_ref (what ggml_quantize_chunk runs without an imatrix).
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
#include "strata/quant/q8_k.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

// Layout (210 bytes). Element e ∈ [0, 256) is in sub-block j = e / 16; its code is
// q = lo + 16·hi − 32. Write e = 128h + 32k + l (half h, quarter k ∈ 0..3, l ∈ 0..31):
//   lo (4 bits)  ql[64h + 32·(k & 1) + l], low nibble for k < 2, high nibble for k ≥ 2
//                (so byte ql[64h + l] holds quarters 0 and 2, ql[64h + 32 + l] quarters 1 and 3)
//   hi (2 bits)  qh[32h + l] bits 2k..2k+1
struct q6_k {
  static constexpr std::string_view name = "q6_k";
  static constexpr gguf::type_id gguf_type = gguf::type_id::q6_k;
  static constexpr std::size_t block_elems = 256;
  using act = q8_k;

  struct block {
    std::array<std::uint8_t, 128> ql;    // low 4 code bits, 2 per byte (layout above)
    std::array<std::uint8_t, 64> qh;     // high 2 code bits, 4 per byte (layout above)
    std::array<std::int8_t, 16> scales;  // signed sub-block scale sc_j, one per 16 elements
    fp16 d;                              // super-scale of the int8 scales
  };

  // Signed code of element e, in [−32, 31].
  static constexpr int code(const block& b, std::size_t e) noexcept {
    const std::size_t h = e / 128, k = (e % 128) / 32, l = e % 32;
    const std::uint8_t byte = b.ql[64 * h + 32 * (k & 1) + l];
    const int lo = k < 2 ? byte & 0xF : byte >> 4;
    const int hi = (b.qh[32 * h + l] >> (2 * k)) & 3;
    return (lo | hi << 4) - 32;
  }

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    for (std::size_t j = 0; j < 16; ++j) {
      const float dl = d * float(b.scales[j]);  // ggml's d·sc·q rounds d·sc first
      for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) y[e] = dl * float(code(b, e));
    }
  }

  // ggml's reference: make_qx_quants per sub-block, int8 scales relative to the largest one,
  // then every code re-rounded against the scale as stored.
  static block quantize(std::span<const float, block_elems> x) noexcept { return quantize_block(x, {}); }

  // ggml's importance-weighted quantizer (quantize_row_q6_K_impl, used with an imatrix): the
  // reference algorithm with the imatrix values themselves as make_qx_quants' weights.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept {
    for (std::size_t i = 0; i < x.size() / block_elems; ++i)
      out[i] = quantize_block(x.subspan(i * block_elems).first<block_elems>(), qw.subspan(i * block_elems, block_elems));
  }

  // One block; qw: the 256 importance weights, or empty for the reference quantizer.
  static block quantize_block(std::span<const float, block_elems> x, std::span<const float> qw) noexcept;

  // ggml vec_dot_q6_K_q8_K for one block: Σ_j sc_j·(q·a)_j exactly in int, times d·a.d.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    std::int32_t isum = 0;
    for (std::size_t j = 0; j < 16; ++j) {
      std::int32_t s = 0;
      for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) s += code(w, e) * a.qs[e];
      isum += w.scales[j] * s;
    }
    return to_float(w.d) * a.d * float(isum);
  }
};

// Out of line so that it sits in a no-FMA-contraction region (see detail/fp_exact_push.hpp).
#include "strata/quant/detail/fp_exact_push.hpp"
inline q6_k::block q6_k::quantize_block(std::span<const float, block_elems> x, std::span<const float> qw) noexcept {
  // Sub-block pass: codes in [0, 63] (stored +32) and signed scales from make_qx_quants.
  std::array<std::int8_t, 256> L{};
  std::array<float, 16> scales{};
  float max_scale = 0.0f, max_abs_scale = 0.0f;  // the scale of largest magnitude, with its sign
  for (std::size_t j = 0; j < 16; ++j) {
    scales[j] = detail::make_qx_quants(x.subspan(16 * j, 16), 32, std::span(L).subspan(16 * j, 16),
                                       qw.empty() ? qw : qw.subspan(16 * j, 16));
    const float a = std::fabs(scales[j]);
    if (a > max_abs_scale) { max_abs_scale = a; max_scale = scales[j]; }
  }
  block b{};
  if (max_abs_scale < detail::group_max_eps) return b;  // the whole block is ~0

  // Super-block pass: sc_j = min(127, round(−128·scale_j / max_scale)). The largest scale
  // becomes −128 (ggml uses the full int8 range on that side), d = max_scale / −128.
  const float iscale = -128.0f / max_scale;
  b.d = to_fp16(1.0f / iscale);
  for (std::size_t j = 0; j < 16; ++j) {
    const int s = detail::nearest_int(iscale * scales[j]);
    b.scales[j] = std::int8_t(s < 127 ? s : 127);
  }

  // Re-round every code against the stored d·sc_j (a zero scale keeps the search codes).
  const float d_all = to_float(b.d);
  for (std::size_t j = 0; j < 16; ++j) {
    const float d = d_all * float(b.scales[j]);
    if (d == 0.0f) continue;
    for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) {
      const int l = detail::nearest_int(x[e] / d);
      L[e] = std::int8_t((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
    }
  }

  // Pack: low nibbles into ql, high 2 bits into qh (layout above).
  for (std::size_t e = 0; e < 256; ++e) {
    const std::size_t h = e / 128, k = (e % 128) / 32, l = e % 32;
    const unsigned q = std::uint8_t(L[e]);
    std::uint8_t& lo = b.ql[64 * h + 32 * (k & 1) + l];
    lo = std::uint8_t(lo | (k < 2 ? q & 0xF : (q & 0xF) << 4));
    std::uint8_t& hi = b.qh[32 * h + l];
    hi = std::uint8_t(hi | (q >> 4) << (2 * k));
  }
  return b;
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(q6_k::block) == 210);
static_assert(quant_format<q6_k>);

}  // namespace strata::quant
