// F16: IEEE binary16 weights, one element per "block"; quantize rounds to nearest even
// (numpy astype(float16), F16C, ggml's GGML_FP32_TO_FP16) and dequant widens exactly.
// Byte-compatible with GGUF tensor type F16 (ggml ggml_fp16_t).
#pragma once
#include <cstddef>
#include <span>
#include <string_view>

#include "strata/quant/quant_format.hpp"

namespace strata::quant {

struct f16 {
  static constexpr std::string_view name        = "f16";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::f16;
  static constexpr std::size_t      block_elems = 1;
  using act = f16;  // ggml's vec_dot_type for F16 is F16

  struct block {
    fp16 v;  // the value, IEEE binary16 bits
  };

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept { y[0] = to_float(b.v); }
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept { return {to_fp16(x[0])}; }
  // The product of two binary16 values needs at most 22 significant bits, so it is exact in float.
  static constexpr float dot(const block& w, const act::block& a) noexcept { return to_float(w.v) * to_float(a.v); }
};
static_assert(sizeof(f16::block) == 2);
static_assert(quant_format<f16>);

}  // namespace strata::quant
