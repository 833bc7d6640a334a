// ISA traits for the x86 kernels: one kernel template per operation is written against these
// names and instantiated with v256 (AVX2 + FMA + F16C) or v512<Vnni> (AVX-512 F/BW/VL/DQ, with
// or without VNNI) in the tier's own translation unit (runtime/cpu/*_table.cpp).
//
// Everything here has internal linkage (anonymous namespace): the same helper compiled with
// AVX2 flags in one TU and AVX-512 flags in another must stay two functions, never one weak
// symbol the linker picks at random (see kernels/cpu/simd_kernels.hpp).
//
// Integer dot products: dot4(acc, u, s) adds Σ u·s over 4 byte pairs to each int32 lane (u
// unsigned, s signed): one vpdpbusd with VNNI, else vpmaddubsw + vpmaddwd, whose int16 pair
// sums must stay ≤ 32767 (callers keep 2·max|u|·max|s| below that). Both give the same exact
// int32 result, so kernels built on dot4 agree bit for bit across tiers.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "strata/kernels/cpu/isa.hpp"

namespace strata::kernels::cpu::x86 {
namespace {

// Raw bytes of a block member (a std::array or fp16), without calling any member function.
template <class T>
inline const std::uint8_t* bytes_of(const T& member) noexcept {
  return reinterpret_cast<const std::uint8_t*>(&member);
}

inline std::uint32_t load_u32(const void* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline std::uint64_t load_u64(const void* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Software prefetch of the weight stream, `weight_prefetch_distance` bytes ahead. Decoding
// reads each weight once from DRAM, and a quantized row is consumed at ≈ 15 GB/s per core
// (its compute rate from L2); without help the hardware prefetchers keep too few misses in
// flight for that (measured on a Xeon VM, 2 cores, DRAM-resident 4096-wide matrices:
// 9.7 → 15 GB/s for Q4_0, 11.5 → 15-19 GB/s for Q4_K, 12.6 → 19-24 for Q8_0 with 2-8 KiB).
// 4 KiB ≈ 150-200 ns of DRAM latency × 15 GB/s, with margin. A prefetch never faults, even
// past the end of a matrix.
inline constexpr std::size_t weight_prefetch_distance = 4096;
inline void prefetch_weights(const void* p, std::size_t offset = 0) noexcept {
  _mm_prefetch(static_cast<const char*>(p) + weight_prefetch_distance + offset, _MM_HINT_T0);
}

// Fixed reduction trees, so every caller rounds identically.
inline float hsum128(__m128 s) noexcept {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax128(__m128 s) noexcept {
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 256-bit traits: AVX2 + FMA + F16C.
struct v256 {
  static constexpr int lanes = 8;  // float / int32 lanes
  static constexpr bool vnni = false;
  using f = __m256;
  using i = __m256i;

  static f zero() noexcept { return _mm256_setzero_ps(); }
  static f set1(float x) noexcept { return _mm256_set1_ps(x); }
  static f load(const float* p) noexcept { return _mm256_loadu_ps(p); }
  static void store(float* p, f v) noexcept { _mm256_storeu_ps(p, v); }
  static f bcast(const float* p) noexcept { return _mm256_broadcast_ss(p); }
  static f add(f a, f b) noexcept { return _mm256_add_ps(a, b); }
  static f sub(f a, f b) noexcept { return _mm256_sub_ps(a, b); }
  static f mul(f a, f b) noexcept { return _mm256_mul_ps(a, b); }
  static f max(f a, f b) noexcept { return _mm256_max_ps(a, b); }
  static f fmadd(f a, f b, f c) noexcept { return _mm256_fmadd_ps(a, b, c); }  // a·b + c
  static f fnmadd(f a, f b, f c) noexcept { return _mm256_fnmadd_ps(a, b, c); }  // c − a·b
  // binary16 → binary32, exact (vcvtph2ps).
  static f load_f16(const void* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  // bfloat16 → binary32 (exact: the top half of the float's bits).
  static f load_bf16(const void* p) noexcept {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))), 16));
  }
  static f cvt(i v) noexcept { return _mm256_cvtepi32_ps(v); }
  // Lane k of v in every lane (a register shuffle: no store-to-load round trip).
  static f lane(f v, int k) noexcept { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(k)); }
  static float hsum(f v) noexcept {
    return hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
  }
  static float hmax(f v) noexcept {
    return hmax128(_mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
  }
  // Lane k of the result = Σ lanes of a[k] (8 vectors in, one out), by a fixed tree.
  static f reduce(const f* a) noexcept {
    const f s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
    const f s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
    const f s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
    // s0123 = [a0 a1 a2 a3 (low halves) | a0 a1 a2 a3 (high halves)], same for s4567.
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
  }
  // in: 16 rows of `lanes` floats (row-major); out: `lanes` rows of 16 floats (the transpose).
  static void transpose_16(const float* in, float* out) noexcept {
    f r[16], t[16];
    for (int k = 0; k < 16; ++k) r[k] = load(in + 8 * k);
    transpose_16_regs(r, t);
    for (int k = 0; k < 16; ++k) store(out + 8 * k, t[k]);  // t[2c + h]: out row c, columns 8h..
  }
  // in: 16 rows of 8 floats (keys); out[2c + h] = element c of keys 8h..8h+7 (the transpose,
  // in registers when inlined).
  [[gnu::always_inline]] static void transpose_16_regs(const f* in, f* out) noexcept {
    for (int half = 0; half < 2; ++half) {  // rows 8·half.. → out[2c + half]
      const f* r = in + 8 * half;
      const f t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const f t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const f t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const f t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const f s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const f s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const f s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const f s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      f* o = out + half;
      o[0 * 2] = _mm256_permute2f128_ps(s0, s4, 0x20);
      o[1 * 2] = _mm256_permute2f128_ps(s1, s5, 0x20);
      o[2 * 2] = _mm256_permute2f128_ps(s2, s6, 0x20);
      o[3 * 2] = _mm256_permute2f128_ps(s3, s7, 0x20);
      o[4 * 2] = _mm256_permute2f128_ps(s0, s4, 0x31);
      o[5 * 2] = _mm256_permute2f128_ps(s1, s5, 0x31);
      o[6 * 2] = _mm256_permute2f128_ps(s2, s6, 0x31);
      o[7 * 2] = _mm256_permute2f128_ps(s3, s7, 0x31);
    }
  }
  // blend: b where mask (all ones from lt) is set, else a. lt: lanes where a < b.
  static f blend(f a, f b, f mask) noexcept { return _mm256_blendv_ps(a, b, mask); }
  static f lt(f a, f b) noexcept { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static f iota() noexcept { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }
  // round to nearest even, to int32, and int32 bits as float (for exp's 2^n).
  static f round(f v) noexcept { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static i cvt_i(f v) noexcept { return _mm256_cvtps_epi32(v); }
  static f as_f(i v) noexcept { return _mm256_castsi256_ps(v); }

  // Integer side.
  static i zero_i() noexcept { return _mm256_setzero_si256(); }
  static i load_i(const void* p) noexcept { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static i set1_i8(int x) noexcept { return _mm256_set1_epi8(char(x)); }
  static i set1_i32(int x) noexcept { return _mm256_set1_epi32(x); }
  static i bcast_i32(const void* p) noexcept { return _mm256_set1_epi32(int(load_u32(p))); }
  static i and_i(i a, i b) noexcept { return _mm256_and_si256(a, b); }
  static i or_i(i a, i b) noexcept { return _mm256_or_si256(a, b); }
  static i xor_i(i a, i b) noexcept { return _mm256_xor_si256(a, b); }
  template <int N>
  static i srli16(i a) noexcept { return _mm256_srli_epi16(a, N); }
  template <int N>
  static i slli16(i a) noexcept { return _mm256_slli_epi16(a, N); }
  template <int N>
  static i srli32(i a) noexcept { return _mm256_srli_epi32(a, N); }
  template <int N>
  static i slli32(i a) noexcept { return _mm256_slli_epi32(a, N); }
  static i add32(i a, i b) noexcept { return _mm256_add_epi32(a, b); }
  static i sub32(i a, i b) noexcept { return _mm256_sub_epi32(a, b); }
  static i mullo32(i a, i b) noexcept { return _mm256_mullo_epi32(a, b); }
  static i madd16(i a, i b) noexcept { return _mm256_madd_epi16(a, b); }
  static i maddubs(i u, i s) noexcept { return _mm256_maddubs_epi16(u, s); }  // int16 pair sums, saturating
  static i dot4(i acc, i u, i s) noexcept {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  static i shuffle8(i table, i idx) noexcept { return _mm256_shuffle_epi8(table, idx); }  // per 128-bit lane

  // 32-byte units (a 32-element block, or a K-quant sub-block of 32): one per vector here.
  static constexpr int units = 1;
  // The vector of units k = 0..units−1, unit.template operator()<k>() each giving 32 bytes.
  template <class Unit>
  static i from_units(Unit unit) noexcept { return unit.template operator()<0>(); }
  static f widen(__m256 v) noexcept { return v; }
  static i widen_i(__m256i v) noexcept { return v; }
  static f bcast_units(const float* const* p) noexcept { return _mm256_broadcast_ss(p[0]); }
  // int16 scale of a 32-element sub-block (sc: 8 int16 scales in the low 128 bits) over unit u.
  static i scales_by_unit(__m256i sc, int u) noexcept {
    return _mm256_shuffle_epi8(_mm256_permute2x128_si256(sc, sc, 0x00), _mm256_set1_epi16(short((2 * u + 1) << 8 | 2 * u)));
  }
  // int16 scales of the two 16-element sub-blocks 2u, 2u + 1 (sc: 16 int16 scales) over unit u.
  static i scales_by_half_unit(__m256i sc, int u) noexcept {
    const __m256i h = u >= 4 ? _mm256_permute2x128_si256(sc, sc, 0x11) : _mm256_permute2x128_si256(sc, sc, 0x00);
    const int j = (2 * u) % 8;
    return _mm256_shuffle_epi8(h, _mm256_set_m128i(_mm_set1_epi16(short((2 * j + 3) << 8 | (2 * j + 2))),
                                                   _mm_set1_epi16(short((2 * j + 1) << 8 | 2 * j))));
  }
  static i abs8(i a) noexcept { return _mm256_abs_epi8(a); }
  static i sign8(i a, i w) noexcept { return _mm256_sign_epi8(a, w); }  // a·sign(w) per byte
  static i u8_to_i32(const void* p) noexcept {  // `lanes` bytes, zero-extended
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
  }
  static i i8_to_i32(const void* p) noexcept {  // `lanes` bytes, sign-extended
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
  }
};

// 512-bit traits: AVX-512 F/BW/VL/DQ (+ VNNI when Vnni).
template <bool Vnni>
struct v512 {
  static constexpr int lanes = 16;
  static constexpr bool vnni = Vnni;
  using f = __m512;
  using i = __m512i;

  static f zero() noexcept { return _mm512_setzero_ps(); }
  static f set1(float x) noexcept { return _mm512_set1_ps(x); }
  static f load(const float* p) noexcept { return _mm512_loadu_ps(p); }
  static void store(float* p, f v) noexcept { _mm512_storeu_ps(p, v); }
  static f bcast(const float* p) noexcept { return _mm512_set1_ps(*p); }
  static f add(f a, f b) noexcept { return _mm512_add_ps(a, b); }
  static f sub(f a, f b) noexcept { return _mm512_sub_ps(a, b); }
  static f mul(f a, f b) noexcept { return _mm512_mul_ps(a, b); }
  static f max(f a, f b) noexcept { return _mm512_max_ps(a, b); }
  static f fmadd(f a, f b, f c) noexcept { return _mm512_fmadd_ps(a, b, c); }
  static f fnmadd(f a, f b, f c) noexcept { return _mm512_fnmadd_ps(a, b, c); }
  static f load_f16(const void* p) noexcept {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  static f load_bf16(const void* p) noexcept {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p))), 16));
  }
  static f cvt(i v) noexcept { return _mm512_cvtepi32_ps(v); }
  static f lane(f v, int k) noexcept { return _mm512_permutexvar_ps(_mm512_set1_epi32(k), v); }
  static float hsum(f v) noexcept {
    return v256::hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
  }
  static float hmax(f v) noexcept {
    return v256::hmax(_mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
  }
  // Lane k of the result = Σ lanes of a[k] (16 vectors in, one out), by a fixed tree: each
  // step adds pairs of vectors while halving the lanes each one still has to sum.
  static f reduce(const f* a) noexcept {
    f s[8], t[4], u[2];
    // Step 1: s[j] holds a[2j] and a[2j+1] interleaved by pairs of lanes (8 partial sums each).
    for (int j = 0; j < 8; ++j)
      s[j] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * j], a[2 * j + 1]), _mm512_unpackhi_ps(a[2 * j], a[2 * j + 1]));
    // Step 2: per 128-bit lane, [x0 y0 x1 y1] + [x2 y2 x3 y3] → 4 vectors (4 sums each).
    for (int j = 0; j < 4; ++j)
      t[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s[2 * j]), _mm512_castps_pd(s[2 * j + 1]))),
                           _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s[2 * j]), _mm512_castps_pd(s[2 * j + 1]))));
    // Each 128-bit lane of t[j] now holds one partial sum of a[4j..4j+3] in order.
    // Step 3: fold the 4 x 128-bit lanes: (0,2)+(1,3) pairs, then again.
    for (int j = 0; j < 2; ++j)
      u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    // u[j]: 128-bit lanes [t2j(0+1), t2j(2+3), t2j+1(0+1), t2j+1(2+3)].
    return _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // in: 16 rows of 16 floats; out: the transpose.
  static void transpose_16(const float* in, float* out) noexcept {
    f r[16], t[16];
    for (int k = 0; k < 16; ++k) r[k] = load(in + 16 * k);
    transpose_16_regs(r, t);
    for (int k = 0; k < 16; ++k) store(out + 16 * k, t[k]);
  }
  // in: 16 rows of 16 floats; out: the transpose (in registers when inlined). Per 128-bit
  // lane a 4×4 transpose of each group of four rows (unpack, shuffle), then the lanes gathered
  // across the groups.
  [[gnu::always_inline]] static void transpose_16_regs(const f* r, f* out) noexcept {
    f sg[16];
    for (int g = 0; g < 4; ++g) {  // rows 4g..4g+3: sg[4g + j] lane l = rows' element 4l + j
      const f t0 = _mm512_unpacklo_ps(r[4 * g], r[4 * g + 1]), t1 = _mm512_unpackhi_ps(r[4 * g], r[4 * g + 1]);
      const f t2 = _mm512_unpacklo_ps(r[4 * g + 2], r[4 * g + 3]), t3 = _mm512_unpackhi_ps(r[4 * g + 2], r[4 * g + 3]);
      sg[4 * g + 0] = _mm512_shuffle_ps(t0, t2, 0x44);
      sg[4 * g + 1] = _mm512_shuffle_ps(t0, t2, 0xEE);
      sg[4 * g + 2] = _mm512_shuffle_ps(t1, t3, 0x44);
      sg[4 * g + 3] = _mm512_shuffle_ps(t1, t3, 0xEE);
    }
    for (int j = 0; j < 4; ++j) {  // column 4l + j = lane l of sg[j], sg[4 + j], sg[8 + j], sg[12 + j]
      const f ab_lo = _mm512_shuffle_f32x4(sg[j], sg[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
      const f ab_hi = _mm512_shuffle_f32x4(sg[j], sg[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
      const f cd_lo = _mm512_shuffle_f32x4(sg[8 + j], sg[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
      const f cd_hi = _mm512_shuffle_f32x4(sg[8 + j], sg[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
      out[0 + j] = _mm512_shuffle_f32x4(ab_lo, cd_lo, _MM_SHUFFLE(2, 0, 2, 0));
      out[4 + j] = _mm512_shuffle_f32x4(ab_lo, cd_lo, _MM_SHUFFLE(3, 1, 3, 1));
      out[8 + j] = _mm512_shuffle_f32x4(ab_hi, cd_hi, _MM_SHUFFLE(2, 0, 2, 0));
      out[12 + j] = _mm512_shuffle_f32x4(ab_hi, cd_hi, _MM_SHUFFLE(3, 1, 3, 1));
    }
  }
  static f blend(f a, f b, f mask) noexcept {
    return _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(mask)), a, b);
  }
  static f lt(f a, f b) noexcept {
    return _mm512_castsi512_ps(_mm512_movm_epi32(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)));
  }
  static f iota() noexcept { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static f round(f v) noexcept { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static i cvt_i(f v) noexcept { return _mm512_cvtps_epi32(v); }
  static f as_f(i v) noexcept { return _mm512_castsi512_ps(v); }

  static i zero_i() noexcept { return _mm512_setzero_si512(); }
  static i load_i(const void* p) noexcept { return _mm512_loadu_si512(p); }
  static i set1_i8(int x) noexcept { return _mm512_set1_epi8(char(x)); }
  static i set1_i32(int x) noexcept { return _mm512_set1_epi32(x); }
  static i bcast_i32(const void* p) noexcept { return _mm512_set1_epi32(int(load_u32(p))); }
  static i and_i(i a, i b) noexcept { return _mm512_and_si512(a, b); }
  static i or_i(i a, i b) noexcept { return _mm512_or_si512(a, b); }
  static i xor_i(i a, i b) noexcept { return _mm512_xor_si512(a, b); }
  template <int N>
  static i srli16(i a) noexcept { return _mm512_srli_epi16(a, N); }
  template <int N>
  static i slli16(i a) noexcept { return _mm512_slli_epi16(a, N); }
  template <int N>
  static i srli32(i a) noexcept { return _mm512_srli_epi32(a, N); }
  template <int N>
  static i slli32(i a) noexcept { return _mm512_slli_epi32(a, N); }
  static i add32(i a, i b) noexcept { return _mm512_add_epi32(a, b); }
  static i sub32(i a, i b) noexcept { return _mm512_sub_epi32(a, b); }
  static i mullo32(i a, i b) noexcept { return _mm512_mullo_epi32(a, b); }
  static i madd16(i a, i b) noexcept { return _mm512_madd_epi16(a, b); }
  static i maddubs(i u, i s) noexcept { return _mm512_maddubs_epi16(u, s); }
  static i shuffle8(i table, i idx) noexcept { return _mm512_shuffle_epi8(table, idx); }

  static constexpr int units = 2;
  template <class Unit>
  static i from_units(Unit unit) noexcept {
    return _mm512_inserti64x4(_mm512_castsi256_si512(unit.template operator()<0>()), unit.template operator()<1>(), 1);
  }
  static f widen(__m256 v) noexcept { return _mm512_zextps256_ps512(v); }
  static i widen_i(__m256i v) noexcept { return _mm512_zextsi256_si512(v); }
  static f bcast_units(const float* const* p) noexcept {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_broadcast_ss(p[0])), _mm256_broadcast_ss(p[1]), 1);
  }
  static i scales_by_unit(__m256i sc, int u) noexcept {
    const __m512i pick =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(short(u))), _mm256_set1_epi16(short(u + 1)), 1);
    return _mm512_permutexvar_epi16(pick, _mm512_castsi256_si512(sc));
  }
  static i scales_by_half_unit(__m256i sc, int u) noexcept {
    const int j = 2 * u;
    const __m512i pick = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(short(j + 1)), _mm_set1_epi16(short(j)))),
        _mm256_set_m128i(_mm_set1_epi16(short(j + 3)), _mm_set1_epi16(short(j + 2))), 1);
    return _mm512_permutexvar_epi16(pick, _mm512_castsi256_si512(sc));
  }
  static i dot4(i acc, i u, i s) noexcept {
    if constexpr (Vnni)
      return _mm512_dpbusd_epi32(acc, u, s);
    else
      return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
  }
  static i abs8(i a) noexcept { return _mm512_abs_epi8(a); }
  // a·sign(w) per byte, except a (not 0) where w = 0; callers pair it with |w| = 0 there.
  static i sign8(i a, i w) noexcept {
    return _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
  }
  static i u8_to_i32(const void* p) noexcept {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  static i i8_to_i32(const void* p) noexcept {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
};

// The traits of an x86 tier.
template <isa Isa>
struct vec_of;
template <>
struct vec_of<isa::avx2> {
  using type = v256;
};
template <>
struct vec_of<isa::avx512> {
  using type = v512<false>;
};
template <>
struct vec_of<isa::avx512_vnni> {
  using type = v512<true>;
};
template <isa Isa>
using vec_for = typename vec_of<Isa>::type;

// e^x for x ≤ 0 (softmax weights), relative error ≈ 2 ulp: n = round(x·log2 e), r = x − n·ln 2
// in two parts (Cody-Waite), e^r by Cephes' expf polynomial, times 2^n through the exponent
// bits. Lanes below −87.3 (including −inf) give 0 rather than a subnormal.
template <class V>
inline typename V::f exp_nonpositive(typename V::f x) noexcept {
  using f = typename V::f;
  const f tiny = V::lt(x, V::set1(-87.3f));
  x = V::max(x, V::set1(-87.3f));
  const f n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  f r = V::fnmadd(n, V::set1(0.693359375f), x);
  r = V::fnmadd(n, V::set1(-2.12194440e-4f), r);
  f p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  const f scale = V::as_f(V::template slli32<23>(V::add32(V::cvt_i(n), V::set1_i32(127))));
  return V::blend(V::mul(p, scale), V::zero(), tiny);
}

}  // namespace
}  // namespace strata::kernels::cpu::x86
