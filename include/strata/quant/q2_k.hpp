// Q2_K: 256 weights per super-block in 16 sub-blocks of 16; 2-bit codes q with a 4-bit scale
// and a 4-bit min per sub-block, themselves scaled by fp16 d and dmin: x ≈ d·sc·q − dmin·m.
// Byte-compatible with GGUF tensor type Q2_K (ggml block_q2_K); quantize() is ggml's
// quantize_row_q2_K_ref (what ggml_quantize_chunk runs without an imatrix).
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

// Layout (84 bytes). Element e ∈ [0, 256) lives in sub-block j = e / 16.
//   scales[j] = sc_j | m_j << 4          4-bit scale (low nibble), 4-bit min (high nibble)
//   qs[64]    two 32-byte halves, h = e / 128; within a half, r = e % 128:
//             qs[32h + r % 32] bits 2k..2k+1 with k = r / 32
//             i.e. byte b of a half packs elements b, b+32, b+64, b+96 (low bits first)
//   d, dmin   fp16 super-scales of sc and m
struct q2_k {
  static constexpr std::string_view name = "q2_k";
  static constexpr gguf::type_id gguf_type = gguf::type_id::q2_k;
  static constexpr std::size_t block_elems = 256;
  using act = q8_k;

  struct block {
    std::array<std::uint8_t, 16> scales;  // scales[j] = sc_j | m_j << 4, sub-block j of 16
    std::array<std::uint8_t, 64> qs;      // 2-bit codes, 4 per byte (layout above)
    fp16 d;                               // scale of the 4-bit sub-block scales sc_j
    fp16 dmin;                            // scale of the 4-bit sub-block mins m_j
  };

  // 2-bit code of element e.
  static constexpr int code(const block& b, std::size_t e) noexcept {
    return (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
  }

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    const float min = to_float(b.dmin);
    for (std::size_t j = 0; j < 16; ++j) {
      const float dl = d * float(b.scales[j] & 0xF);  // ggml rounds dl and ml first, then dl·q − ml
      const float ml = min * float(b.scales[j] >> 4);
      for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) y[e] = dl * float(code(b, e)) - ml;
    }
  }

  // ggml's reference: make_qkx2_quants per sub-block (weights |x|, absolute error), 4-bit
  // scales and mins relative to the largest of each, then codes re-rounded as stored.
  static block quantize(std::span<const float, block_elems> x) noexcept;

  // ggml's importance-weighted quantizer (quantize_row_q2_K_impl, used with an imatrix): per
  // sub-block make_qkx2_quants with weights qw·√(σ² + x²) (σ² = mean square of the block), the
  // 4-bit scales and mins by make_qp_quants weighted by each sub-block's total weight.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept;

 private:
  // Both quantizers end alike: codes re-rounded against the stored scales, then packed.
  static void finish(block& b, std::span<const float, block_elems> x, std::array<std::uint8_t, 256>& L) noexcept;

 public:

  // ggml vec_dot_q2_K_q8_K for one block: Σ_j sc_j·(q·a)_j exactly in int, the mins term
  // from the activation's 16-sums (Σ_j m_j·bsums_j), then two float products.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    std::int32_t isum = 0, summs = 0;
    for (std::size_t j = 0; j < 16; ++j) {
      std::int32_t s = 0;
      for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) s += code(w, e) * a.qs[e];
      isum += (w.scales[j] & 0xF) * s;
      summs += (w.scales[j] >> 4) * a.bsums[j];
    }
    const float dall = a.d * to_float(w.d);
    const float dmin = a.d * to_float(w.dmin);
    return dall * float(isum) - dmin * float(summs);
  }
};

// Out of line so that it sits in a no-FMA-contraction region (see detail/fp_exact_push.hpp).
#include "strata/quant/detail/fp_exact_push.hpp"
inline q2_k::block q2_k::quantize(std::span<const float, block_elems> x) noexcept {
  constexpr float q4scale = 15.0f;  // sub-block scales and mins are 4-bit
  // Sub-block pass: codes in [0, 3] with the weighted-|diff| fit of make_qkx2_quants.
  std::array<std::uint8_t, 256> L{};
  std::array<float, 16> scales{}, mins{};
  float max_scale = 0.0f, max_min = 0.0f;  // mins are subtracted, so both are ≥ 0
  for (std::size_t j = 0; j < 16; ++j) {
    const auto xj = x.subspan(16 * j, 16);
    std::array<float, 16> weights;
    for (std::size_t l = 0; l < 16; ++l) weights[l] = std::fabs(xj[l]);
    scales[j] = detail::make_qkx2_quants(xj, weights, std::span(L).subspan(16 * j, 16), mins[j],
                                         {.nmax = 3, .rmin = -0.5f, .rdelta = 0.1f, .nstep = 15, .use_mad = true});
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }

  // Super-block pass: 4-bit sc_j = round(15·scale_j / max_scale), likewise m_j.
  // Stores go through uint8 like ggml's (an out-of-range value wraps the same way).
  block b{};
  if (max_scale > 0.0f) {
    const float iscale = q4scale / max_scale;
    for (std::size_t j = 0; j < 16; ++j) b.scales[j] = std::uint8_t(detail::nearest_int(iscale * scales[j]));
    b.d = to_fp16(max_scale / q4scale);
  }
  if (max_min > 0.0f) {
    const float iscale = q4scale / max_min;
    for (std::size_t j = 0; j < 16; ++j)
      b.scales[j] = std::uint8_t(b.scales[j] | unsigned(detail::nearest_int(iscale * mins[j])) << 4);
    b.dmin = to_fp16(max_min / q4scale);
  }

  finish(b, x, L);
  return b;
}

inline void q2_k::finish(block& b, std::span<const float, block_elems> x, std::array<std::uint8_t, 256>& L) noexcept {
  // Re-round every code against the scales as stored (fp16 d times 4-bit sc). A sub-block
  // whose stored scale is 0 keeps the codes of its search, as ggml does.
  const float d_all = to_float(b.d);
  const float dmin_all = to_float(b.dmin);
  for (std::size_t j = 0; j < 16; ++j) {
    const float d = d_all * float(b.scales[j] & 0xF);
    if (d == 0.0f) continue;
    const float dm = dmin_all * float(b.scales[j] >> 4);
    for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) {
      const int l = detail::nearest_int((x[e] + dm) / d);
      L[e] = std::uint8_t(l < 0 ? 0 : l > 3 ? 3 : l);
    }
  }

  // Pack 4 codes per byte: elements r, r+32, r+64, r+96 of each 128-half share byte r.
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t r = 0; r < 32; ++r) {
      const std::size_t e = 128 * h + r;
      b.qs[32 * h + r] = std::uint8_t(L[e] | L[e + 32] << 2 | L[e + 64] << 4 | L[e + 96] << 6);
    }
}

inline void q2_k::quantize_row_weighted(std::span<const float> row, std::span<const float> qw, block* out) noexcept {
  for (std::size_t i = 0; i < row.size() / block_elems; ++i) {
    const auto x = row.subspan(i * block_elems).first<block_elems>();
    const auto q = qw.subspan(i * block_elems, block_elems);
    const float sigma2 = detail::sum_squares(x) / 256.0f;
    std::array<std::uint8_t, 256> L{};
    std::array<float, 16> scales{}, mins{}, sw{};
    for (std::size_t j = 0; j < 16; ++j) {
      std::array<float, 16> w;
      detail::importance_weights(x.subspan(16 * j, 16), q.subspan(16 * j, 16), sigma2, w);
      for (const float v : w) sw[j] += v;
      scales[j] = detail::make_qkx2_quants(x.subspan(16 * j, 16), w, std::span(L).subspan(16 * j, 16), mins[j],
                                           {.nmax = 3, .rmin = -0.9f, .rdelta = 0.05f, .nstep = 36, .use_mad = false});
    }
    std::array<std::uint8_t, 16> Ls{}, Lm{};
    const float dm = detail::make_qp_quants(scales, 15, Ls, sw);
    const float mm = detail::make_qp_quants(mins, 15, Lm, sw);
    block b{};
    b.d = to_fp16(dm);
    b.dmin = to_fp16(mm);
    for (std::size_t j = 0; j < 16; ++j) b.scales[j] = std::uint8_t(Ls[j] | Lm[j] << 4);
    finish(b, x, L);
    out[i] = b;
  }
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(q2_k::block) == 84);
static_assert(quant_format<q2_k>);

}  // namespace strata::quant
