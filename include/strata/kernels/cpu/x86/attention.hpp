// SIMD attention over one tile (kernels/cpu/attention_tile.hpp): each block of 16 keys is
// decoded once into f32 rows (F16C / vcvtph2ps for f16, int8 → float for q8_0, the fused
// TurboQuant decoder for tq rows) and then used by every query of the tile. Per query, the
// scores of a block come from 16 FMA accumulators over head_dim reduced by a fixed tree
// (V::reduce), so a query's arithmetic is the same in any tile: batching never changes results.
// Same math as attention_tile_reference, up to float rounding (sum order, exp polynomial).
#pragma once
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

// Decodes the keys of block [j0, j0 + 16) that some query of the tile reads: cache rows into
// `rows`, ring rows into `ring` (when the side has a ring). Slots nobody reads are zeroed, so
// every lane the kernels load holds a finite value. The next block's cache rows are prefetched:
// a head's rows sit n_head_kv head vectors apart, a stride the hardware prefetchers miss.
template <class V>
inline void decode_block(const attention_side& s, const attention_tile& t, std::uint32_t j0, std::uint32_t lo_all,
                         std::uint32_t hi_all, float* rows, float* ring, float* tmp) noexcept {
  const std::uint32_t d = t.head_dim;
  for (std::uint32_t j = j0 + key_block; j < j0 + 2 * key_block && j <= hi_all; ++j)
    for (std::size_t o = 0; o < s.row_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(s.rows[j - t.key_lo]) + o, _MM_HINT_T0);
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
    if (need_ring)
      for (std::uint32_t c = 0; c < d; c += V::lanes)
        V::store(lane_group<V>(ring, k, c), V::load_f16(s.ring[j - t.key_lo] + c));
    else
      zero_slot<V>(ring, k, d);
  }
}

// o[0..d) += Σ_{k ∈ keys} p_k·v_k (v_k from `vc`, or `vr` where bit k of from_ring is set), keys
// in increasing order, N vectors of o in registers per pass.
template <class V, int N>
inline void add_values(float* o, std::uint32_t c0, const float* p, std::uint32_t keys, std::uint32_t from_ring,
                       const float* vc, const float* vr) noexcept {
  constexpr int L = V::lanes;
  typename V::f acc[N];
  for (int u = 0; u < N; ++u) acc[u] = V::load(o + c0 + u * L);
  for (std::uint32_t k = 0; k < key_block; ++k) {
    if (!(keys >> k & 1)) continue;
    const typename V::f pk = V::bcast(p + k);
    const float* g = (from_ring >> k & 1 ? vr : vc) + (c0 / L) * key_block * L + k * L;
    for (int u = 0; u < N; ++u) acc[u] = V::fmadd(pk, V::load(g + u * key_block * L), acc[u]);
  }
  for (int u = 0; u < N; ++u) V::store(o + c0 + u * L, acc[u]);
}

// scale·⟨q, k⟩ for the 16 keys of a decoded block: NB vectors of L scores, each the fixed-tree
// reduction of L accumulators.
template <class V>
inline void block_scores(const float* blk, const float* q, std::uint32_t d, float scale,
                         typename V::f (&s)[key_block / V::lanes]) noexcept {
  constexpr int L = V::lanes, NB = int(key_block) / L;
  for (int h = 0; h < NB; ++h) {
    typename V::f acc[L];
    for (int k = 0; k < L; ++k) acc[k] = V::zero();
    for (std::uint32_t c = 0; c < d; c += L) {
      const typename V::f qc = V::load(q + c);
      const float* g = blk + (c / L) * key_block * L + h * L * L;
      for (int k = 0; k < L; ++k) acc[k] = V::fmadd(V::load(g + k * L), qc, acc[k]);
    }
    s[h] = V::mul(V::reduce(acc), V::set1(scale));
  }
}

// Returns false (leaving the tile untouched) when head_dim is not a multiple of the lane count;
// the caller then runs the reference.
template <class V>
inline bool attention_tile_simd(attention_tile& t) noexcept {
  using f = typename V::f;
  constexpr int L = V::lanes, NB = int(key_block) / L;  // score vectors per block
  constexpr int DT = 8;                                   // o vectors kept in registers per step
  const std::uint32_t d = t.head_dim;
  if (d == 0 || d % L) return false;
  const std::size_t dp = (d + 15) / 16 * 16;
  float* kc = t.scratch;
  float* kr = kc + key_block * dp;
  float* vc = kr + key_block * dp;
  float* vr = vc + key_block * dp;
  float* tmp = vr + key_block * dp;
  float* orot_all = tmp + dp;
  const bool tq_k = t.k.kind == kv_row_kind::turboquant, tq_v = t.v.kind == kv_row_kind::turboquant;

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

  const f ninf = V::set1(-__builtin_inff());
  for (std::uint32_t b = lo_all / key_block; b <= hi_all / key_block; ++b) {
    const std::uint32_t j0 = b * key_block;
    decode_block<V>(t.k, t, j0, lo_all, hi_all, kc, kr, tmp);
    decode_block<V>(t.v, t, j0, lo_all, hi_all, vc, vr, tmp);

    for (std::uint32_t i = 0; i < t.n_q; ++i) {
      if (t.last[i] < j0 || t.first[i] > j0 + key_block - 1) continue;
      const std::uint32_t a = (t.first[i] > j0 ? t.first[i] : j0) - j0;
      const std::uint32_t e = (t.last[i] < j0 + key_block - 1 ? t.last[i] : j0 + key_block - 1) - j0;
      // Which keys this query reads from the ring (only near the end of its window).
      std::uint32_t k_ring = 0, v_ring = 0;  // bit k: key k from the ring
      for (std::uint32_t k = a; k <= e; ++k) {
        k_ring |= std::uint32_t(reads_ring(t.k, t, i, j0 + k)) << k;
        v_ring |= std::uint32_t(reads_ring(t.v, t, i, j0 + k)) << k;
      }
      const std::uint32_t in_range = ((2u << e) - 1) & ~((1u << a) - 1);
      f s[NB] = {};
      if (k_ring != in_range) block_scores<V>(kc, tq_k ? t.q_rot[i] : t.q[i], d, t.scale, s);
      if (k_ring) {
        f sr[NB];
        block_scores<V>(kr, t.q[i], d, t.scale, sr);
        if (k_ring == in_range) {
          for (int h = 0; h < NB; ++h) s[h] = sr[h];
        } else {
          alignas(64) float pick[key_block];
          for (std::uint32_t k = 0; k < key_block; ++k) pick[k] = float(k_ring >> k & 1);
          for (int h = 0; h < NB; ++h) s[h] = V::blend(s[h], sr[h], V::lt(V::zero(), V::load(pick + h * L)));
        }
      }
      for (int h = 0; h < NB; ++h) {
        const f idx = V::add(V::iota(), V::set1(float(h * L)));
        s[h] = V::blend(s[h], ninf, V::lt(idx, V::set1(float(a))));
        s[h] = V::blend(s[h], ninf, V::lt(V::set1(float(e)), idx));
      }
      f smax = s[0];
      for (int h = 1; h < NB; ++h) smax = V::max(smax, s[h]);
      const float bm = V::hmax(smax);
      float* o = t.out[i];
      float* orot = orot_all + i * dp;
      if (bm > m[i]) {
        const f alpha = V::set1(__builtin_expf(m[i] - bm));
        for (std::uint32_t c = 0; c < d; c += L) V::store(o + c, V::mul(V::load(o + c), alpha));
        if (tq_v)
          for (std::uint32_t c = 0; c < d; c += L) V::store(orot + c, V::mul(V::load(orot + c), alpha));
        l[i] *= __builtin_expf(m[i] - bm);
        m[i] = bm;
      }
      alignas(64) float p[key_block];
      f psum = V::zero();
      for (int h = 0; h < NB; ++h) {
        const f ph = exp_nonpositive<V>(V::sub(s[h], V::set1(m[i])));
        V::store(p + h * L, ph);
        psum = V::add(psum, ph);
      }
      l[i] += V::hsum(psum);
      // o += Σ p_k·v_k over the keys in range (increasing k), DT vectors of o per step. Rows
      // of a TurboQuant V (not from the ring) go to the rotated accumulator instead.
      const std::uint32_t rot = tq_v ? in_range & ~v_ring : 0;
      if (rot) t.used_rot[i] = true;
      for (int target = 0; target < (rot ? 2 : 1); ++target) {
        float* dst = target ? orot : o;
        const std::uint32_t keys = target ? rot : in_range & ~rot;
        if (!keys) continue;
        std::uint32_t c0 = 0;
        for (; c0 + DT * L <= d; c0 += DT * L) add_values<V, DT>(dst, c0, p, keys, v_ring, vc, vr);
        for (; c0 < d; c0 += L) add_values<V, 1>(dst, c0, p, keys, v_ring, vc, vr);
      }
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
