// Dot kernels of the unquantized formats (F32, F16, BF16; activations in the weight's own
// format), plus the F16/BF16 activation converters and row widening: widen V::lanes elements
// of each side to float and FMA, two accumulators per row (2·lanes elements per step) so a
// bandwidth-bound matvec is not latency-bound; the ragged end is summed in order.
#pragma once
#include "strata/kernels/cpu/scale_tables.hpp"
#include "strata/kernels/cpu/x86/hooks.hpp"
#include "strata/kernels/cpu/x86/vec.hpp"
#include "strata/quant/bf16.hpp"
#include "strata/quant/f16.hpp"
#include "strata/quant/f32.hpp"

namespace strata::kernels::cpu::x86 {
namespace {

inline float bits_to_f32(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Loader L<V>: elem_bytes, load(row, i) → elements i..i+lanes−1 as float, at(row, i) → element i.
template <class V>
struct f32_loader {
  static constexpr std::size_t elem_bytes = 4;
  static typename V::f load(const void* p, std::size_t i) noexcept { return V::load(static_cast<const float*>(p) + i); }
  static float at(const void* p, std::size_t i) noexcept { return static_cast<const float*>(p)[i]; }
};
template <class V>
struct f16_loader {
  static constexpr std::size_t elem_bytes = 2;
  static typename V::f load(const void* p, std::size_t i) noexcept {
    return V::load_f16(static_cast<const std::uint16_t*>(p) + i);
  }
  static float at(const void* p, std::size_t i) noexcept { return fp16_table.v[static_cast<const std::uint16_t*>(p)[i]]; }
};
template <class V>
struct bf16_loader {
  static constexpr std::size_t elem_bytes = 2;
  static typename V::f load(const void* p, std::size_t i) noexcept {
    return V::load_bf16(static_cast<const std::uint16_t*>(p) + i);
  }
  static float at(const void* p, std::size_t i) noexcept {
    return bits_to_f32(std::uint32_t(static_cast<const std::uint16_t*>(p)[i]) << 16);
  }
};

template <class V, template <class> class Loader, int R>
inline void dot_float(const void* w, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using L = Loader<V>;
  constexpr std::size_t W = V::lanes;
  const void* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = static_cast<const std::byte*>(av) + std::size_t(r) * stride;
  typename V::f acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = V::zero();
  std::size_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    for (std::size_t o = 0; o < 2 * W * L::elem_bytes; o += 64)
      prefetch_weights(static_cast<const std::byte*>(w) + i * L::elem_bytes, o);
    const typename V::f w0 = L::load(w, i), w1 = L::load(w, i + W);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      acc0[r] = V::fmadd(w0, L::load(a[r], i), acc0[r]);
      acc1[r] = V::fmadd(w1, L::load(a[r], i + W), acc1[r]);
    }
  }
  if (i + W <= n) {
    const typename V::f w0 = L::load(w, i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc0[r] = V::fmadd(w0, L::load(a[r], i), acc0[r]);
    i += W;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float tail = 0.0f;
    for (std::size_t j = i; j < n; ++j) tail += L::at(w, j) * L::at(a[r], j);
    out[r] = V::hsum(V::add(acc0[r], acc1[r])) + tail;
  }
}

template <class Fmt>
struct float_loader_of;
template <>
struct float_loader_of<quant::f32> {
  template <class V>
  using type = f32_loader<V>;
};
template <>
struct float_loader_of<quant::f16> {
  template <class V>
  using type = f16_loader<V>;
};
template <>
struct float_loader_of<quant::bf16> {
  template <class V>
  using type = bf16_loader<V>;
};

// Row dots of Fmt over traits V (x86/dot.hpp picks these up).
template <class Fmt>
  requires(std::is_same_v<Fmt, quant::f32> || std::is_same_v<Fmt, quant::f16> || std::is_same_v<Fmt, quant::bf16>)
struct row_dot<Fmt> : provided {
  template <class V, int R>
  static void run(const void* w, const void* a, std::size_t stride, float* out, std::size_t n) noexcept {
    dot_float<V, float_loader_of<Fmt>::template type, R>(w, a, stride, out, n);
  }
};

// ---- F16 / BF16 activations and rows (AVX2 code; the AVX-512 tiers inherit it) ----------

inline std::uint16_t f32_to_fp16(float f) noexcept {
  return std::uint16_t(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0));
}

inline std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return std::uint16_t((u >> 16) | 64u);
  return std::uint16_t((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
}

// 8 floats → 8 bfloat16 in the low 16 bits of each int32 lane (round to nearest even, NaN quieted).
inline __m256i f32_to_bf16_8(__m256 x) noexcept {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

struct f16_act : provided {
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* y = static_cast<std::uint16_t*>(out);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
  }
  static void dequant_row(const void* w, float* y, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f16_loader<v256>::load(w, i));
    for (; i < n; ++i) y[i] = f16_loader<v256>::at(w, i);
  }
};

struct bf16_act : provided {
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept {
    auto* y = static_cast<std::uint16_t*>(out);
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256i lo = f32_to_bf16_8(_mm256_loadu_ps(x + i)), hi = f32_to_bf16_8(_mm256_loadu_ps(x + i + 8));
      // vpackusdw packs within 128-bit lanes; restore element order across them.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8));
    }
    for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
  }
  static void dequant_row(const void* w, float* y, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, bf16_loader<v256>::load(w, i));
    for (; i < n; ++i) y[i] = bf16_loader<v256>::at(w, i);
  }
};

template <>
struct row_act<quant::f16> : f16_act {};
template <>
struct row_act<quant::bf16> : bf16_act {};
template <>
struct row_dequant<quant::f16> : f16_act {};
template <>
struct row_dequant<quant::bf16> : bf16_act {};

}  // namespace
}  // namespace strata::kernels::cpu::x86
