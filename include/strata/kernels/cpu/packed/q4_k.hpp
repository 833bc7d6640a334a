// Packed Q4_K (kernels/cpu/packed_gemm.hpp) against Q8_K activations. One packed block (256
// elements × 16 rows, 2304 bytes, the same as 16 Q4_K blocks):
//   d[16], dmin[16]      fp16 super-scales of each row
//   scales[3][16] words  word u (bytes 4u..4u+3 of the row's 12 packed scale/min bytes), row r
//   qs[32][16] words     word s (bytes 4s..4s+3 of the row's qs), row r: with c = s / 8 and
//                        i = 4·(s % 8), low nibbles are elements 64c + i.. (sub-block 2c), high
//                        nibbles elements 64c + 32 + i.. (sub-block 2c + 1)
// Per output and block: isum = Σ_j sc_j·Σ_{e∈j} q_e·a_e, msum = Σ_j m_j·(bsums_2j + bsums_2j+1)
// (exact int32), then acc = fma(float(isum), d·a.d, acc); acc = fma(−float(msum), dmin·a.d, acc).
#pragma once
#include <cmath>
#include <cstring>

#include "strata/kernels/cpu/packed_gemm.hpp"
#include "strata/quant/q4_k.hpp"

namespace strata::kernels::cpu::packed {

struct q4_k {
  using format = quant::q4_k;
  static constexpr std::size_t block_elems = 256;
  static constexpr std::size_t group_block_bytes = pack_rows * sizeof(quant::q4_k::block);
  static constexpr std::size_t act_extra = 0;
  static constexpr std::size_t scales_offset = 64, qs_offset = 64 + 3 * 4 * pack_rows;

  static void pack_group(const void* w, std::size_t rows, std::size_t k, std::size_t g, void* dst) noexcept {
    const auto* src = static_cast<const quant::q4_k::block*>(w);
    const std::size_t nb = k / block_elems;
    auto* out = static_cast<std::uint8_t*>(dst);
    const auto row_block = [&](std::size_t r, std::size_t b) -> const quant::q4_k::block* {
      const std::size_t row = g * pack_rows + r;
      return row < rows ? &src[row * nb + b] : nullptr;
    };
    for (std::size_t b = 0; b < nb; ++b) {
      for (const bool dmin : {false, true})
        for (std::size_t r = 0; r < pack_rows; ++r, out += 2) {
          const auto* blk = row_block(r, b);
          const std::uint16_t v = blk ? (dmin ? blk->dmin.bits : blk->d.bits) : 0;
          std::memcpy(out, &v, 2);
        }
      out = detail::interleave_words(out, 3, [&](std::size_t r, std::size_t u) -> std::uint32_t {
        const auto* blk = row_block(r, b);
        return blk ? detail::word_at(blk->scales.data() + 4 * u) : 0;
      });
      out = detail::interleave_words(out, 32, [&](std::size_t r, std::size_t s) -> std::uint32_t {
        const auto* blk = row_block(r, b);
        return blk ? detail::word_at(blk->qs.data() + 4 * s) : 0;
      });
    }
  }

  static float accumulate(const std::uint8_t* gb, std::size_t r, const std::uint8_t* act, std::size_t b,
                          const std::uint8_t*, float acc) noexcept {
    const auto& a = reinterpret_cast<const quant::q8_k::block*>(act)[b];
    std::array<std::uint8_t, 12> scales;
    for (std::size_t u = 0; u < 3; ++u) std::memcpy(&scales[4 * u], gb + scales_offset + (u * pack_rows + r) * 4, 4);
    std::int32_t isum = 0, msum = 0;
    for (std::size_t j = 0; j < 8; ++j) {
      const auto [sc, m] = quant::detail::unpack_scale_min_k4(scales, j);
      std::int32_t s = 0;
      for (std::size_t e = 0; e < 32; ++e) {
        const std::size_t c = j / 2, word = 8 * c + e / 4;
        const std::uint8_t byte = gb[qs_offset + (word * pack_rows + r) * 4 + e % 4];
        s += (j % 2 ? byte >> 4 : byte & 0xF) * a.qs[32 * j + e];
      }
      isum += sc * s;
      msum += m * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
    }
    std::uint16_t d, dmin;
    std::memcpy(&d, gb + 2 * r, 2);
    std::memcpy(&dmin, gb + 32 + 2 * r, 2);
    acc = std::fma(float(isum), to_float(fp16{d}) * a.d, acc);
    return std::fma(-float(msum), to_float(fp16{dmin}) * a.d, acc);
  }
};

}  // namespace strata::kernels::cpu::packed
