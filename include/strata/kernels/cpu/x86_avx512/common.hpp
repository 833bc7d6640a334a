// Helpers shared by the AVX-512 kernels (F/BW/VL/DQ, optionally VNNI). Kernels here are
// templates on the tier (isa::avx512 or isa::avx512_vnni): each tier's TU instantiates its
// own copies with its own flags, and the VNNI instruction sits in `if constexpr` branches the
// plain avx512 TU never instantiates. Internal linkage throughout, as in x86_avx2/common.hpp
// (whose 256-bit helpers these kernels use for tails).
#pragma once
#include <immintrin.h>

#include "strata/kernels/cpu/isa.hpp"
#include "strata/kernels/cpu/x86_avx2/common.hpp"

namespace strata::kernels::cpu::x86_avx512 {
namespace {

using x86_avx2::act_row;
using x86_avx2::bytes_of;
using x86_avx2::fp16_to_f32;
using x86_avx2::load_u32;
using x86_avx2::load_u64;

template <isa Isa>
concept avx512_tier = Isa == isa::avx512 || Isa == isa::avx512_vnni;

inline float hsum(__m512 v) noexcept {
  return x86_avx2::hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// acc + Σ u·s over 4 byte pairs per int32 lane (u unsigned, s signed): one vpdpbusd with
// VNNI, else vpmaddubsw + vpmaddwd (whose int16 pair sums must stay ≤ 32767, as in AVX2).
template <isa Isa>
inline __m512i dot_u8s8(__m512i acc, __m512i u, __m512i s) noexcept {
  if constexpr (Isa == isa::avx512_vnni)
    return _mm512_dpbusd_epi32(acc, u, s);
  else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}
template <isa Isa>
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) noexcept {
  if constexpr (Isa == isa::avx512_vnni)
    return _mm256_dpbusd_epi32(acc, u, s);
  else
    return _mm256_add_epi32(acc, x86_avx2::mul_sum_u8s8(u, s));
}

// a·sign(w) for signed × signed dots (AVX-512 has no vpsignb): negate a where w < 0. Where
// w = 0 the |w| operand is 0, so a's value there does not matter.
inline __m512i apply_sign(__m512i a, __m512i w) noexcept {
  return _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
}

// 2 × 16 bytes of packed nibbles (two legacy blocks) → 64 codes: block 0's 32 then block 1's.
inline __m512i nibbles64(const std::uint8_t* p0, const std::uint8_t* p1) noexcept {
  const __m512i t = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0)))),
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p1))), 1);
  // Lanes [q0, q0, q1, q1] → [q0, q0 >> 4, q1, q1 >> 4], low nibble of each byte.
  return _mm512_and_si512(_mm512_srlv_epi64(t, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
}

// Two 32-byte rows at p0, p1 → one register (p0 low).
inline __m512i load2x256(const void* p0, const void* p1) noexcept {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(p0))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(p1)), 1);
}

// int16 lane selectors for vpermw: 16 lanes of j then 16 of j + 1 (sub-blocks of 32), or
// 8 lanes each of j, j+1, j+2, j+3 (sub-blocks of 16).
inline __m512i i16_pick_2x16(int j) noexcept {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(short(j))), _mm256_set1_epi16(short(j + 1)), 1);
}
inline __m512i i16_pick_4x8(int j) noexcept {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(short(j + 1)), _mm_set1_epi16(short(j)))),
      _mm256_set_m128i(_mm_set1_epi16(short(j + 3)), _mm_set1_epi16(short(j + 2))), 1);
}

// Bits B..B+W-1 of every byte moved to bits T..T+W-1 (see x86_avx2::move_bits).
template <int B, int T, int W = 1>
inline __m512i move_bits(__m512i v) noexcept {
  static_assert(B >= 0 && T >= 0 && B + W <= 8 && T + W <= 8);
  const __m512i mask = _mm512_set1_epi8(char(((1 << W) - 1) << T));
  if constexpr (B > T)
    return _mm512_and_si512(_mm512_srli_epi16(v, B - T), mask);
  else if constexpr (B < T)
    return _mm512_and_si512(_mm512_slli_epi16(v, T - B), mask);
  else
    return _mm512_and_si512(v, mask);
}

}  // namespace
}  // namespace strata::kernels::cpu::x86_avx512
