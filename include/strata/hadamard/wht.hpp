// Fast Walsh–Hadamard transform in natural (Sylvester) order, normalized by 1/√n so that it is
// orthonormal and its own inverse (Ĥ·Ĥ = I). Used by TurboQuant to rotate KV vectors and
// queries (arXiv:2504.19874 §1.6 of ../shared/docs/spec/turboquant.md).
// fwht_reference is the scalar definition; fwht<N> is the fast path for n = 16..512 (SIMD where
// the compiler targets AVX2 or SSE2); fwht(span) dispatches on the size once per call.
#pragma once
#include <bit>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include "strata/core/error.hpp"

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace strata::hadamard {

// Sizes with an unrolled fast path (the power-of-two segment sizes TurboQuant uses).
inline constexpr std::size_t min_fast_size = 16;
inline constexpr std::size_t max_fast_size = 512;

// Scalar reference: log2(n) butterfly stages (n·log2(n) adds), fp32 accumulation, then 1/√n.
inline void fwht_reference(std::span<float> x) {
  const std::size_t n = x.size();
  if (n == 0 || !std::has_single_bit(n)) throw error("fwht: size " + std::to_string(n) + " is not a power of two");
  for (std::size_t h = 1; h < n; h *= 2)
    for (std::size_t i = 0; i < n; i += 2 * h)
      for (std::size_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = 1.0f / std::sqrt(float(n));
  for (float& v : x) v *= s;
}

namespace detail {

// One butterfly stage with half-width H over n elements. For H ≥ 8 the inner loop runs over
// contiguous lanes; smaller H are done in scalar (they are 3 of log2(n) stages).
template <std::size_t N, std::size_t H>
inline void butterfly_stage(float* x) noexcept {
  for (std::size_t i = 0; i < N; i += 2 * H) {
    float* a = x + i;
    float* b = x + i + H;
    if constexpr (H >= 8) {
#if defined(__AVX2__)
      for (std::size_t j = 0; j < H; j += 8) {
        const __m256 va = _mm256_loadu_ps(a + j), vb = _mm256_loadu_ps(b + j);
        _mm256_storeu_ps(a + j, _mm256_add_ps(va, vb));
        _mm256_storeu_ps(b + j, _mm256_sub_ps(va, vb));
      }
      continue;
#elif defined(__SSE2__)
      for (std::size_t j = 0; j < H; j += 4) {
        const __m128 va = _mm_loadu_ps(a + j), vb = _mm_loadu_ps(b + j);
        _mm_storeu_ps(a + j, _mm_add_ps(va, vb));
        _mm_storeu_ps(b + j, _mm_sub_ps(va, vb));
      }
      continue;
#endif
    }
    for (std::size_t j = 0; j < H; ++j) {
      const float va = a[j], vb = b[j];
      a[j] = va + vb;
      b[j] = va - vb;
    }
  }
}

template <std::size_t N, std::size_t H = 1>
inline void butterfly_stages(float* x) noexcept {
  if constexpr (H < N) {
    butterfly_stage<N, H>(x);
    butterfly_stages<N, 2 * H>(x);
  }
}

}  // namespace detail

// Fast path for a compile-time size; the same additions in the same order as fwht_reference,
// so results are bit-identical to it (tested).
template <std::size_t N>
inline void fwht(float* x) noexcept {
  static_assert(std::has_single_bit(N) && N >= min_fast_size && N <= max_fast_size);
  detail::butterfly_stages<N>(x);
  const float s = 1.0f / std::sqrt(float(N));
  for (std::size_t i = 0; i < N; ++i) x[i] *= s;
}

// Runtime size: the fast path for 16..512, the reference otherwise (any power of two).
inline void fwht(std::span<float> x) {
  switch (x.size()) {
    case 16: return fwht<16>(x.data());
    case 32: return fwht<32>(x.data());
    case 64: return fwht<64>(x.data());
    case 128: return fwht<128>(x.data());
    case 256: return fwht<256>(x.data());
    case 512: return fwht<512>(x.data());
    default: return fwht_reference(x);
  }
}

}  // namespace strata::hadamard
