// The 12-byte scale/min packing of Q4_K and Q5_K (ggml get_scale_min_k4 and the shared
// first half of quantize_row_q4_K_ref / quantize_row_q5_K_ref): eight 6-bit scales and
// eight 6-bit mins per 256-weight super-block, x ≈ d·sc_j·q − dmin·m_j, sub-block j = e/32.
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "strata/core/fp16.hpp"
#include "strata/quant/detail/k_quant_search.hpp"
#include "strata/quant/detail/rounding.hpp"

namespace strata::quant::detail {

// 12 bytes = 16 six-bit values. The first four of each kind fit a byte whole; the last four
// are split into a nibble in bytes 8..11 and two top bits parked in bits 6-7 of bytes 0..7:
//
//   byte    bits 7-6          bits 5-0
//   0..3    sc_{4+k} bits 4-5  sc_k           (k = byte)
//   4..7    m_{4+k}  bits 4-5  m_k            (k = byte − 4)
//
//   byte    bits 7-4          bits 3-0
//   8..11   m_{4+k} bits 0-3  sc_{4+k} bits 0-3   (k = byte − 8)
struct scale_min {
  std::uint8_t sc;  // 6-bit sub-block scale
  std::uint8_t m;   // 6-bit sub-block min
};

constexpr scale_min unpack_scale_min_k4(const std::array<std::uint8_t, 12>& q, std::size_t j) noexcept {
  if (j < 4) return {std::uint8_t(q[j] & 63), std::uint8_t(q[j + 4] & 63)};
  return {std::uint8_t((q[j + 4] & 0xF) | (q[j - 4] >> 6) << 4),  // nibble + top bits of byte j−4
          std::uint8_t((q[j + 4] >> 4) | (q[j] >> 6) << 4)};      // nibble + top bits of byte j
}

constexpr std::array<std::uint8_t, 12> pack_scale_min_k4(const std::array<std::uint8_t, 8>& ls,
                                                         const std::array<std::uint8_t, 8>& lm) noexcept {
  std::array<std::uint8_t, 12> q{};
  for (std::size_t j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = std::uint8_t((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
      q[j - 4] = std::uint8_t(q[j - 4] | (ls[j] >> 4) << 6);
      q[j] = std::uint8_t(q[j] | (lm[j] >> 4) << 6);
    }
  }
  return q;
}

// What Q4_K and Q5_K store besides their code bits.
struct k4_super_block {
  fp16 d;                              // super-scale of the 6-bit scales
  fp16 dmin;                           // super-scale of the 6-bit mins
  std::array<std::uint8_t, 12> scales; // packed as above
  std::array<std::uint8_t, 256> L;     // codes in [0, nmax], element order
};

#include "strata/quant/detail/fp_exact_push.hpp"
// Packs the scales and mins, stores the fp16 super-scales and re-rounds every code against what
// was stored (a sub-block whose stored scale is 0 keeps its search codes, as ggml does).
inline void store_k4(k4_super_block& out, std::span<const float, 256> x, const std::array<std::uint8_t, 8>& ls,
                     const std::array<std::uint8_t, 8>& lm, float d, float dmin, int nmax) noexcept {
  out.scales = pack_scale_min_k4(ls, lm);
  out.d = to_fp16(d);
  out.dmin = to_fp16(dmin);
  const float d_all = to_float(out.d);
  const float dmin_all = to_float(out.dmin);
  for (std::size_t j = 0; j < 8; ++j) {
    const auto [sc, m] = unpack_scale_min_k4(out.scales, j);
    const float dj = d_all * float(sc);
    if (dj == 0.0f) continue;
    const float dm = dmin_all * float(m);
    for (std::size_t e = 32 * j; e < 32 * j + 32; ++e) {
      const int l = nearest_int((x[e] + dm) / dj);
      out.L[e] = std::uint8_t(l < 0 ? 0 : l > nmax ? nmax : l);
    }
  }
}

// ggml's reference quantizer for the Q4_K/Q5_K family up to code packing:
// 1. per sub-block of 32, weights w = rms(x_sub) + |x| and make_qkx2_quants (squared error);
// 2. 6-bit sc_j = round(63·scale_j / max scale), m_j likewise; d, dmin = max/63 in fp16;
// 3. every code re-rounded against the stored d·sc_j and dmin·m_j (a sub-block whose stored
//    scale is 0 keeps its search codes, as ggml does).
inline k4_super_block quantize_scale_min_k4(std::span<const float, 256> x, const qkx2_params& p) noexcept {
  k4_super_block out{};
  std::array<float, 8> scales{}, mins{};
  float max_scale = 0.0f, max_min = 0.0f;  // mins are subtracted, so both are ≥ 0
  for (std::size_t j = 0; j < 8; ++j) {
    const auto xj = x.subspan(32 * j, 32);
    float sum_x2 = 0.0f;
    for (const float v : xj) sum_x2 += v * v;
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    std::array<float, 32> weights;
    for (std::size_t l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xj[l]);
    scales[j] = make_qkx2_quants(xj, weights, std::span(out.L).subspan(32 * j, 32), mins[j], p);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }

  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  std::array<std::uint8_t, 8> ls{}, lm{};
  for (std::size_t j = 0; j < 8; ++j) {
    // ggml stores the rounded value in a uint8 before clamping to 63: keep that wrap.
    const auto s = std::uint8_t(nearest_int(inv_scale * scales[j]));
    const auto m = std::uint8_t(nearest_int(inv_min * mins[j]));
    ls[j] = s < 63 ? s : 63;
    lm[j] = m < 63 ? m : 63;
  }
  store_k4(out, x, ls, lm, max_scale / 63.0f, max_min / 63.0f, p.nmax);
  return out;
}

// ggml's importance-weighted quantizer for the family (quantize_row_q4_K_impl /
// quantize_row_q5_K_impl, used with an imatrix): per sub-block weights qw·√(σ² + x²)
// (σ² = 2·mean square of the block) and make_qkx2_quants; the 6-bit scales and mins by
// make_qp_quants weighted by each sub-block's total weight (Q5_K caps them at 63, Q4_K
// stores them as they come).
inline k4_super_block quantize_scale_min_k4_weighted(std::span<const float, 256> x, std::span<const float> qw,
                                                    int nmax, bool cap_at_63) noexcept {
  k4_super_block out{};
  const float sigma2 = 2.0f * sum_squares(x) / 256.0f;
  std::array<float, 8> scales{}, mins{}, sw{};
  for (std::size_t j = 0; j < 8; ++j) {
    std::array<float, 32> w;
    importance_weights(x.subspan(32 * j, 32), qw.subspan(32 * j, 32), sigma2, w);
    for (const float v : w) sw[j] += v;
    scales[j] = make_qkx2_quants(x.subspan(32 * j, 32), w, std::span(out.L).subspan(32 * j, 32), mins[j],
                                 {.nmax = nmax, .rmin = -0.9f, .rdelta = 0.05f, .nstep = 36, .use_mad = false});
  }
  std::array<std::uint8_t, 8> ls{}, lm{};
  const float d_block = make_qp_quants(scales, 63, ls, sw);
  const float m_block = make_qp_quants(mins, 63, lm, sw);
  if (cap_at_63)
    for (std::size_t j = 0; j < 8; ++j) {
      ls[j] = ls[j] < 63 ? ls[j] : 63;
      lm[j] = lm[j] < 63 ? lm[j] : 63;
    }
  store_k4(out, x, ls, lm, d_block, m_block, nmax);
  return out;
}
#include "strata/quant/detail/fp_exact_pop.hpp"

}  // namespace strata::quant::detail
