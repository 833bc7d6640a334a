// BF16: bfloat16 weights, one element per "block"; quantize rounds to nearest even with NaN
// kept quiet (ggml_compute_fp32_to_bf16, gguf-py) and dequant widens exactly.
// Byte-compatible with GGUF tensor type BF16 (ggml ggml_bf16_t).
#pragma once
#include <cstddef>
#include <span>
#include <string_view>

#include "strata/core/bf16.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

// Inside this namespace `bf16` names the format; the storage type is spelled ::strata::bf16.
struct bf16 {
  static constexpr std::string_view name        = "bf16";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::bf16;
  static constexpr std::size_t      block_elems = 1;
  using act = bf16;  // ggml's vec_dot_type for BF16 is BF16

  struct block {
    ::strata::bf16 v;  // the value, upper 16 bits of a binary32
  };

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept { y[0] = to_float(b.v); }
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept { return {to_bf16(x[0])}; }
  // The product of two bfloat16 values needs at most 16 significant bits: exact in float
  // unless it overflows or falls into float's subnormal range.
  static constexpr float dot(const block& w, const act::block& a) noexcept { return to_float(w.v) * to_float(a.v); }
};
static_assert(sizeof(bf16::block) == 2);
static_assert(quant_format<bf16>);

}  // namespace strata::quant
