// Dot kernels of the 256-element K-quant formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) against
// Q8_K activations. A block is walked in units of 32 elements (V::units per vector); a format
// supplies its codes for unit u as 32 bytes in element order, the int16 scales of the unit's
// sub-blocks, and its per-block offset terms. Per unit and row: vpmaddubsw (codes unsigned ≤ 63,
// or |v| with a·sign(v) for IQ4_XS) then vpmaddwd against the scales, summed exactly in int32
// lanes; per block: the mins / code offsets from the activation's 16-sums, then d·a.d (and
// dmin·a.d) applied once. Rows never interact: bit-identical for every R.
#pragma once
#include "strata/kernels/cpu/x86/block32.hpp"
#include "strata/quant/iq4_xs.hpp"
#include "strata/quant/q2_k.hpp"
#include "strata/quant/q3_k.hpp"
#include "strata/quant/q4_k.hpp"
#include "strata/quant/q5_k.hpp"
#include "strata/quant/q6_k.hpp"

namespace strata::kernels::cpu::x86 {
namespace {

inline float fp16_to_f32(std::uint16_t h) noexcept { return fp16_table.v[h]; }
inline __m128i load128(const void* p) noexcept { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Bits B..B+W-1 of every byte moved to bits T..T+W-1 (other bits cleared). Shifting whole
// 16-bit lanes is safe: the kept bits of each byte come from that same byte.
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

// Bits S..S+W-1 of every byte, at the bottom.
template <int S, int W>
inline __m256i field(__m256i v) noexcept {
  return move_bits<S, 0, W>(v);
}

template <int Begin, int End, int Step, class F>
inline void static_for(F&& f) noexcept {
  if constexpr (Begin < End) {
    f.template operator()<Begin>();
    static_for<Begin + Step, End, Step>(f);
  }
}

// The per-format parts. Each K provides: block; static constexpr bool is_signed; a `prep`
// (per-block unpacked scales) from prepare(b); codes<u>(b) → 32 bytes; scales<V>(p, u);
// start<V>(p, b, a, isum, acc) (offset terms of one row); d(b) and the final scaling.

// Q4_K / Q5_K (High: the fifth bit from qh): unit u is sub-block u: 32 bytes of qs at 32·(u/2),
// low nibbles for even u, high for odd. 8 scales in the low 128 bits, 8 mins in the high.
template <bool High>
struct q45_k {
  using block = std::conditional_t<High, quant::q5_k::block, quant::q4_k::block>;
  static constexpr bool is_signed = false;
  using prep = __m256i;
  static prep prepare(const block& b) noexcept {
    const std::uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
    const std::uint8_t* s = bytes_of(b.scales);
    const std::uint32_t u0 = load_u32(s), u1 = load_u32(s + 4), u2 = load_u32(s + 8);
    const std::uint32_t sc_lo = u0 & k6, sc_hi = (u2 & k4) | ((u0 >> 6) & k2) << 4;
    const std::uint32_t m_lo = u1 & k6, m_hi = ((u2 >> 4) & k4) | ((u1 >> 6) & k2) << 4;
    return _mm256_cvtepu8_epi16(_mm_set_epi32(int(m_hi), int(m_lo), int(sc_hi), int(sc_lo)));
  }
  template <int U>
  static __m256i codes(const block& b) noexcept {
    const __m256i q = load256(bytes_of(b.qs) + 32 * (U / 2));
    __m256i c = _mm256_and_si256(U % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
    if constexpr (High) c = _mm256_or_si256(c, move_bits<U, 4>(load256(bytes_of(b.qh))));
    return c;
  }
  template <class V>
  static typename V::i scales(prep p, int u) noexcept { return V::scales_by_unit(p, u); }
  // Mins: acc −= dmin·a.d·Σ_j m_j·(bsums_2j + bsums_2j+1).
  template <class V>
  static void start(prep p, const block& b, const quant::q8_k::block& a, typename V::i& isum, typename V::f& acc) noexcept {
    const __m256i bs = load256(bytes_of(a.bsums));
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m256 summs = _mm256_cvtepi32_ps(_mm256_zextsi128_si256(_mm_madd_epi16(_mm256_extracti128_si256(p, 1), pairs)));
    acc = V::fnmadd(V::set1(fp16_to_f32(b.dmin.bits) * a.d), V::widen(summs), acc);
    isum = V::zero_i();
  }
};

// Formats whose codes are used unsigned (q + 2^Shift) with 16 int16 scales per block, one per
// sub-block of 16: the offset comes back through the activation's 16-sums,
// Σ_j s_j·Σ (u − 2^Shift)·a = Σ_j s_j·Σ u·a − 2^Shift·Σ_j s_j·bsums_j.
template <int Shift>
struct offset_by_bsums {
  static constexpr bool is_signed = false;
  using prep = __m256i;
  template <class V>
  static typename V::i scales(prep p, int u) noexcept { return V::scales_by_half_unit(p, u); }
  template <class V, class Block>
  static void start(prep p, const Block&, const quant::q8_k::block& a, typename V::i& isum, typename V::f&) noexcept {
    const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(p, load256(bytes_of(a.bsums))), Shift);
    isum = V::widen_i(_mm256_sub_epi32(_mm256_setzero_si256(), corr));
  }
};

// Q6_K: unit u is elements 32u.. = half u/4, quarter u%4 (q6_k.hpp); codes lo | hi << 4 ∈ 0..63,
// offset 32. vpmaddubsw pair sums ≤ 2·63·127 = 16002.
struct q6_k_rows : offset_by_bsums<5> {
  using block = quant::q6_k::block;
  static prep prepare(const block& b) noexcept { return _mm256_cvtepi8_epi16(load128(bytes_of(b.scales))); }
  template <int U>
  static __m256i codes(const block& b) noexcept {
    constexpr int h = U / 4, k = U % 4;
    const __m256i ql = load256(bytes_of(b.ql) + 64 * h + 32 * (k & 1));
    const __m256i lo = _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
    return _mm256_or_si256(lo, move_bits<2 * k, 4, 2>(load256(bytes_of(b.qh) + 32 * h)));
  }
};

// Q2_K: unit u = half u/4 (qs[32h..]), quarter u%4 in bits 2k..2k+1; 4-bit scales and mins.
struct q2_k_rows {
  using block = quant::q2_k::block;
  static constexpr bool is_signed = false;
  using prep = __m256i;  // 16 scales
  static prep prepare(const block& b) noexcept {
    return _mm256_cvtepu8_epi16(_mm_and_si128(load128(bytes_of(b.scales)), _mm_set1_epi8(0x0F)));
  }
  template <int U>
  static __m256i codes(const block& b) noexcept {
    return field<2 * (U % 4), 2>(load256(bytes_of(b.qs) + 32 * (U / 4)));
  }
  template <class V>
  static typename V::i scales(prep p, int u) noexcept { return V::scales_by_half_unit(p, u); }
  template <class V>
  static void start(prep, const block& b, const quant::q8_k::block& a, typename V::i& isum, typename V::f& acc) noexcept {
    const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(load128(bytes_of(b.scales)), 4), _mm_set1_epi8(0x0F)));
    const __m256 summs = _mm256_cvtepi32_ps(_mm256_madd_epi16(mn, load256(bytes_of(a.bsums))));
    acc = V::fnmadd(V::set1(fp16_to_f32(b.dmin.bits) * a.d), V::widen(summs), acc);
    isum = V::zero_i();
  }
};

// Q3_K: codes lo | hi << 2 ∈ 0..7 (q + 4), offset 4. Unit u = half u/4, quarter u%4: qs[32h..] bits 2k..2k+1, high bit hmask bit 4h + k.
struct q3_k_rows : offset_by_bsums<2> {
  using block = quant::q3_k::block;  // prep: 16 signed scales s_j − 32
  // Low nibbles from bytes 0-7 (j < 8 low, j ≥ 8 high nibble), bits 4-5 of s_j in byte 8 + j%4
  // at bits 2(j/4).
  static prep prepare(const block& b) noexcept {
    const std::uint8_t* s = bytes_of(b.scales);
    const std::uint64_t lo = load_u64(s);
    const std::uint32_t hi = load_u32(s + 8), m2 = 0x03030303u;
    const __m128i nib =
        _mm_set_epi64x(std::int64_t((lo >> 4) & 0x0F0F0F0F0F0F0F0Full), std::int64_t(lo & 0x0F0F0F0F0F0F0F0Full));
    const __m128i top = _mm_set_epi32(int((hi >> 6) & m2), int((hi >> 4) & m2), int((hi >> 2) & m2), int(hi & m2));
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(nib, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32)));
  }
  template <int U>
  static __m256i codes(const block& b) noexcept {
    constexpr int h = U / 4, k = U % 4;
    return _mm256_or_si256(field<2 * k, 2>(load256(bytes_of(b.qs) + 32 * h)),
                           move_bits<4 * h + k, 2>(load256(bytes_of(b.hmask))));
  }
};

// IQ4_XS: unit u is sub-block u: grid values of the nibbles of qs[16u..] (signed, |v| ≤ 127 keeps
// vpmaddubsw exact), times the 6-bit scale ls − 32. The reference scales each sub-block in
// float; the integer sum here is exact, so the two differ only by float rounding.
struct iq4_xs_rows {
  using block = quant::iq4_xs::block;
  static constexpr bool is_signed = true;
  using prep = __m256i;  // 8 scales ls − 32 in the low 128 bits
  // ls_ib − 32: bits 0-3 from scales_l (nibble ib of the little-endian u32), bits 4-5 from
  // scales_h bits 2ib..2ib+1.
  static prep prepare(const block& b) noexcept {
    const std::uint32_t sl = load_u32(bytes_of(b.scales_l)), sh = b.scales_h;
    alignas(16) std::int16_t ls[8];
    for (int ib = 0; ib < 8; ++ib) ls[ib] = std::int16_t(int(((sl >> 4 * ib) & 0xF) | ((sh >> 2 * ib) & 3) << 4) - 32);
    return _mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(ls)));
  }
  template <int U>
  static __m256i codes(const block& b) noexcept { return grid_codes(quant::iq4_nl::values.data(), bytes_of(b.qs) + 16 * U); }
  template <class V>
  static typename V::i scales(prep p, int u) noexcept { return V::scales_by_unit(p, u); }
  template <class V>
  static void start(prep, const block&, const quant::q8_k::block&, typename V::i& isum, typename V::f&) noexcept {
    isum = V::zero_i();
  }
};

template <class V, class K, int R>
inline void dot_k(const void* wv, const void* av, std::size_t stride, float* out, std::size_t n) noexcept {
  using W = typename K::block;
  using A = quant::q8_k::block;
  using i = typename V::i;
  const W* w = static_cast<const W*>(wv);
  const A* a[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a[r] = act_row<A>(av, stride, r);
  typename V::f acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = V::zero();
  for (std::size_t ib = 0; ib < n / 256; ++ib) {
    const W& b = w[ib];
    for (std::size_t o = 0; o < sizeof(W); o += 64) prefetch_weights(&b, o);
    const typename K::prep p = K::prepare(b);
    i isum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) K::template start<V>(p, b, a[r][ib], isum[r], acc[r]);
    static_for<0, 8, V::units>([&]<int U>() {
      const i c = V::from_units([&]<int k>() { return K::template codes<U + k>(b); });
      const i x = K::is_signed ? V::abs8(c) : c;
      const i s = K::template scales<V>(p, U);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        i q = V::load_i(bytes_of(a[r][ib].qs) + 32 * U);
        if constexpr (K::is_signed) q = V::sign8(q, c);
        isum[r] = V::add32(isum[r], V::madd16(V::maddubs(x, q), s));
      }
    });
    const float d = fp16_to_f32(b.d.bits);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = V::fmadd(V::set1(d * a[r][ib].d), V::cvt(isum[r]), acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = V::hsum(acc[r]);
}

template <class K>
struct k_dot : provided {
  template <class V, int R>
  static void run(const void* w, const void* a, std::size_t stride, float* out, std::size_t n) noexcept {
    dot_k<V, K, R>(w, a, stride, out, n);
  }
};
template <>
struct row_dot<quant::q2_k> : k_dot<q2_k_rows> {};
template <>
struct row_dot<quant::q3_k> : k_dot<q3_k_rows> {};
template <>
struct row_dot<quant::q4_k> : k_dot<q45_k<false>> {};
template <>
struct row_dot<quant::q5_k> : k_dot<q45_k<true>> {};
template <>
struct row_dot<quant::q6_k> : k_dot<q6_k_rows> {};
template <>
struct row_dot<quant::iq4_xs> : k_dot<iq4_xs_rows> {};

}  // namespace
}  // namespace strata::kernels::cpu::x86
