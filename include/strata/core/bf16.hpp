// bfloat16 storage type and conversions matching ggml's ggml_compute_fp32_to_bf16
// (round to nearest even; NaN kept quiet by setting bit 6) and exact widening.
#pragma once
#include <bit>
#include <cstdint>

namespace strata {

struct bf16 {
  std::uint16_t bits = 0;  // the upper 16 bits of a binary32
  friend constexpr bool operator==(bf16, bf16) = default;
};
static_assert(sizeof(bf16) == 2);

constexpr float to_float(bf16 h) noexcept { return std::bit_cast<float>(std::uint32_t(h.bits) << 16); }

constexpr bf16 to_bf16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return bf16{std::uint16_t((u >> 16) | 64u)};
  return bf16{std::uint16_t((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16)};
}

}  // namespace strata
