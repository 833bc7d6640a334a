// Q3_K: 256 weights per super-block in 16 sub-blocks of 16; signed 3-bit codes q ∈ [−4, 3]
// with a 6-bit signed scale per sub-block and an fp16 super-scale d: x ≈ d·(s − 32)·q.
// Byte-compatible with GGUF tensor type Q3_K (ggml block_q3_K); quantize() is ggml's
// quantize_row_q3_K_ref (what ggml_quantize_chunk runs without an imatrix).
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

// Layout (110 bytes). Element e ∈ [0, 256) is in sub-block j = e / 16; its code is
// q = lo + 4·hi − 4 with
//   lo (2 bits)  qs[32·(e/128) + e%32] bits 2k..2k+1, k = (e%128)/32   (as in Q2_K)
//   hi (1 bit)   hmask[e % 32] bit e/32: byte b holds elements b, b+32, …, b+224
// The 16 scales s_j ∈ [0, 63] (value s_j − 32) are split over 12 bytes:
//   scales[0..7]   low nibble: s_0..s_7 bits 0-3   high nibble: s_8..s_15 bits 0-3
//   scales[8 + k]  bits 2i..2i+1 = s_{4i+k} bits 4-5        (k = 0..3, i = 0..3)
struct q3_k {
  static constexpr std::string_view name = "q3_k";
  static constexpr gguf::type_id gguf_type = gguf::type_id::q3_k;
  static constexpr std::size_t block_elems = 256;
  using act = q8_k;

  struct block {
    std::array<std::uint8_t, 32> hmask;   // high bit of each code: hmask[e % 32] bit e / 32
    std::array<std::uint8_t, 64> qs;      // low 2 bits of each code, 4 per byte (as Q2_K)
    std::array<std::uint8_t, 12> scales;  // 16 six-bit scales, offset 32 (layout above)
    fp16 d;                               // super-scale of the sub-block scales
  };

  // Sub-block scale j as a signed value s_j − 32 ∈ [−32, 31].
  static constexpr int scale(const block& b, std::size_t j) noexcept {
    const int lo = j < 8 ? b.scales[j] & 0xF : b.scales[j - 8] >> 4;
    const int hi = (b.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
  }

  // Signed code of element e, in [−4, 3]: a clear high bit means "subtract 4".
  static constexpr int code(const block& b, std::size_t e) noexcept {
    const int lo = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const bool hi = (b.hmask[e % 32] >> (e / 32)) & 1;
    return lo - (hi ? 0 : 4);
  }

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d_all = to_float(b.d);
    for (std::size_t j = 0; j < 16; ++j) {
      const float dl = d_all * float(scale(b, j));
      for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) y[e] = dl * float(code(b, e));
    }
  }

  // ggml's reference: make_q3_quants per sub-block, 6-bit scales relative to the largest one,
  // then every code re-rounded against the scale as stored.
  static block quantize(std::span<const float, block_elems> x) noexcept;

  // ggml's importance-weighted quantizer (quantize_row_q3_K_impl, used with an imatrix): per
  // sub-block make_qx_quants with weights qw·√(σ² + x²) (σ² = 2·mean square of the block),
  // the 6-bit scales by make_qx_quants weighted by each sub-block's total weight.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept;

 private:
  // Both quantizers end alike: codes re-rounded against the stored scales, then packed.
  static void finish(block& b, std::span<const float, block_elems> x, std::array<std::int8_t, 256>& L) noexcept;

 public:

  // ggml vec_dot_q3_K_q8_K for one block: Σ_j (s_j − 32)·(q·a)_j exactly in int, times d·a.d.
  // Q3_K has no min, so the activation's bsums are not needed.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    std::int32_t isum = 0;
    for (std::size_t j = 0; j < 16; ++j) {
      std::int32_t s = 0;
      for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) s += code(w, e) * a.qs[e];
      isum += scale(w, j) * s;
    }
    return to_float(w.d) * a.d * float(isum);
  }
};

// Out of line so that it sits in a no-FMA-contraction region (see detail/fp_exact_push.hpp).
#include "strata/quant/detail/fp_exact_push.hpp"
inline q3_k::block q3_k::quantize(std::span<const float, block_elems> x) noexcept {
  // Sub-block pass: signed codes from make_q3_quants (stored +4, so L ∈ [0, 7]).
  std::array<std::int8_t, 256> L{};
  std::array<float, 16> scales{};
  float max_scale = 0.0f, amax = 0.0f;  // the scale of largest magnitude, with its sign
  for (std::size_t j = 0; j < 16; ++j) {
    scales[j] = detail::make_q3_quants(x.subspan(16 * j, 16), 4, std::span(L).subspan(16 * j, 16));
    const float a = std::fabs(scales[j]);
    if (a > amax) { amax = a; max_scale = scales[j]; }
  }

  // Super-block pass: s_j = clamp(round(−32·scale_j / max_scale), −32, 31) + 32. The
  // largest scale maps to −32, so d = max_scale / −32 has the opposite sign of max_scale.
  block b{};
  if (max_scale != 0.0f) {
    const float iscale = -32.0f / max_scale;
    for (std::size_t j = 0; j < 16; ++j) {
      const int r = std::int8_t(detail::nearest_int(iscale * scales[j]));  // ggml keeps it in int8
      const unsigned s = unsigned((r < -32 ? -32 : r > 31 ? 31 : r) + 32);
      if (j < 8) b.scales[j] = std::uint8_t(s & 0xF);                       // bits 0-3, low nibble
      else b.scales[j - 8] = std::uint8_t(b.scales[j - 8] | (s & 0xF) << 4);  // or high nibble
      b.scales[8 + j % 4] = std::uint8_t(b.scales[8 + j % 4] | (s >> 4) << (2 * (j / 4)));  // bits 4-5
    }
    b.d = to_fp16(1.0f / iscale);
  }

  finish(b, x, L);
  return b;
}

inline void q3_k::finish(block& b, std::span<const float, block_elems> x, std::array<std::int8_t, 256>& L) noexcept {
  // Re-round every code against the stored scale (fp16 d times 6-bit s). A sub-block whose
  // stored scale is 0 keeps its search codes, as ggml does.
  const float d_all = to_float(b.d);
  for (std::size_t j = 0; j < 16; ++j) {
    const float d = d_all * float(scale(b, j));
    if (d == 0.0f) continue;
    for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) {
      const int l = detail::nearest_int(x[e] / d);
      L[e] = std::int8_t((l < -4 ? -4 : l > 3 ? 3 : l) + 4);
    }
  }

  // Split each code L ∈ [0, 7] into its high bit (hmask) and low 2 bits (qs).
  for (std::size_t e = 0; e < 256; ++e) {
    if (L[e] > 3) {
      b.hmask[e % 32] = std::uint8_t(b.hmask[e % 32] | 1u << (e / 32));
      L[e] = std::int8_t(L[e] - 4);
    }
  }
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t r = 0; r < 32; ++r) {
      const std::size_t e = 128 * h + r;
      b.qs[32 * h + r] = std::uint8_t(L[e] | L[e + 32] << 2 | L[e + 64] << 4 | L[e + 96] << 6);
    }
}

inline void q3_k::quantize_row_weighted(std::span<const float> row, std::span<const float> qw, block* out) noexcept {
  for (std::size_t i = 0; i < row.size() / block_elems; ++i) {
    const auto x = row.subspan(i * block_elems).first<block_elems>();
    const auto q = qw.subspan(i * block_elems, block_elems);
    const float sigma2 = 2.0f * detail::sum_squares(x) / 256.0f;
    std::array<std::int8_t, 256> L{};
    std::array<float, 16> scales{}, sw{};
    for (std::size_t j = 0; j < 16; ++j) {
      std::array<float, 16> w;
      detail::importance_weights(x.subspan(16 * j, 16), q.subspan(16 * j, 16), sigma2, w);
      for (const float v : w) sw[j] += v;
      scales[j] = detail::make_qx_quants(x.subspan(16 * j, 16), 4, std::span(L).subspan(16 * j, 16), w);
    }
    std::array<std::int8_t, 16> Ls{};
    const float d_block = detail::make_qx_quants(scales, 32, Ls, sw);  // 6-bit codes, stored as they are
    block b{};
    for (std::size_t j = 0; j < 16; ++j) {
      const unsigned l = unsigned(Ls[j]);
      if (j < 8) b.scales[j] = std::uint8_t(l & 0xF);
      else b.scales[j - 8] = std::uint8_t(b.scales[j - 8] | (l & 0xF) << 4);
      b.scales[8 + j % 4] = std::uint8_t(b.scales[8 + j % 4] | (l >> 4) << (2 * (j / 4)));
    }
    b.d = to_fp16(d_block);
    finish(b, x, L);
    out[i] = b;
  }
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(q3_k::block) == 110);
static_assert(quant_format<q3_k>);

}  // namespace strata::quant
