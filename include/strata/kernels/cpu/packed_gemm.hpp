// Row-interleaved ("packed") weights for the batched CPU matmul. A packed matrix is a sequence
// of groups of 16 rows (the last one zero-padded); within a group, each block column of the
// format (32 or 256 elements) holds the 16 rows' data interleaved 4 bytes at a time, so one
// 64-byte load gives 4 consecutive codes of all 16 rows and a vpdpbusd against 4 broadcast
// activation bytes yields 16 row partial sums at once (outputs in lanes, no horizontal sums).
// A packed group is exactly 16 rows' bytes: the layout costs no memory beyond the padding.
//
// The arithmetic of every output (row n, token t) is fixed by the format (packed/<fmt>.hpp):
// exact int32 sums per block, then one float multiply of the two block scales and one FMA per
// block into the row's accumulator, blocks in order. The SIMD kernels (x86/packed_*.hpp) do
// exactly that in lanes, so they equal the scalar reference bit for bit, for any number of
// tokens and any tile: a token's result never depends on the batch it is in.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::kernels::cpu {

inline constexpr std::size_t pack_rows = 16;  // rows per packed group

// One call: groups [group_begin, group_end) of a packed matrix against n_tok activation rows.
struct gemm_args {
  const std::uint8_t* w = nullptr;   // packed matrix
  std::size_t group_bytes = 0;       // bytes per packed group (16 · row bytes)
  std::size_t group_begin = 0, group_end = 0;
  const std::uint8_t* act = nullptr; // n_tok rows, act_stride bytes apart: act row + extras
  std::size_t act_stride = 0;
  std::size_t act_row_bytes = 0;     // offset of a row's extras (format_kernels::prepare_act)
  std::size_t n_tok = 0;
  float* y = nullptr;                // y[t·y_stride + n]
  std::size_t y_stride = 0;
  std::size_t n_rows = 0;            // real rows: outputs n ≥ n_rows (padding) are not written
  std::size_t k = 0;                 // elements per row
};

// Packed group g of a matrix with `row_bytes` bytes per row.
inline const std::uint8_t* packed_group(const std::uint8_t* w, std::size_t row_bytes, std::size_t g) noexcept {
  return w + g * pack_rows * row_bytes;
}

inline std::size_t packed_groups(std::size_t rows) noexcept { return (rows + pack_rows - 1) / pack_rows; }

namespace detail {

// Copies 4-byte words of 16 rows into the interleaved order: for each word index s of a block
// (`words` per block and row), the 16 rows' words s in row order. src_word(r, s) gives row r's
// word s of the current block (rows ≥ `rows` read as zero).
template <class SrcWord>
inline std::uint8_t* interleave_words(std::uint8_t* dst, std::size_t words, SrcWord src_word) noexcept {
  for (std::size_t s = 0; s < words; ++s)
    for (std::size_t r = 0; r < pack_rows; ++r, dst += 4) {
      const std::uint32_t v = src_word(r, s);
      dst[0] = std::uint8_t(v), dst[1] = std::uint8_t(v >> 8), dst[2] = std::uint8_t(v >> 16), dst[3] = std::uint8_t(v >> 24);
    }
  return dst;
}

inline std::uint32_t word_at(const std::uint8_t* p) noexcept {
  return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24;
}

}  // namespace detail

// The scalar reference: every output from the layout's accumulate() (P = packed::<fmt>), one
// block after another. It defines the bits the SIMD kernels must reproduce.
template <class P>
void gemm_reference(const gemm_args& a) noexcept {
  const std::size_t nb = a.k / P::block_elems;
  for (std::size_t g = a.group_begin; g < a.group_end; ++g) {
    const std::uint8_t* gw = a.w + g * a.group_bytes;
    for (std::size_t t = 0; t < a.n_tok; ++t) {
      const std::uint8_t* act = a.act + t * a.act_stride;
      for (std::size_t r = 0; r < pack_rows && g * pack_rows + r < a.n_rows; ++r) {
        float acc = 0.0f;
        for (std::size_t b = 0; b < nb; ++b)
          acc = P::accumulate(gw + b * P::group_block_bytes, r, act, b, act + a.act_row_bytes, acc);
        a.y[t * a.y_stride + g * pack_rows + r] = acc;
      }
    }
  }
}

}  // namespace strata::kernels::cpu
