// Q8_1: Q8_0 plus s = d·Σq, the activation format that Q4_1 and Q5_1 dot products pair with
// (s lets their dot apply the weight block's min m as m·s without another pass over q).
// Byte-compatible with GGUF tensor type Q8_1 (ggml block_q8_1).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "strata/quant/detail/rounding.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

struct q8_1 {
  static constexpr std::string_view name        = "q8_1";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::q8_1;
  static constexpr std::size_t      block_elems = 32;
  using act = q8_1;  // ggml's vec_dot_type for Q8_1 is Q8_1 itself

  struct block {
    fp16                        d;   // scale; x[j] ≈ d·qs[j]
    fp16                        s;   // fp16(d·Σ qs[j]) with the unrounded d (ggml's definition)
    std::array<std::int8_t, 32> qs;  // codes in element order; quantize() writes −127..127
  };

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = to_float(b.d);
    for (std::size_t j = 0; j < block_elems; ++j) y[j] = float(b.qs[j]) * d;
  }

  // ggml's quantize_row_q8_1_ref: the codes are exactly Q8_0's; s is rounded from the float
  // product of the integer sum and the scale before that scale is rounded to fp16.
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept {
    float amax = 0.0f;
    for (const float v : x) amax = amax > detail::abs_f(v) ? amax : detail::abs_f(v);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block b{};
    int sum = 0;
    for (std::size_t j = 0; j < block_elems; ++j) {
      b.qs[j] = std::int8_t(detail::round_away(x[j] * id));
      sum += b.qs[j];
    }
    b.d = to_fp16(d);
    b.s = to_fp16(float(sum) * d);
    return b;
  }

  // ggml has no Q8_1·Q8_1 kernel; this is the plain code dot, scaled like Q8_0's.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    int sumi = 0;
    for (std::size_t j = 0; j < block_elems; ++j) sumi += int(w.qs[j]) * int(a.qs[j]);
    return float(sumi) * (to_float(w.d) * to_float(a.d));
  }
};
static_assert(sizeof(q8_1::block) == 36);
static_assert(quant_format<q8_1>);

}  // namespace strata::quant
