// Q4_K: 256 weights per super-block in 8 sub-blocks of 32; 4-bit codes q with a 6-bit scale
// and a 6-bit min per sub-block under fp16 super-scales: x ≈ d·sc_j·q − dmin·m_j.
// Byte-compatible with GGUF tensor type Q4_K (ggml block_q4_K); quantize() is ggml's
// quantize_row_q4_K_ref (what ggml_quantize_chunk runs without an imatrix).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "strata/core/fp16.hpp"
#include "strata/quant/detail/k_scale_min.hpp"
#include "strata/quant/q8_k.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

// Layout (144 bytes). Element e ∈ [0, 256) is in sub-block j = e / 32. Sub-blocks pair up
// in 64-element chunks c = e / 64 that share 32 bytes of qs:
//   qs[32c + e%32]  low nibble: element 64c + e%32 (even j)   high nibble: 64c + 32 + e%32 (odd j)
//   scales[12]      sc_j and m_j, 6 bits each (detail/k_scale_min.hpp has the bit map)
struct q4_k {
  static constexpr std::string_view name = "q4_k";
  static constexpr gguf::type_id gguf_type = gguf::type_id::q4_k;
  static constexpr std::size_t block_elems = 256;
  using act = q8_k;

  struct block {
    fp16 d;                                // super-scale of the 6-bit scales sc_j
    fp16 dmin;                             // super-scale of the 6-bit mins m_j
    std::array<std::uint8_t, 12> scales;   // 8 scales + 8 mins, 6 bits each, packed
    std::array<std::uint8_t, 128> qs;      // 4-bit codes, 2 per byte (layout above)
  };

  // 4-bit code of element e.
  static constexpr int code(const block& b, std::size_t e) noexcept {
    const std::uint8_t byte = b.qs[32 * (e / 64) + e % 32];
    return (e % 64) < 32 ? byte & 0xF : byte >> 4;
  }

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    const float min = to_float(b.dmin);
    for (std::size_t j = 0; j < 8; ++j) {
      const auto [sc, m] = detail::unpack_scale_min_k4(b.scales, j);
      const float d1 = d * float(sc);  // ggml rounds d·sc and dmin·m first, then d1·q − m1
      const float m1 = min * float(m);
      for (std::size_t e = 32 * j; e < 32 * j + 32; ++e) y[e] = d1 * float(code(b, e)) - m1;
    }
  }

  // ggml's reference; its float work (search, scales, re-rounding) is in
  // detail::quantize_scale_min_k4, inside a no-FMA region. Only the bit packing is here.
  static block quantize(std::span<const float, block_elems> x) noexcept {
    return pack(detail::quantize_scale_min_k4(
        x, {.nmax = 15, .rmin = -1.0f, .rdelta = 0.1f, .nstep = 20, .use_mad = false}));
  }

  // ggml's importance-weighted quantizer (quantize_row_q4_K_impl, used with an imatrix);
  // the float work is detail::quantize_scale_min_k4_weighted.
  static void quantize_row_weighted(std::span<const float> x, std::span<const float> qw, block* out) noexcept {
    for (std::size_t i = 0; i < x.size() / block_elems; ++i)
      out[i] = pack(detail::quantize_scale_min_k4_weighted(x.subspan(i * block_elems).first<block_elems>(),
                                                            qw.subspan(i * block_elems, block_elems), 15, false));
  }

  // The block bits of a quantized super-block (scales, super-scales and codes).
  static block pack(const detail::k4_super_block& s) noexcept {
    block b{.d = s.d, .dmin = s.dmin, .scales = s.scales, .qs = {}};
    for (std::size_t c = 0; c < 4; ++c)
      for (std::size_t l = 0; l < 32; ++l)
        b.qs[32 * c + l] = std::uint8_t(s.L[64 * c + l] | s.L[64 * c + 32 + l] << 4);
    return b;
  }

  // ggml vec_dot_q4_K_q8_K for one block: Σ_j sc_j·(q·a)_j exactly in int; the mins term
  // Σ_j m_j·Σ_{e∈j} a_e comes from the activation's 16-sums (two per sub-block of 32).
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    std::int32_t isum = 0, summs = 0;
    for (std::size_t j = 0; j < 8; ++j) {
      const auto [sc, m] = detail::unpack_scale_min_k4(w.scales, j);
      std::int32_t s = 0;
      for (std::size_t e = 32 * j; e < 32 * j + 32; ++e) s += code(w, e) * a.qs[e];
      isum += sc * s;
      summs += m * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
    }
    const float d = to_float(w.d) * a.d;
    const float dmin = to_float(w.dmin) * a.d;
    return d * float(isum) - dmin * float(summs);
  }
};
static_assert(sizeof(q4_k::block) == 144);
static_assert(quant_format<q4_k>);

}  // namespace strata::quant
