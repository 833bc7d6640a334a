// Packed Q8_0 (kernels/cpu/packed_gemm.hpp) against Q8_0 activations. One packed block (32
// elements × 16 rows, 544 bytes, the same as 16 Q8_0 blocks):
//   d[16]            fp16 scale of each row
//   qs[8][16] words  step s, row r: codes 4s..4s+3 of row r, each stored as w ^ 0x80 (w + 128,
//                    unsigned) so vpdpbusd can take the weights as its unsigned operand
// Activation extras (prepare_act): per block, int32 −128·Σ a, which turns Σ (w + 128)·a into
// Σ w·a. Per output: acc = fma(float(Σ w·a), d_w·d_a, acc) per block, in block order.
#pragma once
#include <cmath>
#include <cstring>

#include "strata/kernels/cpu/packed_gemm.hpp"
#include "strata/quant/q8_0.hpp"

namespace strata::kernels::cpu::packed {

struct q8_0 {
  using format = quant::q8_0;
  static constexpr std::size_t block_elems = 32;
  static constexpr std::size_t group_block_bytes = pack_rows * sizeof(quant::q8_0::block);
  static constexpr std::size_t act_extra = 4;  // bytes per activation block

  static void pack_group(const void* w, std::size_t rows, std::size_t k, std::size_t g, void* dst) noexcept {
    const auto* src = static_cast<const quant::q8_0::block*>(w);
    const std::size_t nb = k / block_elems;
    auto* out = static_cast<std::uint8_t*>(dst);
    for (std::size_t b = 0; b < nb; ++b) {
      for (std::size_t r = 0; r < pack_rows; ++r, out += 2) {
        const std::size_t row = g * pack_rows + r;
        const std::uint16_t d = row < rows ? src[row * nb + b].d.bits : 0;
        std::memcpy(out, &d, 2);
      }
      out = detail::interleave_words(out, 8, [&](std::size_t r, std::size_t s) -> std::uint32_t {
        const std::size_t row = g * pack_rows + r;
        if (row >= rows) return 0x80808080u;  // code 0
        const auto* q = reinterpret_cast<const std::uint8_t*>(src[row * nb + b].qs.data()) + 4 * s;
        return detail::word_at(q) ^ 0x80808080u;
      });
    }
  }

  static void prepare_act(void* act_row, std::size_t k) noexcept {
    const auto* a = static_cast<const quant::q8_0::block*>(act_row);
    auto* extra = reinterpret_cast<std::uint8_t*>(act_row) + k / block_elems * sizeof(quant::q8_0::block);
    for (std::size_t b = 0; b < k / block_elems; ++b) {
      std::int32_t s = 0;
      for (const std::int8_t q : a[b].qs) s += q;
      s *= -128;
      std::memcpy(extra + 4 * b, &s, 4);
    }
  }

  // Row r's contribution of block b, added to acc (the definition the SIMD kernels follow).
  static float accumulate(const std::uint8_t* gb, std::size_t r, const std::uint8_t* act, std::size_t b,
                          const std::uint8_t*, float acc) noexcept {
    const auto& a = reinterpret_cast<const quant::q8_0::block*>(act)[b];
    std::int32_t isum = 0;
    for (std::size_t s = 0; s < 8; ++s)
      for (std::size_t e = 0; e < 4; ++e) isum += (int(gb[32 + (s * pack_rows + r) * 4 + e]) - 128) * a.qs[4 * s + e];
    std::uint16_t dw;
    std::memcpy(&dw, gb + 2 * r, 2);
    return std::fma(float(isum), to_float(fp16{dw}) * to_float(a.d), acc);
  }
};

}  // namespace strata::kernels::cpu::packed
