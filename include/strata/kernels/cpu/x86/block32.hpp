// Dot kernels of the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL,
// MXFP4) against Q8_0 / Q8_1 activations. A format supplies only an unpacker (its codes as 32
// int8 in element order, its scale, and for the "_1" formats its min); the driver does the
// integer dot per block (vpdpbusd with VNNI) and the d_w·d_a scaling per block, like ggml.
// V::units blocks share a vector (one with AVX2, two with AVX-512); consecutive steps alternate
// between two accumulators per row (two FMA chains), and rows never interact, so out[r] is
// bit-identical for every R.
//
// Unpacker U:
//   using block, act_block              weight block; q8_0::block or q8_1::block
//   static constexpr bool is_signed     codes in −128..127 (else 0..31, fed to vpmaddubsw as u8)
//   static constexpr bool has_min       x = d·q + m; adds m·s per block (s from the Q8_1 act)
//   codes(const block&) → __m256i       32 codes, element order
//   scale(const block&) → const float*  d (x = d·code), as a pointer into a scale table
//   min(const block&) → const float*    m, has_min only
//
// Port budget (why it looks like this): scales come from scale_tables.hpp as broadcasts from
// memory and the nibbles from vbroadcasti128 + vpsrlvd, so nothing queues on the shuffle port,
// which converting fp16 scales in registers saturated.
#pragma once
#include "strata/kernels/cpu/scale_tables.hpp"
#include "strata/kernels/cpu/x86/hooks.hpp"
#include "strata/kernels/cpu/x86/vec.hpp"
#include "strata/quant/iq4_nl.hpp"
#include "strata/quant/mxfp4.hpp"
#include "strata/quant/q4_0.hpp"
#include "strata/quant/q4_1.hpp"
#include "strata/quant/q5_0.hpp"
#include "strata/quant/q5_1.hpp"
#include "strata/quant/q8_0.hpp"
#include "strata/quant/q8_1.hpp"

namespace strata::kernels::cpu::x86 {
namespace {

// The same value through the table: one load, and a broadcast from memory needs no shuffle port.
inline const float* fp16_ptr(std::uint16_t h) noexcept { return &fp16_table.v[h]; }

inline __m256i load256(const void* p) noexcept { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 bytes of packed nibbles q[j] | q[j+16] << 4 → 32 bytes q[0..31] (the legacy-quant and IQ4
// layout: low nibbles are the first half of the block). vbroadcasti128 (a pure load) and
// vpsrlvd keep this off the shuffle port.
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

// A 16-entry int8 grid (IQ4_NL, MXFP4 values) looked up by the block's nibbles.
inline __m256i grid_codes(const std::int8_t* grid, const std::uint8_t* qs) noexcept {
  const __m256i g = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grid)));
  return _mm256_shuffle_epi8(g, nibbles32(qs));
}

// Activation row r of a batch whose rows are `stride` bytes apart, as blocks of type B.
template <class B>
inline const B* act_row(const void* a, std::size_t stride, int r) noexcept {
  return reinterpret_cast<const B*>(static_cast<const std::byte*>(a) + std::size_t(r) * stride);
}

// out[r] = Σ_blocks d_w·d_a·Σ(code·a) [+ m·s] for R activation rows `stride` bytes apart.
template <class V, class U, int R>
inline void dot_block32(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = typename U::block;
  using A = typename U::act_block;
  using f = typename V::f;
  constexpr int B = V::units;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  f acc[R][2];
  float mins[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    acc[r][0] = acc[r][1] = V::zero();
    mins[r] = 0.0f;
  }
  const std::size_t nb = n / 32;
  std::size_t i = 0;
  // Steps i and i+B into accumulators 0 and 1 (a fully unrolled constant index keeps them in
  // registers; a by-reference lambda made GCC store them to the stack every step).
  for (; i + B <= nb; i += 2 * B) {
    prefetch_weights(w + i);
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) {
      const std::size_t ib = i + std::size_t(j) * B;
      if (ib + B > nb) break;
      const typename V::i c = V::from_units([&]<int u>() { return U::codes(w[ib + u]); });
      const typename V::i x = U::is_signed ? V::abs8(c) : c;
      const float* ws[B];
      for (int u = 0; u < B; ++u) ws[u] = U::scale(w[ib + u]);
      const f dw = V::bcast_units(ws);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        typename V::i q = V::from_units([&]<int u>() { return load256(bytes_of(a[r][ib + u].qs)); });
        if constexpr (U::is_signed) q = V::sign8(q, c);
        const float* as[B];
        for (int u = 0; u < B; ++u) as[u] = fp16_ptr(a[r][ib + u].d.bits);
        acc[r][j] = V::fmadd(V::mul(dw, V::bcast_units(as)), V::cvt(V::dot4(V::zero_i(), x, q)), acc[r][j]);
        if constexpr (U::has_min)
          for (int u = 0; u < B; ++u) mins[r] += *U::min(w[ib + u]) * *fp16_ptr(a[r][ib + u].s.bits);
      }
    }
  }
  if constexpr (B > 1) {
    for (i = nb / B * B; i < nb; ++i) {  // the odd last block, in the low 256 bits
      const __m256i c = U::codes(w[i]);
      const __m256i x = U::is_signed ? _mm256_abs_epi8(c) : c;
      const __m256 dw = _mm256_broadcast_ss(U::scale(w[i]));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        __m256i q = load256(bytes_of(a[r][i].qs));
        if constexpr (U::is_signed) q = _mm256_sign_epi8(q, c);
        const __m256 s = _mm256_mul_ps(dw, _mm256_broadcast_ss(fp16_ptr(a[r][i].d.bits)));
        acc[r][0] = V::fmadd(V::widen(s), V::widen(_mm256_cvtepi32_ps(v256::dot4(_mm256_setzero_si256(), x, q))), acc[r][0]);
        if constexpr (U::has_min) mins[r] += *U::min(w[i]) * *fp16_ptr(a[r][i].s.bits);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = V::hsum(V::add(acc[r][0], acc[r][1])) + mins[r];
}

struct q8_0_unpack {
  using block = quant::q8_0::block;
  using act_block = quant::q8_0::block;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i codes(const block& b) noexcept { return load256(bytes_of(b.qs)); }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
};
struct q8_1_unpack : q8_0_unpack {
  using block = quant::q8_1::block;
  using act_block = quant::q8_1::block;
  static __m256i codes(const block& b) noexcept { return load256(bytes_of(b.qs)); }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
};
struct q4_0_unpack {
  using block = quant::q4_0::block;
  using act_block = quant::q8_0::block;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i codes(const block& b) noexcept {
    return _mm256_sub_epi8(nibbles32(bytes_of(b.qs)), _mm256_set1_epi8(8));
  }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
};
struct q4_1_unpack {
  using block = quant::q4_1::block;
  using act_block = quant::q8_1::block;
  static constexpr bool is_signed = false, has_min = true;
  static __m256i codes(const block& b) noexcept { return nibbles32(bytes_of(b.qs)); }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
  static const float* min(const block& b) noexcept { return fp16_ptr(b.m.bits); }
};
struct q5_0_unpack {
  using block = quant::q5_0::block;
  using act_block = quant::q8_0::block;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i codes(const block& b) noexcept {  // (q | hi << 4) − 16 = q − 16 where the bit is clear
    const __m256i hi = bits_to_bytes(load_u32(bytes_of(b.qh)));
    return _mm256_or_si256(nibbles32(bytes_of(b.qs)), _mm256_andnot_si256(hi, _mm256_set1_epi8(char(0xF0))));
  }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
};
struct q5_1_unpack {
  using block = quant::q5_1::block;
  using act_block = quant::q8_1::block;
  static constexpr bool is_signed = false, has_min = true;
  static __m256i codes(const block& b) noexcept {
    const __m256i hi = bits_to_bytes(load_u32(bytes_of(b.qh)));
    return _mm256_or_si256(nibbles32(bytes_of(b.qs)), _mm256_and_si256(hi, _mm256_set1_epi8(0x10)));
  }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
  static const float* min(const block& b) noexcept { return fp16_ptr(b.m.bits); }
};
struct iq4_nl_unpack {
  using block = quant::iq4_nl::block;
  using act_block = quant::q8_0::block;
  static constexpr bool is_signed = true, has_min = false;  // grid values in −127..113
  static __m256i codes(const block& b) noexcept { return grid_codes(quant::iq4_nl::values.data(), bytes_of(b.qs)); }
  static const float* scale(const block& b) noexcept { return fp16_ptr(b.d.bits); }
};
struct mxfp4_unpack {
  using block = quant::mxfp4::block;
  using act_block = quant::q8_0::block;
  static constexpr bool is_signed = true, has_min = false;  // values in −12..12
  static __m256i codes(const block& b) noexcept { return grid_codes(quant::mxfp4::values.data(), bytes_of(b.qs)); }
  static const float* scale(const block& b) noexcept { return &e8m0_half_table.v[b.e]; }
};

template <class U>
struct block32_dot : provided {
  template <class V, int R>
  static void run(const void* w, const void* a, std::size_t stride, float* out, std::size_t n) noexcept {
    dot_block32<V, U, R>(w, a, stride, out, n);
  }
};
template <>
struct row_dot<quant::q8_0> : block32_dot<q8_0_unpack> {};
template <>
struct row_dot<quant::q8_1> : block32_dot<q8_1_unpack> {};
template <>
struct row_dot<quant::q4_0> : block32_dot<q4_0_unpack> {};
template <>
struct row_dot<quant::q4_1> : block32_dot<q4_1_unpack> {};
template <>
struct row_dot<quant::q5_0> : block32_dot<q5_0_unpack> {};
template <>
struct row_dot<quant::q5_1> : block32_dot<q5_1_unpack> {};
template <>
struct row_dot<quant::iq4_nl> : block32_dot<iq4_nl_unpack> {};
template <>
struct row_dot<quant::mxfp4> : block32_dot<mxfp4_unpack> {};

}  // namespace
}  // namespace strata::kernels::cpu::x86
