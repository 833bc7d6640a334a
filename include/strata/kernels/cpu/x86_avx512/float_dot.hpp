// AVX-512 dot for the unquantized formats (F32, F16, BF16) against activations in the same
// format: widen 16 elements per side to float and FMA; the ragged end is one masked load.
//
// Loader L: static __m512 load16(const void* row, size_t i)              elements i..i+15
//           static __m512 load_n(const void* row, size_t i, __mmask16 m) masked lanes, others 0
#pragma once
#include "strata/kernels/cpu/x86_avx512/common.hpp"

namespace strata::kernels::cpu::x86_avx512 {
namespace {

template <class L, int R>
inline void dot_float(const void* w, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  const void* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = static_cast<const std::byte*>(av) + std::size_t(r) * stride;
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (std::size_t o = 0; o < 32 * L::elem_bytes; o += 64)
      x86_avx2::prefetch_weights(static_cast<const std::byte*>(w) + i * L::elem_bytes, o);
    const __m512 w0 = L::load16(w, i), w1 = L::load16(w, i + 16);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm512_fmadd_ps(w0, L::load16(a[r], i), acc0[r]);
      acc1[r] = _mm512_fmadd_ps(w1, L::load16(a[r], i + 16), acc1[r]);
    }
  }
  if (i + 16 <= n) {
    const __m512 w0 = L::load16(w, i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc0[r] = _mm512_fmadd_ps(w0, L::load16(a[r], i), acc0[r]);
    i += 16;
  }
  if (i < n) {
    const __mmask16 m = _cvtu32_mask16((1u << (n - i)) - 1u);
    const __m512 w0 = L::load_n(w, i, m);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc1[r] = _mm512_fmadd_ps(w0, L::load_n(a[r], i, m), acc1[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum(_mm512_add_ps(acc0[r], acc1[r]));
}

struct f32_loader {
  static constexpr std::size_t elem_bytes = 4;
  static __m512 load16(const void* p, std::size_t i) noexcept {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  }
  static __m512 load_n(const void* p, std::size_t i, __mmask16 m) noexcept {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  }
};
struct f16_loader {
  static constexpr std::size_t elem_bytes = 2;
  static __m512 load16(const void* p, std::size_t i) noexcept {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(p) + i)));
  }
  static __m512 load_n(const void* p, std::size_t i, __mmask16 m) noexcept {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const std::uint16_t*>(p) + i));
  }
};
struct bf16_loader {
  static constexpr std::size_t elem_bytes = 2;
  static __m512 widen(__m256i h) noexcept {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load16(const void* p, std::size_t i) noexcept {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(p) + i)));
  }
  static __m512 load_n(const void* p, std::size_t i, __mmask16 m) noexcept {
    return widen(_mm256_maskz_loadu_epi16(m, static_cast<const std::uint16_t*>(p) + i));
  }
};

}  // namespace
}  // namespace strata::kernels::cpu::x86_avx512
