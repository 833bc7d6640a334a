// AVX2 dot driver for the unquantized formats (F32, F16, BF16), whose activations use the
// weight's own format: widen 8 elements of each side to float and FMA.
//
// Loader L: static __m256 load8(const void* row, size_t i)  elements i..i+7 as float
//           static float at(const void* row, size_t i)       element i as float
#pragma once
#include "strata/kernels/cpu/x86_avx2/common.hpp"

namespace strata::kernels::cpu::x86_avx2 {
namespace {

// Two accumulators per row (16 elements per step) hide half the FMA latency, enough for a
// bandwidth-bound matvec (32 weight bytes per cycle for F32); the tail is summed in order.
template <class L, int R>
inline void dot_float(const void* w, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  const void* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = static_cast<const std::byte*>(av) + std::size_t(r) * stride;
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_weights(static_cast<const std::byte*>(w) + i * L::elem_bytes);
    const __m256 w0 = L::load8(w, i), w1 = L::load8(w, i + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm256_fmadd_ps(w0, L::load8(a[r], i), acc0[r]);
      acc1[r] = _mm256_fmadd_ps(w1, L::load8(a[r], i + 8), acc1[r]);
    }
  }
  if (i + 8 <= n) {
    const __m256 w0 = L::load8(w, i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc0[r] = _mm256_fmadd_ps(w0, L::load8(a[r], i), acc0[r]);
    i += 8;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float tail = 0.0f;
    for (std::size_t j = i; j < n; ++j) tail += L::at(w, j) * L::at(a[r], j);
    out[r] = hsum(_mm256_add_ps(acc0[r], acc1[r])) + tail;
  }
}

struct f32_loader {
  static constexpr std::size_t elem_bytes = 4;
  static __m256 load8(const void* p, std::size_t i) noexcept {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
  static float at(const void* p, std::size_t i) noexcept { return static_cast<const float*>(p)[i]; }
};
struct f16_loader {
  static constexpr std::size_t elem_bytes = 2;
  static __m256 load8(const void* p, std::size_t i) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i)));
  }
  static float at(const void* p, std::size_t i) noexcept {
    return fp16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
  }
};
struct bf16_loader {
  static constexpr std::size_t elem_bytes = 2;
  static __m256 load8(const void* p, std::size_t i) noexcept {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float at(const void* p, std::size_t i) noexcept {
    return bits_to_f32(std::uint32_t(static_cast<const std::uint16_t*>(p)[i]) << 16);
  }
};

}  // namespace
}  // namespace strata::kernels::cpu::x86_avx2
