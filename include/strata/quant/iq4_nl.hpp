// IQ4_NL: 32 weights per block, fp16 scale d, 4-bit indices into a fixed non-linear int8
// grid (denser near zero, fitted to bell-shaped weights); x ≈ d·values[q].
// Byte-compatible with GGUF tensor type IQ4_NL (ggml block_iq4_nl, table kvalues_iq4nl).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "strata/quant/detail/k_quant_search.hpp"
#include "strata/quant/detail/rounding.hpp"
#include "strata/quant/q8_0.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

struct iq4_nl {
  static constexpr std::string_view name        = "iq4_nl";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::iq4_nl;
  static constexpr std::size_t      block_elems = 32;
  using act = q8_0;  // activation format for dot()

  // The grid, ascending; int8 so dot() stays an integer dot against Q8_0 codes.
  static constexpr std::array<std::int8_t, 16> values = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                         1,    13,   25,  38,  53,  69,  89,  113};

  struct block {
    fp16                         d;   // scale; x[j] ≈ d·values[q[j]]
    std::array<std::uint8_t, 16> qs;  // qs[j] = q[j] | q[j + 16] << 4, q = index into values
  };

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    for (std::size_t j = 0; j < 16; ++j) {
      y[j]      = d * float(values[b.qs[j] & 0x0F]);
      y[j + 16] = d * float(values[b.qs[j] >> 4]);
    }
  }

  // Index of the grid value nearest to v (the upper one on exact ties), by bisection; values
  // beyond either end clamp to it. Matches ggml's best_index_int8 including its float compares.
  static constexpr int nearest_index(float v) noexcept {
    if (v <= float(values[0])) return 0;
    if (v >= float(values[15])) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (v < float(values[std::size_t(mid)])) hi = mid;
      else lo = mid;
    }
    return v - float(values[std::size_t(hi - 1)]) < float(values[std::size_t(hi)]) - v ? hi - 1 : hi;
  }

  // What llama-quantize writes without an imatrix (ggml quantize_iq4_nl, ntry = 7): a weighted
  // least-squares scale search with weights x². The first guess d = max/127 maps the extreme x
  // onto the +113 end (clipped); then 15 inverse scales (t − 127)/max, t in −7..7, map it onto
  // the −127 end instead (d of opposite sign to max). Each candidate's indices get the refit
  // d = Σwqx/Σwq², and the largest Σwqx²/Σwq² (= smallest weighted error) wins. Final indices
  // use the fp32 winner. ggml's quantize_row_iq4_nl_ref (ntry = −1) skips this search; model
  // files are not written with it.
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept {
    std::array<float, block_elems> w{};
    for (std::size_t j = 0; j < block_elems; ++j) w[j] = x[j] * x[j];
    return quantize_block(x, w);
  }

  // ggml's importance-weighted quantizer (quantize_iq4_nl with an imatrix): the same search with
  // weights qw·√(σ² + x²), σ² = 2·mean square of the block.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept;

  // The search with the given per-element weights (x² for the reference quantizer); out of
  // line so that it sits in a no-FMA-contraction region (see detail/fp_exact_push.hpp).
  static constexpr block quantize_block(std::span<const float, block_elems> x,
                                        const std::array<float, block_elems>& w) noexcept;

  // Σ values[q]·a.q in integers, then (d_a·d_w)·sumi as ggml's generic kernel orders it.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    int sumi = 0;
    for (std::size_t j = 0; j < 16; ++j) {
      sumi += int(a.qs[j]) * int(values[w.qs[j] & 0x0F]);
      sumi += int(a.qs[j + 16]) * int(values[w.qs[j] >> 4]);
    }
    return to_float(a.d) * to_float(w.d) * float(sumi);
  }
};
#include "strata/quant/detail/fp_exact_push.hpp"
constexpr iq4_nl::block iq4_nl::quantize_block(std::span<const float, block_elems> x,
                                            const std::array<float, block_elems>& w) noexcept {
  block b{};
  float amax = 0.0f, max = 0.0f;
  for (const float v : x) {
    if (detail::abs_f(v) > amax) {
      amax = detail::abs_f(v);
      max = v;
    }
  }
  float d = 0.0f;
  if (amax >= 1e-15f) {  // ggml's GROUP_MAX_EPS: below it the block is treated as zero
    const auto fit = [&x, &w](float id, float& sumqx, float& sumq2) {
      sumqx = 0.0f;
      sumq2 = 0.0f;
      for (std::size_t j = 0; j < block_elems; ++j) {
        const float q = float(values[std::size_t(nearest_index(id * x[j]))]);
        sumqx += w[j] * q * x[j];
        sumq2 += w[j] * q * q;
      }
    };
    float sumqx = 0.0f, sumq2 = 0.0f;
    fit(1.0f / (-max / float(values[0])), sumqx, sumq2);
    d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int t = -7; t <= 7; ++t) {
      fit(float(t + values[0]) / max, sumqx, sumq2);
      if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
  }
  b.d = to_fp16(d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const auto index = [id](float v) { return std::uint8_t(nearest_index(id * v)); };
  for (std::size_t j = 0; j < 16; ++j) b.qs[j] = std::uint8_t(index(x[j]) | index(x[j + 16]) << 4);
  return b;
}

inline void iq4_nl::quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept {
  for (std::size_t ib = 0; ib < x.size() / block_elems; ++ib) {
    const auto xb = x.subspan(ib * block_elems).first<block_elems>();
    std::array<float, block_elems> w;
    detail::importance_weights(xb, qw.subspan(ib * block_elems, block_elems),
                               detail::sum_squares(xb) * (2.0f / float(block_elems)), w);
    out[ib] = quantize_block(xb, w);
  }
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(iq4_nl::block) == 18);
static_assert(quant_format<iq4_nl>);

}  // namespace strata::quant
