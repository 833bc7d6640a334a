// Packed Q6_K (kernels/cpu/packed_gemm.hpp) against Q8_K activations. One packed block (256
// elements × 16 rows, 3360 bytes, the same as 16 Q6_K blocks):
//   d[16]             fp16 super-scale of each row
//   scales[16][16]    int8 scale of sub-block j (16 elements), row r, at 16j + r
//   ql[32][16] words  word s (bytes 4s..4s+3 of the row's ql), row r
//   qh[16][16] words  word s (bytes 4s..4s+3 of the row's qh), row r
// (q6_k.hpp has the element map: in half h, ql words 16h + s and 16h + 8 + s and qh word 8h + s
// hold elements 128h + 32k + 4s.. of the four quarters k.) Codes are used unsigned (q + 32 ∈
// 0..63) and the offset comes back through the activation's 16-sums. Per output and block:
// isum = Σ_j sc_j·Σ_{e∈j} u_e·a_e − 32·Σ_j sc_j·bsums_j (exact int32); acc = fma(float(isum), d·a.d, acc).
#pragma once
#include <cmath>
#include <cstring>

#include "strata/kernels/cpu/packed_gemm.hpp"
#include "strata/quant/q6_k.hpp"

namespace strata::kernels::cpu::packed {

struct q6_k {
  using format = quant::q6_k;
  static constexpr std::size_t block_elems = 256;
  static constexpr std::size_t group_block_bytes = pack_rows * sizeof(quant::q6_k::block);
  static constexpr std::size_t act_extra = 0;
  static constexpr std::size_t scales_offset = 32, ql_offset = 32 + 16 * pack_rows,
                               qh_offset = ql_offset + 32 * 4 * pack_rows;

  static void pack_group(const void* w, std::size_t rows, std::size_t k, std::size_t g, void* dst) noexcept {
    const auto* src = static_cast<const quant::q6_k::block*>(w);
    const std::size_t nb = k / block_elems;
    auto* out = static_cast<std::uint8_t*>(dst);
    const auto row_block = [&](std::size_t r, std::size_t b) -> const quant::q6_k::block* {
      const std::size_t row = g * pack_rows + r;
      return row < rows ? &src[row * nb + b] : nullptr;
    };
    for (std::size_t b = 0; b < nb; ++b) {
      for (std::size_t r = 0; r < pack_rows; ++r, out += 2) {
        const auto* blk = row_block(r, b);
        const std::uint16_t v = blk ? blk->d.bits : 0;
        std::memcpy(out, &v, 2);
      }
      for (std::size_t j = 0; j < 16; ++j)
        for (std::size_t r = 0; r < pack_rows; ++r) {
          const auto* blk = row_block(r, b);
          *out++ = blk ? std::uint8_t(blk->scales[j]) : 0;
        }
      out = detail::interleave_words(out, 32, [&](std::size_t r, std::size_t s) -> std::uint32_t {
        const auto* blk = row_block(r, b);
        return blk ? detail::word_at(blk->ql.data() + 4 * s) : 0;
      });
      out = detail::interleave_words(out, 16, [&](std::size_t r, std::size_t s) -> std::uint32_t {
        const auto* blk = row_block(r, b);
        return blk ? detail::word_at(blk->qh.data() + 4 * s) : 0;
      });
    }
  }

  static float accumulate(const std::uint8_t* gb, std::size_t r, const std::uint8_t* act, std::size_t b,
                          const std::uint8_t*, float acc) noexcept {
    const auto& a = reinterpret_cast<const quant::q8_k::block*>(act)[b];
    std::int32_t isum = 0;
    for (std::size_t j = 0; j < 16; ++j) {
      const std::int32_t sc = std::int8_t(gb[scales_offset + j * pack_rows + r]);
      std::int32_t s = 0;
      for (std::size_t e = 16 * j; e < 16 * j + 16; ++e) {
        const std::size_t h = e / 128, k = (e % 128) / 32, l = e % 32;
        const std::size_t ql_byte = 64 * h + 32 * (k & 1) + l, qh_byte = 32 * h + l;
        const std::uint8_t lo = gb[ql_offset + ((ql_byte / 4) * pack_rows + r) * 4 + ql_byte % 4];
        const std::uint8_t hi = gb[qh_offset + ((qh_byte / 4) * pack_rows + r) * 4 + qh_byte % 4];
        const int u = (k < 2 ? lo & 0xF : lo >> 4) | ((hi >> (2 * k)) & 3) << 4;
        s += u * a.qs[e];
      }
      isum += sc * s - 32 * sc * a.bsums[j];
    }
    std::uint16_t d;
    std::memcpy(&d, gb + 2 * r, 2);
    return std::fma(float(isum), to_float(fp16{d}) * a.d, acc);
  }
};

}  // namespace strata::kernels::cpu::packed
