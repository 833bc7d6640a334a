// F32: unquantized binary32 weights, one element per "block" so plain tensors fit the
// quant_format concept; dequant and quantize are the identity and dot() a float product.
// Byte-compatible with GGUF tensor type F32 (ggml float, little-endian).
#pragma once
#include <cstddef>
#include <span>
#include <string_view>

#include "strata/quant/quant_format.hpp"

namespace strata::quant {

struct f32 {
  static constexpr std::string_view name        = "f32";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::f32;
  static constexpr std::size_t      block_elems = 1;
  using act = f32;  // ggml's vec_dot_type for F32 is F32

  struct block {
    float v;  // the value, IEEE binary32
  };

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept { y[0] = b.v; }
  static constexpr block quantize(std::span<const float, block_elems> x) noexcept { return {x[0]}; }
  static constexpr float dot(const block& w, const act::block& a) noexcept { return w.v * a.v; }
};
static_assert(sizeof(f32::block) == 4);
static_assert(quant_format<f32>);

}  // namespace strata::quant
