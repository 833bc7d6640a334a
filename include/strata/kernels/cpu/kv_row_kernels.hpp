// Row kernels of the KV cache: narrow rows to f16 on append (f16 cache rows, the ring), widen f16
// rows, dot a query with a decoded key row and add a weighted value row. The f16-cache path keeps its own sequential loops (its numerics are pinned by the
// llama.cpp fidelity tests); these use 8 independent lanes reduced in a fixed order, and the
// scalar and AVX2 versions perform the same float operations, so they agree bit for bit.
#pragma once
#include <cstddef>

#include "strata/core/fp16.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STRATA_KV_ROW_AVX2 1
#include <immintrin.h>
#endif

namespace strata::kernels::cpu::kv_rows {

// ---- scalar reference -------------------------------------------------------------------
inline void widen_f16_scalar(const fp16* s, float* d, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) d[i] = to_float(s[i]);
}
inline void narrow_f16_scalar(const float* s, fp16* d, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) d[i] = to_fp16(s[i]);
}
// n is a multiple of 8 (head dims are multiples of 16).
inline float dot_scalar(const float* a, const float* b, std::size_t n) noexcept {
  float l[8] = {};
  for (std::size_t i = 0; i < n; i += 8)
    for (std::size_t k = 0; k < 8; ++k) l[k] += a[i + k] * b[i + k];
  return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}
inline void axpy_scalar(float w, const float* x, float* y, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) y[i] += w * x[i];
}

#if defined(STRATA_KV_ROW_AVX2)
// ---- AVX2 / F16C (per-function targets; chosen at run time) -------------------------------
// vcvtph2ps is exact, like to_float (the software widening costs ~5 ns per element).
__attribute__((target("avx,f16c"))) inline void widen_f16_f16c(const fp16* s, float* d, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = to_float(s[i]);
}
// vcvtps2ph rounds to nearest even and keeps a NaN's top payload bits (quieted), like to_fp16.
__attribute__((target("avx,f16c"))) inline void narrow_f16_f16c(const float* s, fp16* d, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) d[i] = to_fp16(s[i]);
}
__attribute__((target("avx"))) inline float dot_avx(const float* a, const float* b, std::size_t n) noexcept {
  __m256 acc = _mm256_setzero_ps();
  for (std::size_t i = 0; i < n; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  x = _mm_hadd_ps(x, x);
  x = _mm_hadd_ps(x, x);
  return _mm_cvtss_f32(x);
}
__attribute__((target("avx"))) inline void axpy_avx(float w, const float* x, float* y, std::size_t n) noexcept {
  const __m256 vw = _mm256_set1_ps(w);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(vw, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i) y[i] += w * x[i];
}
#endif

struct kernels {
  void (*widen_f16)(const fp16*, float*, std::size_t) noexcept;
  void (*narrow_f16)(const float*, fp16*, std::size_t) noexcept;
  float (*dot)(const float*, const float*, std::size_t) noexcept;
  void (*axpy)(float, const float*, float*, std::size_t) noexcept;
};

inline kernels reference() noexcept { return {widen_f16_scalar, narrow_f16_scalar, dot_scalar, axpy_scalar}; }

// The fastest set this CPU runs; chosen once per cache.
inline kernels best() noexcept {
#if defined(STRATA_KV_ROW_AVX2)
  // AVX2 stands in for F16C, which every AVX2 CPU has (clang 14 cannot test "f16c" here).
  if (__builtin_cpu_supports("avx2")) return {widen_f16_f16c, narrow_f16_f16c, dot_avx, axpy_avx};
#endif
  return reference();
}

}  // namespace strata::kernels::cpu::kv_rows
