// MXFP4 (OCP Microscaling v1.0): 32 weights per block sharing one E8M0 power-of-two scale,
// each an FP4 E2M1 code; x ≈ 2^(e−127)·e2m1(q).
// Byte-compatible with GGUF tensor type MXFP4 (ggml block_mxfp4, table kvalues_mxfp4).
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "strata/quant/detail/rounding.hpp"
#include "strata/quant/q8_0.hpp"
#include "strata/quant/quant_format.hpp"

namespace strata::quant {

struct mxfp4 {
  static constexpr std::string_view name        = "mxfp4";
  static constexpr gguf::type_id    gguf_type   = gguf::type_id::mxfp4;
  static constexpr std::size_t      block_elems = 32;
  using act = q8_0;  // activation format for dot()

  // E2M1 values doubled so they are integers (0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6 → int8); the
  // scale is halved to compensate (half_scale). Code bit 3 is the sign, so 8 is −0 → 0.
  static constexpr std::array<std::int8_t, 16> values = {0, 1,  2,  3,  4,  6,  8,  12,
                                                         0, -1, -2, -3, -4, -6, -8, -12};

  struct block {
    std::uint8_t                 e;   // E8M0 shared exponent: scale 2^(e − 127); 255 is not NaN here
    std::array<std::uint8_t, 16> qs;  // qs[j] = q[j] | q[j + 16] << 4, q an E2M1 code (sign in bit 3)
  };

  // 2^(e − 128), i.e. the E8M0 scale over two, exact for every e (e = 0, 1 are float
  // subnormals). ggml's GGML_E8M0_TO_FP32_HALF; like it, e = 255 is 2^127, not NaN.
  static constexpr float half_scale(std::uint8_t e) noexcept {
    const std::uint32_t bits = e < 2 ? 0x00200000u << e : std::uint32_t(e - 1) << 23;
    return std::bit_cast<float>(bits);
  }

  static constexpr void dequant(const block& b, std::span<float, block_elems> y) noexcept {
    const float d = half_scale(b.e);
    for (std::size_t j = 0; j < 16; ++j) {
      y[j]      = float(values[b.qs[j] & 0x0F]) * d;
      y[j + 16] = float(values[b.qs[j] >> 4]) * d;
    }
  }

  // Code whose value is nearest to v at half-scale d; the first code wins ties, so 0 not −0.
  static constexpr std::uint8_t nearest_code(float v, float d) noexcept {
    std::uint8_t best = 0;
    float best_err = detail::abs_f(float(values[0]) * d - v);
    for (std::uint8_t i = 1; i < 16; ++i) {
      const float err = detail::abs_f(float(values[i]) * d - v);
      if (err < best_err) {
        best = i;
        best_err = err;
      }
    }
    return best;
  }

  // ggml's quantize_row_mxfp4_ref: e = floor(log2 max|x|) − 2 + 127, so the largest |x| lands
  // in [8, 16) half-scale units; the grid tops out at 12, so |x| above 1.5·2^⌊log2 max⌋ clips
  // to ±6 (OCP's rule, not a rounding choice). The exponent comes from log2f exactly as ggml
  // computes it (not from the float's exponent bits), because log2f rounds up to the next
  // integer for values a few ulps below a power of two and ggml's bytes follow that; this is
  // also why quantize is not constexpr. Out-of-range exponents (|x| < 2^-125), undefined in
  // ggml's cast, clamp to 0.
  static block quantize(std::span<const float, block_elems> x) noexcept {
    float amax = 0.0f;
    for (const float v : x) amax = amax < detail::abs_f(v) ? detail::abs_f(v) : amax;
    block b{};
    if (amax > 0.0f) {
      const float e = std::floor(std::log2(amax)) - 2.0f + 127.0f;
      b.e = std::uint8_t(std::clamp(detail::trunc_to_int(e), 0, 255));
    }
    const float d = half_scale(b.e);
    for (std::size_t j = 0; j < 16; ++j)
      b.qs[j] = std::uint8_t(nearest_code(x[j], d) | nearest_code(x[j + 16], d) << 4);
    return b;
  }

  // Σ values[q]·a.q in integers, then (d_a·half_scale)·sumi as ggml's generic kernel orders it.
  static constexpr float dot(const block& w, const act::block& a) noexcept {
    int sumi = 0;
    for (std::size_t j = 0; j < 16; ++j) {
      sumi += int(a.qs[j]) * int(values[w.qs[j] & 0x0F]);
      sumi += int(a.qs[j + 16]) * int(values[w.qs[j] >> 4]);
    }
    return to_float(a.d) * half_scale(w.e) * float(sumi);
  }
};
static_assert(sizeof(mxfp4::block) == 17);
static_assert(quant_format<mxfp4>);

}  // namespace strata::quant
