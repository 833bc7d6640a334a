// SIMD packed GEMM (kernels/cpu/packed_gemm.hpp) for Q8_0, Q4_K and Q6_K over the ISA traits
// (x86/vec.hpp): lanes are rows (L = 8 or 16 of a group's 16), a tile of T tokens shares every
// weight vector it unpacks, each activation word is broadcast once per tile row half, and the
// per-block integer sums come from dot4 (vpdpbusd with VNNI). Every lane performs exactly the
// float operations of packed::<fmt>::accumulate, so results equal the scalar reference bit for
// bit on every tier and for any tile.
//
// Loop order: for each tile of T tokens (its activations stay in L1), for each group of the
// call's range (the caller sizes ranges to stay in L2), for each lane half, all blocks.
#pragma once
#include <type_traits>

#include "strata/kernels/cpu/packed/all.hpp"
#include "strata/kernels/cpu/scale_tables.hpp"
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86/vec.hpp"

namespace strata::kernels::cpu::x86 {
namespace {

// Signed × signed int8 dot on offset-binary weights (w ^ 0x80): the weight vector's part,
// prepared once and used by every token of a tile (see v256/v512::dot4_ss_offset).
template <class V>
struct ss_weight {
  typename V::i u;     // VNNI: the offset-binary bytes; else |w|
  typename V::i sign;  // else: w (AVX2 vpsignb operand)
};
template <class V>
inline ss_weight<V> prep_ss(typename V::i w_offset) noexcept {
  if constexpr (V::vnni) {
    return {w_offset, w_offset};
  } else {
    const typename V::i w = V::xor_i(w_offset, V::set1_i8(0x80));
    return {V::abs8(w), w};
  }
}
template <class V>
inline typename V::i dot_ss(typename V::i acc, const ss_weight<V>& w, typename V::i a) noexcept {
  if constexpr (V::vnni)
    return V::dot4(acc, w.u, a);  // Σ (w + 128)·a; the −128·Σa correction is in acc
  else
    return V::dot4(acc, w.u, V::sign8(a, w.sign));
}

// ---- per-format block kernels: add block b of a group's lane half to T accumulators ------

struct q8_0_kernel {
  using layout = packed::q8_0;
  // gemm_tile's decode prefetch of the block one distance ahead: the _MM_HINT_* level, or -1
  // for none (the hardware prefetchers alone).
  static constexpr int decode_prefetch = _MM_HINT_T0;
  template <class V, int T>
  static void block(const std::uint8_t* gb, int half, const std::uint8_t* const* act, std::size_t b,
                    std::size_t row_bytes, typename V::f* acc) noexcept {
    constexpr int L = V::lanes;
    using i = typename V::i;
    i isum[T];
    for (int t = 0; t < T; ++t)
      isum[t] = V::vnni ? V::bcast_i32(act[t] + row_bytes + 4 * b) : V::zero_i();  // −128·Σa
    const std::uint8_t* aq[T];
    for (int t = 0; t < T; ++t) aq[t] = act[t] + 34 * b + 2;
    for (int s = 0; s < 8; ++s) {
      const ss_weight<V> w = prep_ss<V>(V::load_i(gb + 32 + 64 * s + 4 * L * half));
      for (int t = 0; t < T; ++t) isum[t] = dot_ss<V>(isum[t], w, V::bcast_i32(aq[t] + 4 * s));
    }
    const typename V::f dw = V::load_f16(gb + 2 * L * half);
    for (int t = 0; t < T; ++t) {
      const std::uint8_t* a = act[t] + 34 * b;
      const float da = fp16_table.v[a[0] | a[1] << 8];
      acc[t] = V::fmadd(V::cvt(isum[t]), V::mul(dw, V::set1(da)), acc[t]);
    }
  }
};

// Q8_K activation block b of a row: float d, int8 qs[256], int16 bsums[16].
inline const std::uint8_t* q8k_block(const std::uint8_t* act, std::size_t b) noexcept {
  return act + b * sizeof(quant::q8_k::block);
}
inline float q8k_d(const std::uint8_t* blk) noexcept {
  float d;
  std::memcpy(&d, blk, 4);
  return d;
}
inline constexpr std::size_t q8k_qs = 4, q8k_bsums = 4 + 256;

// Block b of each of the T activation rows, and the byte offset of lane half `half` in a
// packed 16-row word array.
template <class V, int T>
struct q8k_tile {
  const std::uint8_t* ab[T];
  std::size_t lane_off;
  q8k_tile(const std::uint8_t* const* act, std::size_t b, int half) noexcept : lane_off(4 * V::lanes * half) {
    for (int t = 0; t < T; ++t) ab[t] = q8k_block(act[t], b);
  }
};

struct q4_k_kernel {
  using layout = packed::q4_k;
  // None: with 2 threads streaming, Q4_K's 36 L1 prefetches a block cost more than they hid
  // (qwen3-0.6b Q4_K_M tg128 63.3 -> 68.4 t/s without them; into L2 lost 10-15% on 1 thread).
  static constexpr int decode_prefetch = -1;
  template <class V, int T>
  static void block(const std::uint8_t* gb, int half, const std::uint8_t* const* act, std::size_t b, std::size_t,
                    typename V::f* acc) noexcept {
    constexpr int L = V::lanes;
    using i = typename V::i;
    const q8k_tile<V, T> tile(act, b, half);
    const auto& ab = tile.ab;
    const std::size_t lane_off = tile.lane_off;
    const i u0 = V::load_i(gb + layout::scales_offset + lane_off);
    const i u1 = V::load_i(gb + layout::scales_offset + 64 + lane_off);
    const i u2 = V::load_i(gb + layout::scales_offset + 128 + lane_off);
    const i k6 = V::set1_i8(0x3F), k4 = V::set1_i8(0x0F), k2 = V::set1_i8(0x03), ff = V::set1_i32(0xFF);
    // Lane bytes 0-3: sc_0..3 / m_0..3 (lo) and sc_4..7 / m_4..7 (hi), as in k_scale_min.hpp.
    const i sc_lo = V::and_i(u0, k6), m_lo = V::and_i(u1, k6);
    const i sc_hi = V::or_i(V::and_i(u2, k4), V::template slli32<4>(V::and_i(V::template srli32<6>(u0), k2)));
    const i m_hi = V::or_i(V::and_i(V::template srli32<4>(u2), k4),
                           V::template slli32<4>(V::and_i(V::template srli32<6>(u1), k2)));
    const auto byte_of = [&](i v, int k) {  // byte k of each lane, as int32
      switch (k) {
        case 0: return V::and_i(v, ff);
        case 1: return V::and_i(V::template srli32<8>(v), ff);
        case 2: return V::and_i(V::template srli32<16>(v), ff);
        default: return V::template srli32<24>(v);
      }
    };
    i isum[T], msum[T];
    for (int t = 0; t < T; ++t) isum[t] = msum[t] = V::zero_i();
    for (int j = 0; j < 8; ++j) {  // mins: m_j·(bsums_2j + bsums_2j+1) by vpmaddwd on (m_j, m_j)
      const i m = byte_of(j < 4 ? m_lo : m_hi, j % 4);
      const i mm = V::or_i(m, V::template slli32<16>(m));
      for (int t = 0; t < T; ++t) msum[t] = V::add32(msum[t], V::madd16(mm, V::bcast_i32(ab[t] + q8k_bsums + 4 * j)));
    }
    const i low4 = V::set1_i8(0x0F);
    for (int c = 0; c < 4; ++c) {
      i lo[T], hi[T];
      for (int t = 0; t < T; ++t) lo[t] = hi[t] = V::zero_i();
      for (int s = 0; s < 8; ++s) {
        const i v = V::load_i(gb + layout::qs_offset + (8 * c + s) * 64 + lane_off);
        const i ql = V::and_i(v, low4), qh = V::and_i(V::template srli16<4>(v), low4);
        for (int t = 0; t < T; ++t) {
          lo[t] = V::dot4(lo[t], ql, V::bcast_i32(ab[t] + q8k_qs + 64 * c + 4 * s));
          hi[t] = V::dot4(hi[t], qh, V::bcast_i32(ab[t] + q8k_qs + 64 * c + 32 + 4 * s));
        }
      }
      const i s0 = byte_of(c < 2 ? sc_lo : sc_hi, (2 * c) % 4), s1 = byte_of(c < 2 ? sc_lo : sc_hi, (2 * c + 1) % 4);
      for (int t = 0; t < T; ++t)
        isum[t] = V::add32(isum[t], V::add32(V::mullo32(lo[t], s0), V::mullo32(hi[t], s1)));
    }
    const typename V::f d = V::load_f16(gb + 2 * L * half), dmin = V::load_f16(gb + 32 + 2 * L * half);
    for (int t = 0; t < T; ++t) {
      const typename V::f da = V::set1(q8k_d(ab[t]));
      acc[t] = V::fmadd(V::cvt(isum[t]), V::mul(d, da), acc[t]);
      acc[t] = V::fnmadd(V::cvt(msum[t]), V::mul(dmin, da), acc[t]);
    }
  }
};

struct q6_k_kernel {
  using layout = packed::q6_k;
  // Into L2, not L1: a block is 53 lines, and 53 L1 prefetches at a time held the loads of the
  // block being computed behind them (1 token, 1 thread, weights from DRAM, 1024 x 1024 and
  // 3072 x 1024: 10 GB/s with L1 prefetches, 19-21 with L2 ones, 9 with none).
  static constexpr int decode_prefetch = _MM_HINT_T1;
  template <class V, int T>
  static void block(const std::uint8_t* gb, int half, const std::uint8_t* const* act, std::size_t b, std::size_t,
                    typename V::f* acc) noexcept {
    constexpr int L = V::lanes;
    using i = typename V::i;
    const q8k_tile<V, T> tile(act, b, half);
    const auto& ab = tile.ab;
    const std::size_t lane_off = tile.lane_off;
    const auto scale = [&](int j) { return V::i8_to_i32(gb + layout::scales_offset + 16 * j + L * half); };
    if constexpr (T == 1 || (T == 2 && L == 16)) return block_few<V, T>(gb, half, ab, lane_off, scale, acc);
    i sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = scale(j);
    // −32·Σ_j sc_j·bsums_j by vpmaddwd on int16 pairs (sc_2p, sc_2p+1).
    i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = V::zero_i();
    const i lo16 = V::set1_i32(0xFFFF);
    for (int p = 0; p < 8; ++p) {
      const i pair = V::or_i(V::and_i(sc[2 * p], lo16), V::template slli32<16>(sc[2 * p + 1]));
      for (int t = 0; t < T; ++t) isum[t] = V::add32(isum[t], V::madd16(pair, V::bcast_i32(ab[t] + q8k_bsums + 4 * p)));
    }
    for (int t = 0; t < T; ++t) isum[t] = V::sub32(V::zero_i(), V::template slli32<5>(isum[t]));
    const i low4 = V::set1_i8(0x0F), hi2 = V::set1_i8(0x30);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int u = 0; u < 2; ++u) {  // sub-block 8h + 2k + u: steps s = 4u..4u+3
          i part[T];
          for (int t = 0; t < T; ++t) part[t] = V::zero_i();
          for (int s = 4 * u; s < 4 * u + 4; ++s) {
            const i ql = V::load_i(gb + layout::ql_offset + (16 * h + 8 * (k & 1) + s) * 64 + lane_off);
            const i qh = V::load_i(gb + layout::qh_offset + (8 * h + s) * 64 + lane_off);
            const i lo = k < 2 ? V::and_i(ql, low4) : V::and_i(V::template srli16<4>(ql), low4);
            i top;
            switch (k) {
              case 0: top = V::template slli16<4>(qh); break;
              case 1: top = V::template slli16<2>(qh); break;
              case 2: top = qh; break;
              default: top = V::template srli16<2>(qh);
            }
            const i code = V::or_i(lo, V::and_i(top, hi2));
            for (int t = 0; t < T; ++t)
              part[t] = V::dot4(part[t], code, V::bcast_i32(ab[t] + q8k_qs + 128 * h + 32 * k + 4 * s));
          }
          for (int t = 0; t < T; ++t) isum[t] = V::add32(isum[t], V::mullo32(part[t], sc[8 * h + 2 * k + u]));
        }
    const typename V::f d = V::load_f16(gb + 2 * L * half);
    for (int t = 0; t < T; ++t) acc[t] = V::fmadd(V::cvt(isum[t]), V::mul(d, V::set1(q8k_d(ab[t]))), acc[t]);
  }

  // The same integer sums for 1-2 tokens (decode) in the order the data lies: each ql/qh word
  // vector is loaded once and yields the codes of all four quarters (the loop above reloads ql
  // twice and qh four times, which at one token made Q6_K decode compute-bound at about half the
  // DRAM rate). Integer sums are exact, so the result is the same bits.
  template <class V, int T, class Scale>
  static void block_few(const std::uint8_t* gb, int half, const std::uint8_t* const* ab, std::size_t lane_off,
                        const Scale& scale, typename V::f* acc) noexcept {
    constexpr int L = V::lanes;
    using i = typename V::i;
    i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = V::zero_i();
    const i lo16 = V::set1_i32(0xFFFF);
    for (int p = 0; p < 8; ++p) {
      const i pair = V::or_i(V::and_i(scale(2 * p), lo16), V::template slli32<16>(scale(2 * p + 1)));
      for (int t = 0; t < T; ++t) isum[t] = V::add32(isum[t], V::madd16(pair, V::bcast_i32(ab[t] + q8k_bsums + 4 * p)));
    }
    for (int t = 0; t < T; ++t) isum[t] = V::sub32(V::zero_i(), V::template slli32<5>(isum[t]));
    const i low4 = V::set1_i8(0x0F), hi2 = V::set1_i8(0x30);
    for (int h = 0; h < 2; ++h) {
      i part[T][4][2];  // [token][quarter k][u]: sub-block 8h + 2k + u
      for (int t = 0; t < T; ++t)
        for (int k = 0; k < 4; ++k) part[t][k][0] = part[t][k][1] = V::zero_i();
      for (int s = 0; s < 8; ++s) {
        const int u = s / 4;
        const i qla = V::load_i(gb + layout::ql_offset + (16 * h + s) * 64 + lane_off);
        const i qlb = V::load_i(gb + layout::ql_offset + (16 * h + 8 + s) * 64 + lane_off);
        const i qh = V::load_i(gb + layout::qh_offset + (8 * h + s) * 64 + lane_off);
        const i code[4] = {
            V::or_i(V::and_i(qla, low4), V::and_i(V::template slli16<4>(qh), hi2)),
            V::or_i(V::and_i(qlb, low4), V::and_i(V::template slli16<2>(qh), hi2)),
            V::or_i(V::and_i(V::template srli16<4>(qla), low4), V::and_i(qh, hi2)),
            V::or_i(V::and_i(V::template srli16<4>(qlb), low4), V::and_i(V::template srli16<2>(qh), hi2))};
        for (int k = 0; k < 4; ++k)
          for (int t = 0; t < T; ++t)
            part[t][k][u] = V::add32(part[t][k][u], V::dot4(V::zero_i(), code[k], V::bcast_i32(ab[t] + q8k_qs + 128 * h + 32 * k + 4 * s)));
      }
      for (int k = 0; k < 4; ++k)
        for (int u = 0; u < 2; ++u) {
          const i sc = scale(8 * h + 2 * k + u);
          for (int t = 0; t < T; ++t) isum[t] = V::add32(isum[t], V::mullo32(part[t][k][u], sc));
        }
    }
    const typename V::f d = V::load_f16(gb + 2 * L * half);
    for (int t = 0; t < T; ++t) acc[t] = V::fmadd(V::cvt(isum[t]), V::mul(d, V::set1(q8k_d(ab[t]))), acc[t]);
  }
};

// ---- driver ------------------------------------------------------------------------------

template <class V, class K, int T>
inline void gemm_tile(const gemm_args& a, std::size_t g, int half, std::size_t t0) noexcept {
  constexpr int L = V::lanes;
  const std::uint8_t* gw = a.w + g * a.group_bytes;
  const std::uint8_t* act[T];
  for (int t = 0; t < T; ++t) act[t] = a.act + (t0 + t) * a.act_stride;
  typename V::f acc[T];
  for (int t = 0; t < T; ++t) acc[t] = V::zero();
  const std::size_t nb = a.k / K::layout::block_elems;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::uint8_t* gb = gw + b * K::layout::group_block_bytes;
    // Decode streams weights from DRAM: every line of the block, one distance ahead, to the
    // level the format's kernel names (one line per block, as before, left Q6_K's 53-line blocks
    // to the hardware prefetchers: 16 GB/s of the 31 this machine reads).
    if constexpr (T <= 2 && K::decode_prefetch >= 0)
      for (std::size_t o = 0; o < K::layout::group_block_bytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(gb) + weight_prefetch_distance + o, _mm_hint(K::decode_prefetch));
    K::template block<V, T>(gb, half, act, b, a.act_row_bytes, acc);
  }
  const std::size_t row0 = g * pack_rows + std::size_t(half) * L;
  for (int t = 0; t < T; ++t) {
    float* y = a.y + (t0 + t) * a.y_stride + row0;
    if (row0 + L <= a.n_rows) {
      V::store(y, acc[t]);
    } else {
      alignas(64) float tmp[L];
      V::store(tmp, acc[t]);
      for (std::size_t r = 0; row0 + r < a.n_rows; ++r) y[r] = tmp[r];
    }
  }
}

template <class V, class K, int T>
inline void gemm_tokens(const gemm_args& a, std::size_t t0, std::size_t tn) noexcept {
  if constexpr (T > 1) {
    if (tn < std::size_t(T)) return gemm_tokens<V, K, T - 1>(a, t0, tn);
  }
  for (std::size_t g = a.group_begin; g < a.group_end; ++g)
    for (int half = 0; half < int(pack_rows) / V::lanes; ++half) {
      if (g * pack_rows + std::size_t(half) * V::lanes >= a.n_rows) break;
      gemm_tile<V, K, T>(a, g, half, t0);
    }
}

// Tokens per tile: enough to amortize unpacking, few enough to keep accumulators in registers
// (AVX2 has 16 vector registers, AVX-512 32).
template <class V>
inline constexpr int gemm_tile_tokens = V::lanes == 16 ? 4 : 2;

template <class V, class K>
inline void packed_gemm(const gemm_args& a) noexcept {
  constexpr std::size_t T = gemm_tile_tokens<V>;
  for (std::size_t t0 = 0; t0 < a.n_tok; t0 += T)
    gemm_tokens<V, K, int(T)>(a, t0, a.n_tok - t0 < T ? a.n_tok - t0 : T);
}

// The kernel of each packed format (void: none).
template <class Fmt>
struct gemm_for {
  using type = void;
};
template <>
struct gemm_for<quant::q8_0> {
  using type = q8_0_kernel;
};
template <>
struct gemm_for<quant::q4_k> {
  using type = q4_k_kernel;
};
template <>
struct gemm_for<quant::q6_k> {
  using type = q6_k_kernel;
};

}  // namespace
}  // namespace strata::kernels::cpu::x86

namespace strata::kernels::cpu {

template <class Fmt, isa Isa>
  requires(Isa != isa::scalar && !std::is_void_v<typename x86::gemm_for<Fmt>::type>)
struct gemm_kernel<Fmt, Isa> {
  static constexpr bool available = true;
  static void gemm(const gemm_args& a) noexcept {
    x86::packed_gemm<x86::vec_for<Isa>, typename x86::gemm_for<Fmt>::type>(a);
  }
};

}  // namespace strata::kernels::cpu
