// SIMD attention over one tile (kernels/cpu/attention_tile.hpp). Scores: each block of 16 keys
// is transposed (keys in lanes) and scored by FMAs of broadcast query coordinates, four queries
// at a time, two chains (even and odd coordinates) per query, no horizontal sums. Values: summed
// key by key in increasing order, two queries per pass. Online softmax, polynomial exp.
//
// Where the key and value vectors come from depends on the tile, never the arithmetic:
//  - a tile of several tokens (prefill) decodes each block of 16 cache rows once into f32
//    scratch (F16C for f16, int8 → float for q8_0, the fused TurboQuant decoder for tq rows),
//    transposes the K block through memory, and every query of the tile reads the scratch;
//  - a tile of one token (decode: its GQA heads) reads f32 / f16 / q8_0 rows and f16 ring rows
//    straight from the cache, converting and transposing in registers (decoding rows to scratch
//    and reloading them cost several times the arithmetic for 1-4 queries). TurboQuant sides
//    still decode to scratch.
// Both give every query the same floats in the same order, so a query's result does not depend
// on its tile (bit for bit): batching never changes results. Same math as
// attention_tile_reference, up to float rounding (sum order, exp polynomial).
#pragma once
#include <type_traits>

#include "strata/kernels/cpu/attention_tile.hpp"
#include "strata/kernels/cpu/scale_tables.hpp"
#include "strata/kernels/cpu/x86/vec.hpp"

namespace strata::kernels::cpu::x86 {
namespace {

inline constexpr std::uint32_t key_block = attention_key_block;

// Decoded blocks are interleaved by lane groups: element c of key k (k < 16) sits at
// blk[(c / L)·16·L + k·L + c % L], so the 16 keys' vectors for one group of L coordinates are
// contiguous and every load in the inner loops has a constant offset from one base pointer.
template <class V>
inline float* lane_group(float* blk, std::uint32_t k, std::uint32_t c) noexcept {
  return blk + (c / V::lanes) * key_block * V::lanes + k * V::lanes;
}

// Row r of side s (cache rows, not the ring) decoded into key slot k of blk; tmp holds d floats.
template <class V>
inline void decode_row_simd(const attention_side& s, const std::uint8_t* r, std::uint32_t d, float* blk,
                            std::uint32_t k, float* tmp) noexcept {
  constexpr int L = V::lanes;
  switch (s.kind) {
    case kv_row_kind::f32:
      for (std::uint32_t c = 0; c < d; c += L) V::store(lane_group<V>(blk, k, c), V::load(reinterpret_cast<const float*>(r) + c));
      break;
    case kv_row_kind::f16:
      for (std::uint32_t c = 0; c < d; c += L) V::store(lane_group<V>(blk, k, c), V::load_f16(r + 2 * c));
      break;
    case kv_row_kind::q8_0:
      for (std::uint32_t b = 0; b < d / 32; ++b) {
        const std::uint8_t* q = r + 34 * b;  // fp16 d, then 32 int8 codes
        const typename V::f scale = V::set1(fp16_table.v[q[0] | q[1] << 8]);
        for (std::uint32_t c = 0; c < 32; c += L)
          V::store(lane_group<V>(blk, k, 32 * b + c), V::mul(scale, V::cvt(V::i8_to_i32(q + 2 + c))));
      }
      break;
    case kv_row_kind::turboquant:
      for (std::uint32_t c = 0; c < d; c += L) V::store(tmp + c, V::zero());
      s.tq_accumulate(*s.tq, 1.0f, r, tmp);
      for (std::uint32_t c = 0; c < d; c += L) V::store(lane_group<V>(blk, k, c), V::load(tmp + c));
      break;
  }
}

template <class V>
inline void zero_slot(float* blk, std::uint32_t k, std::uint32_t d) noexcept {
  for (std::uint32_t c = 0; c < d; c += V::lanes) V::store(lane_group<V>(blk, k, c), V::zero());
}

inline bool reads_ring(const attention_side& s, const attention_tile& t, std::uint32_t i, std::uint32_t j) noexcept {
  return s.ring && j >= t.recent_from[i] && s.ring[j - t.key_lo];
}

// Prefetches the cache rows of positions [j0, j0 + 16) up to hi_all into L2: a head's rows sit
// n_head_kv head vectors apart, a stride the hardware prefetchers miss. Not into L1: a block is
// 64-128 lines a side, more than L1 has misses in flight, and in decode (rows cold in DRAM) the
// prefetch instructions themselves were the kernel's hot spot.
inline void prefetch_block(const attention_side& s, const attention_tile& t, std::uint32_t j0, std::uint32_t hi_all) noexcept {
  for (std::uint32_t j = j0; j < j0 + key_block && j <= hi_all; ++j)
    for (std::size_t o = 0; o < s.row_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(s.rows[j - t.key_lo]) + o, _MM_HINT_T1);
}

// Decodes the keys of block [j0, j0 + 16) that some query of the tile reads: cache rows into
// `rows`, ring rows into `ring` (when the side has a ring); returns whether any ring row was.
// Slots nobody reads are zeroed, so every lane the kernels load holds a finite value. The next
// block's cache rows are prefetched.
template <class V>
inline bool decode_block(const attention_side& s, const attention_tile& t, std::uint32_t j0, std::uint32_t lo_all,
                         std::uint32_t hi_all, float* rows, float* ring, float* tmp) noexcept {
  bool any_ring = false;
  const std::uint32_t d = t.head_dim;
  prefetch_block(s, t, j0 + key_block, hi_all);
  for (std::uint32_t k = 0; k < key_block; ++k) {
    const std::uint32_t j = j0 + k;
    bool need_ring = false, need_row = j >= lo_all && j <= hi_all;
    if (s.ring && need_row) {  // only queries whose window reaches j may read the ring
      need_row = false;
      for (std::uint32_t i = 0; i < t.n_q; ++i) {
        if (j < t.first[i] || j > t.last[i]) continue;
        if (reads_ring(s, t, i, j))
          need_ring = true;
        else
          need_row = true;
      }
    }
    if (need_row)
      decode_row_simd<V>(s, s.rows[j - t.key_lo], d, rows, k, tmp);
    else
      zero_slot<V>(rows, k, d);
    if (!s.ring) continue;
    any_ring = any_ring || need_ring;
    if (need_ring)
      for (std::uint32_t c = 0; c < d; c += V::lanes)
        V::store(lane_group<V>(ring, k, c), V::load_f16(s.ring[j - t.key_lo] + c));
    else
      zero_slot<V>(ring, k, d);
  }
  return any_ring;
}

// o[0..d) += Σ_{k ∈ keys} p_k·v_k (v_k from `vc`, or `vr` where bit k of from_ring is set), keys
// in increasing order, N vectors of o in registers per pass.
template <class V, int N>
inline void add_values(float* o, std::uint32_t c0, const typename V::f* p, std::uint32_t keys, std::uint32_t from_ring,
                       const float* vc, const float* vr) noexcept {
  constexpr int L = V::lanes;
  typename V::f acc[N];
  for (int u = 0; u < N; ++u) acc[u] = V::load(o + c0 + u * L);
  for (std::uint32_t k = 0; k < key_block; ++k) {
    if (!(keys >> k & 1)) continue;
    const typename V::f pk = V::lane(p[k / L], int(k % L));
    const float* g = (from_ring >> k & 1 ? vr : vc) + (c0 / L) * key_block * L + k * L;
    for (int u = 0; u < N; ++u) acc[u] = V::fmadd(pk, V::load(g + u * key_block * L), acc[u]);
  }
  for (int u = 0; u < N; ++u) V::store(o + c0 + u * L, acc[u]);
}

// add_values for two queries with the same keys: each value vector loaded is used twice.
template <class V, int N>
inline void add_values_pair(float* oa, float* ob, std::uint32_t c0, const typename V::f* pa, const typename V::f* pb,
                            std::uint32_t keys, std::uint32_t from_ring, const float* vc, const float* vr) noexcept {
  constexpr int L = V::lanes;
  typename V::f aa[N], ab[N];
  for (int u = 0; u < N; ++u) aa[u] = V::load(oa + c0 + u * L), ab[u] = V::load(ob + c0 + u * L);
  for (std::uint32_t k = 0; k < key_block; ++k) {
    if (!(keys >> k & 1)) continue;
    const typename V::f pka = V::lane(pa[k / L], int(k % L)), pkb = V::lane(pb[k / L], int(k % L));
    const float* g = (from_ring >> k & 1 ? vr : vc) + (c0 / L) * key_block * L + k * L;
    for (int u = 0; u < N; ++u) {
      const typename V::f v = V::load(g + u * key_block * L);
      aa[u] = V::fmadd(pka, v, aa[u]);
      ab[u] = V::fmadd(pkb, v, ab[u]);
    }
  }
  for (int u = 0; u < N; ++u) V::store(oa + c0 + u * L, aa[u]), V::store(ob + c0 + u * L, ab[u]);
}

// The encodings a decode tile reads straight from the cache (the ring is always f16).
enum class vec_src : std::uint8_t { f32, f16, q8_0 };

// One side's rows for a block of a decode tile: key k's row from rows[k], or from ring[k] where
// the tile reads the ring (null where nothing may be read).
struct block_src {
  const std::uint8_t* rows[key_block];
  const std::uint8_t* ring[key_block];
  vec_src row_kind = vec_src::f16;
};

inline vec_src direct_src(kv_row_kind k) noexcept {
  return k == kv_row_kind::f32 ? vec_src::f32 : k == kv_row_kind::q8_0 ? vec_src::q8_0 : vec_src::f16;
}

// Coordinates [c, c + L) of a row as floats: the values decode_row_simd writes to scratch.
template <class V, vec_src S>
[[gnu::always_inline]] inline typename V::f load_group(const std::uint8_t* p, std::uint32_t c) noexcept {
  if constexpr (S == vec_src::f32) return V::load(reinterpret_cast<const float*>(p) + c);
  if constexpr (S == vec_src::f16) return V::load_f16(p + 2 * c);
  if constexpr (S == vec_src::q8_0) {
    const std::uint8_t* b = p + 34 * (c / 32);  // fp16 d, then 32 int8 codes
    return V::mul(V::set1(fp16_table.v[b[0] | b[1] << 8]), V::cvt(V::i8_to_i32(b + 2 + c % 32)));
  }
}

template <vec_src S>
using src_tag = std::integral_constant<vec_src, S>;

// Calls f(src_tag<row kind>) for a block's run-time row kind.
template <class F>
[[gnu::always_inline]] inline void with_src(const block_src& b, F&& f) {
  switch (b.row_kind) {
    case vec_src::f32: return f(src_tag<vec_src::f32>{});
    case vec_src::f16: return f(src_tag<vec_src::f16>{});
    case vec_src::q8_0: return f(src_tag<vec_src::q8_0>{});
  }
}

// o_q[c0, c0 + N·L) += Σ_{k ∈ keys} p_q,k·v_k for Q queries with the same keys (v_k from ring[k]
// where bit k of from_ring is set, else rows[k]), keys in increasing order; each value vector
// loaded serves the Q queries.
template <class V, int N, int Q, vec_src RowS>
[[gnu::always_inline]] inline void add_values_src(float* const* o, std::uint32_t c0,
                                                  const typename V::f (*p)[key_block / V::lanes], std::uint32_t keys,
                                                  std::uint32_t from_ring, const block_src& src) noexcept {
  using f = typename V::f;
  constexpr int L = V::lanes;
  f acc[Q][N];
  for (int q = 0; q < Q; ++q)
    for (int u = 0; u < N; ++u) acc[q][u] = V::load(o[q] + c0 + u * L);
  for (std::uint32_t k = 0; k < key_block; ++k) {
    if (!(keys >> k & 1)) continue;
    f pk[Q];
    for (int q = 0; q < Q; ++q) pk[q] = V::lane(p[q][k / L], int(k % L));
    const bool ring = from_ring >> k & 1;
    for (int u = 0; u < N; ++u) {
      const f v = ring ? load_group<V, vec_src::f16>(src.ring[k], c0 + u * L)
                       : load_group<V, RowS>(src.rows[k], c0 + u * L);
      for (int q = 0; q < Q; ++q) acc[q][u] = V::fmadd(pk[q], v, acc[q][u]);
    }
  }
  for (int q = 0; q < Q; ++q)
    for (int u = 0; u < N; ++u) V::store(o[q] + c0 + u * L, acc[q][u]);
}

template <class V, int Q>
inline void add_values_src_all(float* const* o, std::uint32_t d, const typename V::f (*p)[key_block / V::lanes],
                               std::uint32_t keys, std::uint32_t from_ring, const block_src& src) noexcept {
  constexpr int L = V::lanes, N = Q == 2 ? (L == 16 ? 8 : 4) : 8;  // o vectors in registers per pass
  with_src(src, [&](auto rs) {
    constexpr vec_src RowS = decltype(rs)::value;
    std::uint32_t c0 = 0;
    for (; c0 + N * L <= d; c0 += N * L) add_values_src<V, N, Q, RowS>(o, c0, p, keys, from_ring, src);
    for (; c0 < d; c0 += L) add_values_src<V, 1, Q, RowS>(o, c0, p, keys, from_ring, src);
  });
}

// kt[d·16 + k] = element d of key k: the decoded block transposed, one lane group at a time.
template <class V>
inline void transpose_block(const float* blk, std::uint32_t d, float* kt) noexcept {
  for (std::uint32_t c = 0; c < d; c += V::lanes) V::transpose_16(blk + (c / V::lanes) * key_block * V::lanes, kt + c * key_block);
}

// s[g] = scale·⟨q_g, k⟩ for the 16 keys of a transposed block and G queries: per query two FMA
// chains over the even and odd coordinates (keys in lanes), added at the end. Each key vector
// loaded serves the G queries; a query's scores are the same for every G.
template <class V, int G>
inline void block_scores_t(const float* kt, const float* const* q, std::uint32_t d, float scale,
                           float (*s)[key_block]) noexcept {
  constexpr int L = V::lanes, NB = int(key_block) / L;
  typename V::f acc[G][2][NB];
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < NB; ++h) acc[g][0][h] = acc[g][1][h] = V::zero();
  for (std::uint32_t c = 0; c < d; c += 2)
    for (int par = 0; par < 2; ++par) {
      const float* row = kt + (c + par) * key_block;
      typename V::f kv[NB];
      for (int h = 0; h < NB; ++h) kv[h] = V::load(row + h * L);
      for (int g = 0; g < G; ++g) {
        const typename V::f b = V::bcast(q[g] + c + par);
        for (int h = 0; h < NB; ++h) acc[g][par][h] = V::fmadd(b, kv[h], acc[g][par][h]);
      }
    }
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < NB; ++h) V::store(s[g] + h * L, V::mul(V::add(acc[g][0][h], acc[g][1][h]), V::set1(scale)));
}

template <class V>
inline void block_scores_n(int n, const float* kt, const float* const* q, std::uint32_t d, float scale,
                           float (*s)[key_block]) noexcept {
  switch (n) {
    case 1: return block_scores_t<V, 1>(kt, q, d, scale, s);
    case 2: return block_scores_t<V, 2>(kt, q, d, scale, s);
    case 3: return block_scores_t<V, 3>(kt, q, d, scale, s);
    default: return block_scores_t<V, 4>(kt, q, d, scale, s);
  }
}

// block_scores_t for G queries of one token straight from the rows: per lane group, the 16 keys'
// vectors (keys outside `keys` read as zeros) are loaded, transposed in registers and used at
// once. The same FMAs in the same order as through transpose_block.
template <class V, int G, vec_src RowS>
[[gnu::always_inline]] inline void block_scores_rows(const block_src& src, std::uint32_t from_ring, std::uint32_t keys,
                                                     const float* const* q, std::uint32_t d, float scale,
                                                     float (*s)[key_block]) noexcept {
  using f = typename V::f;
  constexpr int L = V::lanes, NB = int(key_block) / L;
  f acc[G][2][NB];
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < NB; ++h) acc[g][0][h] = acc[g][1][h] = V::zero();
  for (std::uint32_t c = 0; c < d; c += L) {
    f r[key_block], kt[key_block];
    for (std::uint32_t k = 0; k < key_block; ++k)
      r[k] = !(keys >> k & 1)      ? V::zero()
             : from_ring >> k & 1 ? load_group<V, vec_src::f16>(src.ring[k], c)
                                  : load_group<V, RowS>(src.rows[k], c);
    V::transpose_16_regs(r, kt);  // kt[cc·NB + h]: coordinate c + cc of keys h·L..h·L + L − 1
    for (int cc = 0; cc < L; cc += 2)
      for (int par = 0; par < 2; ++par)
        for (int g = 0; g < G; ++g) {
          const f b = V::bcast(q[g] + c + cc + par);
          for (int h = 0; h < NB; ++h) acc[g][par][h] = V::fmadd(b, kt[(cc + par) * NB + h], acc[g][par][h]);
        }
  }
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < NB; ++h) V::store(s[g] + h * L, V::mul(V::add(acc[g][0][h], acc[g][1][h]), V::set1(scale)));
}

template <class V>
inline void block_scores_rows_n(int n, const block_src& src, std::uint32_t from_ring, std::uint32_t keys,
                                const float* const* q, std::uint32_t d, float scale, float (*s)[key_block]) noexcept {
  with_src(src, [&](auto rs) {
    constexpr vec_src RowS = decltype(rs)::value;
    switch (n) {
      case 1: return block_scores_rows<V, 1, RowS>(src, from_ring, keys, q, d, scale, s);
      case 2: return block_scores_rows<V, 2, RowS>(src, from_ring, keys, q, d, scale, s);
      case 3: return block_scores_rows<V, 3, RowS>(src, from_ring, keys, q, d, scale, s);
      default: return block_scores_rows<V, 4, RowS>(src, from_ring, keys, q, d, scale, s);
    }
  });
}

// Whether a side of the tile is read straight from the rows: one token's queries (the same keys
// and ring window for all), few enough that converting a row again per group of 4 is cheap.
inline bool reads_rows_directly(const attention_tile& t, const attention_side& s) noexcept {
  if (s.kind == kv_row_kind::turboquant || t.n_q > 8) return false;
  for (std::uint32_t i = 1; i < t.n_q; ++i)
    if (t.first[i] != t.first[0] || t.last[i] != t.last[0] || t.recent_from[i] != t.recent_from[0]) return false;
  return true;
}

// The rows of block [j0, j0 + 16) of a decode tile (positions outside [lo_all, hi_all] are
// never read).
inline void block_sources(const attention_side& s, const attention_tile& t, std::uint32_t j0, std::uint32_t lo_all,
                          std::uint32_t hi_all, block_src& b) noexcept {
  b.row_kind = direct_src(s.kind);
  for (std::uint32_t k = 0; k < key_block; ++k) {
    const std::uint32_t j = j0 + k;
    const bool held = j >= lo_all && j <= hi_all;
    b.rows[k] = held ? s.rows[j - t.key_lo] : nullptr;
    b.ring[k] = held && s.ring ? reinterpret_cast<const std::uint8_t*>(s.ring[j - t.key_lo]) : nullptr;
  }
}

// Returns false (leaving the tile untouched) when head_dim is not a multiple of the lane count;
// the caller then runs the reference.
template <class V>
inline bool attention_tile_simd(attention_tile& t) noexcept {
  using f = typename V::f;
  constexpr int L = V::lanes, NB = int(key_block) / L;  // score vectors per block
  constexpr int DT = 8;                                   // o vectors kept in registers per step
  constexpr int G = 4;                                    // queries scored together
  const std::uint32_t d = t.head_dim;
  if (d == 0 || d % L) return false;
  const std::size_t dp = (d + 15) / 16 * 16;
  float* kc = t.scratch;  // decoded blocks (lane groups): K rows, K ring, V rows, V ring
  float* kr = kc + key_block * dp;
  float* vc = kr + key_block * dp;
  float* vr = vc + key_block * dp;
  float* ktc = vr + key_block * dp;  // K rows and K ring transposed
  float* ktr = ktc + key_block * dp;
  float* tmp = ktr + key_block * dp;
  float* orot_all = tmp + dp;
  const bool tq_k = t.k.kind == kv_row_kind::turboquant, tq_v = t.v.kind == kv_row_kind::turboquant;
  const bool k_direct = reads_rows_directly(t, t.k), v_direct = reads_rows_directly(t, t.v);

  float m[attention_max_queries], l[attention_max_queries];
  std::uint32_t lo_all = t.first[0], hi_all = t.last[0];
  for (std::uint32_t i = 0; i < t.n_q; ++i) {
    m[i] = -__builtin_inff();
    l[i] = 0.0f;
    t.used_rot[i] = false;
    for (std::uint32_t c = 0; c < d; c += L) V::store(t.out[i] + c, V::zero());
    if (tq_v)
      for (std::uint32_t c = 0; c < d; c += L) V::store(orot_all + i * dp + c, V::zero());
    lo_all = t.first[i] < lo_all ? t.first[i] : lo_all;
    hi_all = t.last[i] > hi_all ? t.last[i] : hi_all;
  }
  if (k_direct) prefetch_block(t.k, t, lo_all, hi_all);
  if (v_direct) prefetch_block(t.v, t, lo_all, hi_all);

  const f ninf = V::set1(-__builtin_inff());
  alignas(64) float sc[attention_max_queries][key_block];  // this block's scores
  std::uint32_t k_ring[attention_max_queries], v_ring[attention_max_queries];  // bit k: key k from the ring
  block_src k_src, v_src;
  for (std::uint32_t b = lo_all / key_block; b <= hi_all / key_block; ++b) {
    const std::uint32_t j0 = b * key_block, j1 = j0 + key_block - 1;
    if (k_direct) {
      prefetch_block(t.k, t, j0 + key_block, hi_all);
      block_sources(t.k, t, j0, lo_all, hi_all, k_src);
    } else {
      const bool k_any_ring = decode_block<V>(t.k, t, j0, lo_all, hi_all, kc, kr, tmp);
      transpose_block<V>(kc, d, ktc);
      if (k_any_ring) transpose_block<V>(kr, d, ktr);
    }
    if (v_direct) {
      prefetch_block(t.v, t, j0 + key_block, hi_all);
      block_sources(t.v, t, j0, lo_all, hi_all, v_src);
    } else {
      decode_block<V>(t.v, t, j0, lo_all, hi_all, vc, vr, tmp);
    }

    // Scores of every query that meets the block: groups of up to G queries reading only cache
    // rows; a query that reads ring keys (near the end of its window) alone, against both.
    const auto meets = [&](std::uint32_t i) { return t.last[i] >= j0 && t.first[i] <= j1; };
    for (std::uint32_t i = 0; i < t.n_q; ++i) {
      k_ring[i] = v_ring[i] = 0;
      if ((t.k.ring || t.v.ring) && meets(i))
        for (std::uint32_t j = t.first[i] > j0 ? t.first[i] : j0; j <= j1 && j <= t.last[i]; ++j) {
          k_ring[i] |= std::uint32_t(reads_ring(t.k, t, i, j)) << (j - j0);
          v_ring[i] |= std::uint32_t(reads_ring(t.v, t, i, j)) << (j - j0);
        }
    }
    for (std::uint32_t i = 0; i < t.n_q && k_direct;) {  // one token: every query reads the same keys
      const std::uint32_t a = (t.first[i] > j0 ? t.first[i] : j0) - j0, e = (t.last[i] < j1 ? t.last[i] : j1) - j0;
      const std::uint32_t keys = ((2u << e) - 1) & ~((1u << a) - 1);
      const int n = int(t.n_q - i < G ? t.n_q - i : G);
      block_scores_rows_n<V>(n, k_src, k_ring[i], keys, t.q + i, d, t.scale, sc + i);
      i += std::uint32_t(n);
    }
    for (std::uint32_t i = 0; i < t.n_q && !k_direct;) {
      if (!meets(i)) {
        ++i;
        continue;
      }
      if (k_ring[i] == 0) {
        const float* qs[G];
        int n = 0;
        for (std::uint32_t k = i; k < t.n_q && n < G && meets(k) && k_ring[k] == 0; ++k) qs[n++] = tq_k ? t.q_rot[k] : t.q[k];
        block_scores_n<V>(n, ktc, qs, d, t.scale, sc + i);
        i += std::uint32_t(n);
        continue;
      }
      float sr[1][key_block];
      const float* qr = t.q[i];
      block_scores_t<V, 1>(ktr, &qr, d, t.scale, sr);
      const float* qc = tq_k ? t.q_rot[i] : t.q[i];
      block_scores_t<V, 1>(ktc, &qc, d, t.scale, sc + i);
      for (std::uint32_t k = 0; k < key_block; ++k)
        if (k_ring[i] >> k & 1) sc[i][k] = sr[0][k];
      ++i;
    }

    // Online softmax per query, then the values: pairs of queries with the same keys (the GQA
    // heads of one token) share every value vector loaded.
    for (std::uint32_t i = 0; i < t.n_q;) {
      if (!meets(i)) {
        ++i;
        continue;
      }
      const std::uint32_t a = (t.first[i] > j0 ? t.first[i] : j0) - j0, e = (t.last[i] < j1 ? t.last[i] : j1) - j0;
      const std::uint32_t in_range = ((2u << e) - 1) & ~((1u << a) - 1);
      const std::uint32_t rot = tq_v ? in_range & ~v_ring[i] : 0;
      const bool pair = i + 1 < t.n_q && t.first[i + 1] == t.first[i] && t.last[i + 1] == t.last[i] &&
                        t.recent_from[i + 1] == t.recent_from[i] && !rot;
      const std::uint32_t nq = pair ? 2 : 1;
      f pv[2][NB];  // softmax weights of the (one or two) queries, kept in registers
      for (std::uint32_t iq = i; iq < i + nq; ++iq) {
        f s[NB];
        for (int h = 0; h < NB; ++h) {
          s[h] = V::load(sc[iq] + h * L);
          if (in_range != 0xFFFFu) {
            const f idx = V::add(V::iota(), V::set1(float(h * L)));
            s[h] = V::blend(s[h], ninf, V::lt(idx, V::set1(float(a))));
            s[h] = V::blend(s[h], ninf, V::lt(V::set1(float(e)), idx));
          }
        }
        f smax = s[0];
        for (int h = 1; h < NB; ++h) smax = V::max(smax, s[h]);
        const float bm = V::hmax(smax);
        if (bm > m[iq]) {
          const float alpha = __builtin_expf(m[iq] - bm);
          const f va = V::set1(alpha);
          float* o = t.out[iq];
          for (std::uint32_t c = 0; c < d; c += L) V::store(o + c, V::mul(V::load(o + c), va));
          if (tq_v)
            for (std::uint32_t c = 0; c < d; c += L) V::store(orot_all + iq * dp + c, V::mul(V::load(orot_all + iq * dp + c), va));
          l[iq] *= alpha;
          m[iq] = bm;
        }
        f psum = V::zero();
        for (int h = 0; h < NB; ++h) {
          const f ph = exp_nonpositive<V>(V::sub(s[h], V::set1(m[iq])));
          pv[iq - i][h] = ph;
          psum = V::add(psum, ph);
        }
        l[iq] += V::hsum(psum);
        if (rot) t.used_rot[iq] = true;
      }
      // o += Σ p_k·v_k over the keys in range (increasing k). Rows of a TurboQuant V (not from
      // the ring) go to the rotated accumulator instead.
      if (v_direct) {  // never TurboQuant: no rotated part
        float* const o2[2] = {t.out[i], pair ? t.out[i + 1] : nullptr};
        if (pair)
          add_values_src_all<V, 2>(o2, d, pv, in_range, v_ring[i], v_src);
        else
          add_values_src_all<V, 1>(o2, d, pv, in_range, v_ring[i], v_src);
      } else if (pair) {
        constexpr int DT2 = L == 16 ? 8 : 4;
        std::uint32_t c0 = 0;
        for (; c0 + DT2 * L <= d; c0 += DT2 * L)
          add_values_pair<V, DT2>(t.out[i], t.out[i + 1], c0, pv[0], pv[1], in_range, v_ring[i], vc, vr);
        for (; c0 < d; c0 += L)
          add_values_pair<V, 1>(t.out[i], t.out[i + 1], c0, pv[0], pv[1], in_range, v_ring[i], vc, vr);
      } else {
        for (int target = 0; target < (rot ? 2 : 1); ++target) {
          float* dst = target ? orot_all + i * dp : t.out[i];
          const std::uint32_t keys = target ? rot : in_range & ~rot;
          if (!keys) continue;
          std::uint32_t c0 = 0;
          for (; c0 + DT * L <= d; c0 += DT * L) add_values<V, DT>(dst, c0, pv[0], keys, v_ring[i], vc, vr);
          for (; c0 < d; c0 += L) add_values<V, 1>(dst, c0, pv[0], keys, v_ring[i], vc, vr);
        }
      }
      i += nq;
    }
  }
  for (std::uint32_t i = 0; i < t.n_q; ++i) {
    const f inv = V::set1(1.0f / l[i]);
    for (std::uint32_t c = 0; c < d; c += L) V::store(t.out[i] + c, V::mul(V::load(t.out[i] + c), inv));
    if (t.used_rot[i])
      for (std::uint32_t c = 0; c < d; c += L) V::store(t.out_rot[i] + c, V::mul(V::load(orot_all + i * dp + c), inv));
  }
  return true;
}

}  // namespace
}  // namespace strata::kernels::cpu::x86
