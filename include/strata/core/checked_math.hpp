// Overflow-checked unsigned arithmetic for size computations on untrusted input
// (tensor shapes and offsets read from files). Returns false instead of wrapping.
#pragma once
#include <cstdint>

namespace strata {

[[nodiscard]] constexpr bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) noexcept {
  return !__builtin_mul_overflow(a, b, &out);
}

[[nodiscard]] constexpr bool checked_add(std::uint64_t a, std::uint64_t b, std::uint64_t& out) noexcept {
  return !__builtin_add_overflow(a, b, &out);
}

// Rounds x up to a multiple of `align` (a power of two); false on overflow.
[[nodiscard]] constexpr bool checked_align_up(std::uint64_t x, std::uint64_t align, std::uint64_t& out) noexcept {
  std::uint64_t t = 0;
  if (!checked_add(x, align - 1, t)) return false;
  out = t & ~(align - 1);
  return true;
}

}  // namespace strata
