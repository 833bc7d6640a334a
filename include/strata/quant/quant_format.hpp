// The quant_format concept every ggml block format satisfies, and row-level helpers built
// on a format's per-block reference functions (dequant, quantize, dot).
// A format is a struct with: name, gguf_type, block_elems, a `block` struct whose size equals
// ggml's block size for gguf_type, `act` (the activation format its dot() pairs with, as in
// ggml's vec_dot_type), and static dequant / quantize / dot.
#pragma once
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

#include "strata/core/bf16.hpp"
#include "strata/core/fp16.hpp"
#include "strata/gguf/type_id.hpp"

namespace strata::quant {

template <class F>
concept quant_format = requires {
  { F::name } -> std::convertible_to<std::string_view>;
  { F::gguf_type } -> std::convertible_to<gguf::type_id>;
  { F::block_elems } -> std::convertible_to<std::size_t>;
  typename F::block;
  typename F::act;
} && sizeof(typename F::block) == gguf::block_bytes(F::gguf_type) &&
    F::block_elems == gguf::block_elems(F::gguf_type) &&
    requires(const typename F::block& b, std::span<float, F::block_elems> y,
             std::span<const float, F::block_elems> x, const typename F::act::block& a) {
      F::dequant(b, y);
      { F::quantize(x) } -> std::same_as<typename F::block>;
      { F::dot(b, a) } -> std::convertible_to<float>;
    };

// Row helpers: n must be a multiple of Fmt::block_elems (checked by callers that read files).
template <class Fmt>
void dequant_row(const typename Fmt::block* blocks, float* y, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n / Fmt::block_elems; ++i)
    Fmt::dequant(blocks[i], std::span<float, Fmt::block_elems>(y + i * Fmt::block_elems, Fmt::block_elems));
}

template <class Fmt>
void quantize_row(const float* x, typename Fmt::block* blocks, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n / Fmt::block_elems; ++i)
    blocks[i] = Fmt::quantize(std::span<const float, Fmt::block_elems>(x + i * Fmt::block_elems, Fmt::block_elems));
}

// Dot of a weight row with an activation row already in Fmt::act; both hold n elements.
// Weight and activation block sizes may differ (e.g. F32 rows), so walk by elements.
template <class Fmt>
float dot_row(const typename Fmt::block* w, const typename Fmt::act::block* a, std::size_t n) noexcept {
  using Act = typename Fmt::act;
  static_assert(Fmt::block_elems % Act::block_elems == 0 || Act::block_elems % Fmt::block_elems == 0);
  static_assert(Fmt::block_elems == Act::block_elems,
                "dot() pairs one weight block with one activation block");
  float sum = 0.0f;
  for (std::size_t i = 0; i < n / Fmt::block_elems; ++i) sum += Fmt::dot(w[i], a[i]);
  return sum;
}

}  // namespace strata::quant
