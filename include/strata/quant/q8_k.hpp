// Q8_K: the activation format every K-quant dot() pairs with. 256 values per block, one
// float scale d and int8 codes q, x ≈ d·q, plus the sums of each group of 16 codes so the
// K-quants can apply their per-sub-block minimums without touching q. Byte-compatible with
// GGUF tensor type Q8_K (ggml block_q8_K; quantize_row_q8_K_ref, dequantize_row_q8_K).
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "strata/quant/detail/rounding.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

struct q8_k {
  static constexpr std::string_view name = "q8_k";
  static constexpr gguf::type_id gguf_type = gguf::type_id::q8_k;
  static constexpr std::size_t block_elems = 256;
  using act = q8_k;  // ggml has no vec_dot for Q8_K; pairing with itself keeps the contract

  struct block {
    float d;                            // scale, full fp32 (unlike every weight format)
    std::array<std::int8_t, 256> qs;    // codes in [-127, 127]; x[j] ≈ d·qs[j]
    std::array<std::int16_t, 16> bsums; // bsums[g] = Σ qs[16g .. 16g+15], |bsums| ≤ 16·127
  };

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    for (std::size_t j = 0; j < block_elems; ++j) y[j] = b.d * float(b.qs[j]);
  }

  // The value of largest magnitude maps to −127 (ggml moved from −128 to −127 for its IQ2_XXS
  // AVX kernels; a symmetric range can also be negated safely) and d = max/−127 carries the
  // sign, so every code is in [−127, 127]. An all-zero block gets d = 0 and zero sums (ggml
  // leaves its bsums unset there).
  static block quantize(std::span<const float, block_elems> x) noexcept;

  // Σ (w.d·w.q)(a.d·a.q) with the code products summed exactly in int32.
  static constexpr float dot(const block& w, const block& a) noexcept {
    std::int32_t isum = 0;
    for (std::size_t j = 0; j < block_elems; ++j) isum += std::int32_t(w.qs[j]) * a.qs[j];
    return w.d * a.d * float(isum);
  }
};

// Out of line so that it sits in a no-FMA-contraction region (see detail/fp_exact_push.hpp).
#include "strata/quant/detail/fp_exact_push.hpp"
inline q8_k::block q8_k::quantize(std::span<const float, block_elems> x) noexcept {
  block b{};
  float max = 0.0f, amax = 0.0f;
  for (const float v : x) {
    const float av = std::fabs(v);
    if (av > amax) { amax = av; max = v; }
  }
  if (amax == 0.0f) return b;
  const float iscale = -127.0f / max;
  for (std::size_t j = 0; j < block_elems; ++j) {
    const int v = detail::nearest_int(iscale * x[j]);
    b.qs[j] = std::int8_t(v < 127 ? v : 127);
  }
  for (std::size_t g = 0; g < 16; ++g) {
    int sum = 0;
    for (std::size_t l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
    b.bsums[g] = std::int16_t(sum);
  }
  b.d = 1.0f / iscale;
  return b;
}
#include "strata/quant/detail/fp_exact_pop.hpp"

static_assert(sizeof(q8_k::block) == 292);
static_assert(quant_format<q8_k>);

}  // namespace strata::quant
