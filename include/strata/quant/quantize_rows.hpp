// Whole rows of any GGUF type id to and from float32, dispatched once per call: ggml's
// ggml_quantize_chunk (with its optional importance matrix) and to_float. Quantized bytes are
// ggml's: every format's reference quantizer is byte-exact, and with an importance matrix the
// formats that take one use their weighted quantizer (quantize_row_weighted, ggml's
// quantize_*_impl), the others ignore it as ggml does.
#pragma once
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/quant/all.hpp"

namespace strata::quant {

// A format whose quantizer can weigh each column's error (llama.cpp's imatrix): one row of
// n floats (a multiple of block_elems) with n importance weights, into n / block_elems blocks.
template <class F>
concept importance_quantizer = requires(std::span<const float> x, std::span<const float> w, typename F::block* out) {
  F::quantize_row_weighted(x, w, out);
};

// Bytes of one row of n elements of type t (n a multiple of its block size).
inline std::size_t row_bytes(gguf::type_id t, std::size_t n) {
  if (n % gguf::block_elems(t) != 0)
    throw error("row of " + std::to_string(n) + " elements is not a multiple of the " +
                std::string(gguf::name_of(t)) + " block size " + std::to_string(gguf::block_elems(t)));
  return n / gguf::block_elems(t) * gguf::block_bytes(t);
}

// Quantizes `nrows` rows of `n_per_row` floats to type t into dst (nrows * row_bytes(t, n)).
// `importance` is empty or holds n_per_row weights (one per column), as ggml_quantize_chunk's.
inline void quantize_rows(gguf::type_id t, const float* src, std::size_t nrows, std::size_t n_per_row,
                          std::span<const float> importance, std::byte* dst) {
  const std::size_t rb = row_bytes(t, n_per_row);
  if (!importance.empty() && importance.size() != n_per_row)
    throw error("importance matrix has " + std::to_string(importance.size()) + " values for rows of " +
                std::to_string(n_per_row));
  visit(t, [&](auto fmt) {
    using F = decltype(fmt);
    using block = typename F::block;
    constexpr std::size_t be = F::block_elems;
    const std::size_t nb = n_per_row / be;
    std::vector<block> blocks;
    if constexpr (importance_quantizer<F>)
      if (!importance.empty()) blocks.resize(nb);
    for (std::size_t r = 0; r < nrows; ++r) {
      const float* x = src + r * n_per_row;
      std::byte* out = dst + r * rb;
      if constexpr (importance_quantizer<F>) {
        if (!importance.empty()) {
          F::quantize_row_weighted(std::span<const float>(x, n_per_row), importance, blocks.data());
          std::memcpy(out, blocks.data(), nb * sizeof(block));
          continue;
        }
      }
      for (std::size_t i = 0; i < nb; ++i) {  // memcpy: rows in a file need not be block-aligned
        const block b = F::quantize(std::span<const float, be>(x + i * be, be));
        std::memcpy(out + i * sizeof(block), &b, sizeof(block));
      }
    }
  });
}

// Converts n elements of type t at src (n a multiple of the block size) to float32.
inline void dequantize_rows(gguf::type_id t, const std::byte* src, std::size_t n, float* dst) {
  (void)row_bytes(t, n);
  visit(t, [&](auto fmt) {
    using F = decltype(fmt);
    using block = typename F::block;
    constexpr std::size_t be = F::block_elems;
    for (std::size_t i = 0; i < n / be; ++i) {
      block b;
      std::memcpy(&b, src + i * sizeof(block), sizeof(block));
      F::dequant(b, std::span<float, be>(dst + i * be, be));
    }
  });
}

}  // namespace strata::quant
