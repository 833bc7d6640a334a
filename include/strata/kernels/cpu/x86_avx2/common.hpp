// Helpers shared by the AVX2 (+FMA +F16C) kernels: horizontal sums, fp16 scalars, int8 dot
// building blocks and nibble/bit unpacking. Include only from a TU built with -mavx2 -mfma
// -mf16c (runtime/cpu/avx2_table.cpp); the AVX-512 tiers include it too for 256-bit tails.
//
// Everything here has internal linkage (anonymous namespace): the same helper compiled with
// AVX2 flags in one TU and AVX-512 flags in another must stay two functions, never one weak
// symbol the linker picks at random (see kernels/cpu/simd_kernels.hpp).
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "strata/kernels/cpu/scale_tables.hpp"
#include "strata/kernels/cpu/x86/vec.hpp"

namespace strata::kernels::cpu::x86_avx2 {
namespace {

using x86::bytes_of;
using x86::load_u32;
using x86::load_u64;
using x86::prefetch_weights;

// Activation row r of a batch whose rows are `stride` bytes apart, as blocks of type B.
template <class B>
inline const B* act_row(const void* a, std::size_t stride, int r) noexcept {
  return reinterpret_cast<const B*>(static_cast<const std::byte*>(a) + std::size_t(r) * stride);
}

inline float bits_to_f32(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// binary16 <-> binary32 with F16C; both match core/fp16.hpp bit for bit (round to nearest
// even, quiet NaN keeping the top payload bits, overflow to inf).
inline float fp16_to_f32(std::uint16_t h) noexcept { return _cvtsh_ss(h); }
// The same through the table: one load, and a broadcast from memory needs no shuffle port.
inline const float* fp16_ptr(std::uint16_t h) noexcept { return &fp16_table.v[h]; }
inline std::uint16_t f32_to_fp16(float f) noexcept {
  return std::uint16_t(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0));
}

// Fixed reduction trees, so every caller (dot_row, dot_rows_4) rounds identically.
inline float hsum(__m256 v) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax(__m256 v) noexcept {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline int hsum_i32(__m256i v) noexcept {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

inline __m256 abs_ps(__m256 v) noexcept { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }

// Σ u·s over 4 byte pairs per int32 lane (u unsigned, s signed). vpmaddubsw saturates its
// int16 pair sums, so callers keep 2·max|u|·max|s| ≤ 32767 (e.g. 2·128·127 = 32512).
inline __m256i mul_sum_u8s8(__m256i u, __m256i s) noexcept {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// Signed × signed via |w| and a·sign(w): exact while |w| ≤ 128 and |a| ≤ 127.
inline __m256i mul_sum_s8s8(__m256i w, __m256i a) noexcept {
  return mul_sum_u8s8(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
}

// 16 bytes of packed nibbles q[j] | q[j+16] << 4 → 32 bytes q[0..31] (the legacy-quant and
// IQ4 layout: low nibbles are the first half of the block).
// vbroadcasti128 (a pure load) and vpsrlvd keep this off the shuffle port.
inline __m256i nibbles32(const std::uint8_t* p) noexcept {
  const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi32(t, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}

// Byte j = 0xFF where bit j of `bits` is set, else 0 (Q5_0/Q5_1 high bits).
inline __m256i bits_to_bytes(std::uint32_t bits) noexcept {
  // Byte j takes byte j/8 of the word, then tests its own bit j%8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(std::int64_t(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// vpshufb masks that broadcast one int16 lane of a 128-bit half (the same in both halves):
// i16_lane(j) → lane j everywhere; i16_lane_pair(j) → lane j in the low half, j+1 in the high.
inline __m256i i16_lane(int j) noexcept { return _mm256_set1_epi16(short((2 * j + 1) << 8 | 2 * j)); }
inline __m256i i16_lane_pair(int j) noexcept {
  return _mm256_set_m128i(_mm_set1_epi16(short((2 * j + 3) << 8 | (2 * j + 2))),
                          _mm_set1_epi16(short((2 * j + 1) << 8 | 2 * j)));
}

// Bits B..B+W-1 of every byte moved to bits T..T+W-1 (other bits cleared). Shifting whole
// 16-bit lanes is safe: the kept bits of each byte come from that same byte, as both fields
// lie within bits 0..7.
template <int B, int T, int W = 1>
inline __m256i move_bits(__m256i v) noexcept {
  static_assert(B >= 0 && T >= 0 && B + W <= 8 && T + W <= 8);
  const __m256i mask = _mm256_set1_epi8(char(((1 << W) - 1) << T));
  if constexpr (B > T)
    return _mm256_and_si256(_mm256_srli_epi16(v, B - T), mask);
  else if constexpr (B < T)
    return _mm256_and_si256(_mm256_slli_epi16(v, T - B), mask);
  else
    return _mm256_and_si256(v, mask);
}

}  // namespace
}  // namespace strata::kernels::cpu::x86_avx2
