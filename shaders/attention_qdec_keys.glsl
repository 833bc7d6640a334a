// attention_qdec.glsl's thread-a-key form (the default where the LANES form is not taken, tuning.hpp
// qdec_lanes), appended after it by the shader assembler (pipelines.cpp) when LANES is not defined: it
// uses attention_qdec.glsl's bindings, decoders and helpers. A thread scores a key of the tile; key
// streams of lanes sum the values (attention_qdec.glsl's header).
#ifndef LANES
const uint GV = (G + 3u) / 4u, NW = WG / 32u;
// Lanes per value stream: D / 4 where that divides a warp (D <= 64), else 32 (chunks of 128 dims).
const uint LPK = D <= 64u && 32u % (D / 4u) == 0u ? D / 4u : 32u;
const uint KPW = 32u / LPK, NS = NW * KPW, CW = 4u * LPK, DCH = (D + CW - 1u) / CW;
#ifndef QDEC_KIF
#define QDEC_KIF 8
#endif
const uint KIF = QDEC_KIF;  // value rows whose loads a stream keeps in flight (tuning.hpp qdec_kif)

shared vec4 qk[G][D / 4u];  // queries × scale as the K side scores them (rotated for TurboQuant)
// With RING_SPLIT the window's split scores and sums its f16 rows in qk and acc (RING_ACC 0).
#if defined(KV_RING) && KV_V_KIND == 3 && !defined(RING_SPLIT)
#define RING_ACC 1
#else
#define RING_ACC 0
#endif
#if defined(KV_RING) && KV_K_KIND == 3 && !defined(RING_SPLIT)
shared vec4 qp[G][D / 4u];  // the plain queries × scale, for f16 ring keys
#define QPLAIN qp
#else
#define QPLAIN qk
#endif
shared vec4 probs[WG][GV];
shared uint slot_of[WG];
#ifdef KV_RING
shared uint ring_of[WG];  // ring row of the key's value, ~0u: its stored row
#endif
shared float red[G][WG / MIN_SUBGROUP];
#ifdef QDEC_IDOT
shared uvec4 qi8[G][D / 16u];
shared float qstep[G][D / 32u];
// qi8 and qstep from qk (complete before: a barrier; visible after the caller's next barrier).
void quantize_queries() {
  const uint tid = gl_LocalInvocationID.x;
  for (uint i = tid; i < G * (D / 32u); i += WG) {
    const uint g = i / (D / 32u), b = i % (D / 32u);
    float amax = 0.0;
    [[unroll]] for (uint c = 0u; c < 8u; ++c) amax = max(amax, max_abs4(qk[g][8u * b + c]));
    const float inv = amax > 0.0 ? 127.0 / amax : 0.0;
    uint w[8];
    [[unroll]] for (uint c = 0u; c < 8u; ++c) w[c] = query_int8x4(qk[g][8u * b + c], inv);
    qi8[g][2u * b] = uvec4(w[0], w[1], w[2], w[3]);
    qi8[g][2u * b + 1u] = uvec4(w[4], w[5], w[6], w[7]);
    qstep[g][b] = amax / 127.0;
  }
}
#endif
#if KV_HAS_TQ
#define VSUM rot  // kv_codec's rotation buffer (TQ_ROT_N >= G vectors) doubles as the value sums
#else
shared float vsum[G * D];
#define VSUM vsum
#endif

// Per-head maximum or sum over subgroups s0 .. s0 + n - 1 of one value per thread and head, through red[]
// (uniform: every thread of the workgroup calls it, for its own span).
void subgroups_reduce(inout float v[G], bool is_max, uint s0, uint n) {
  [[unroll]] for (uint g = 0u; g < G; ++g) v[g] = is_max ? subgroupMax(v[g]) : subgroupAdd(v[g]);
  barrier();  // red[] may still be read by the previous reduction
  if (subgroupElect())
    [[unroll]] for (uint g = 0u; g < G; ++g) red[g][gl_SubgroupID] = v[g];
  barrier();
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    float r = red[g][s0];
    for (uint s = 1u; s < n; ++s) r = is_max ? max(r, red[g][s0 + s]) : r + red[g][s0 + s];
    v[g] = r;
  }
}
// Per-head maximum or sum over the workgroup of one value per thread and head.
void wg_reduce(inout float v[G], bool is_max) { subgroups_reduce(v, is_max, 0u, gl_NumSubgroups); }

#if defined(QDEC_VAHEAD) && !(defined(QDEC_WARP) && defined(QDEC_VFOLD))
#error "attention_qdec QDEC_VAHEAD: needs QDEC_WARP (a unit's keys) and QDEC_VFOLD (codes without their scale)"
#endif
#ifdef QDEC_VROW
// QDEC_VROW: the thread that scores a key also loads its value row, as the 16-byte words that cover it
// (QDEC_KVEC's loads: ~4 L1 wavefronts a row), beside its key row, and stages it in shared memory, where
// its unit's lanes read their dims' codes after the softmax: a tile's value sums wait on no global load
// (with 8 rows in flight a stream, three round trips a tile after QDEC_VAHEAD's first). Rows of at most
// 4 such words (tq3 / tq2 values at head_dim 128); tiles reaching the window keep the streams' loads.
#if !(defined(QDEC_WARP) && defined(QDEC_VFOLD)) || defined(QDEC_VAHEAD)
#error "attention_qdec QDEC_VROW: needs QDEC_WARP and QDEC_VFOLD, and replaces QDEC_VAHEAD"
#endif
const uint VV4 = (KV_V_ROW_BYTES + 14u + 15u) / 16u;  // 16-byte words covering a row at an even byte
const float vrow_of_at_most_4_words[VV4 <= 4u ? 1 : -1] = float[](0.0);  // a compile error otherwise
layout(binding = 3, std430) readonly buffer Vw4 { uvec4 vw4[]; };
shared uint vrow[WG * VV4 * 4u];  // key i of the tile: words [i·VV4·4, (i + 1)·VV4·4), from its row's first covering word
// n bits (8 or 16, not straddling a word) at byte x of the staged window of the tile's key i.
uint vrow_bits(uint i, uint x, uint n) { return bitfieldExtract(vrow[i * VV4 * 4u + (x >> 2)], int((x & 3u) * 8u), int(n)); }
#endif
#ifdef QDEC_WARP
#extension GL_KHR_shader_subgroup_shuffle : require
// QDEC_WARP: each unit of 32 threads (a warp where subgroups are 32 wide) is a stream of its own
// over its 32 keys of every tile: a thread scores a key, the unit keeps its own softmax state, and
// its lanes sum those keys' values, so a tile needs no workgroup barrier (four before: the tile's
// maximum and sum). The units meet once, at the end, where their states and sums merge.
shared float unit_m[NW][G], unit_l[NW][G];
// Per-head maximum or sum over this thread's unit: shuffles where subgroups hold whole units (32
// lanes and more), else through shared memory at workgroup barriers (uniform: every thread calls it).
void unit_reduce(inout float v[G], bool is_max) {
  if (gl_SubgroupSize >= 32u) {
    [[unroll]] for (uint o = 16u; o > 0u; o /= 2u)
      [[unroll]] for (uint g = 0u; g < G; ++g) {
        const float x = subgroupShuffleXor(v[g], o);
        v[g] = is_max ? max(v[g], x) : v[g] + x;
      }
    return;
  }
  const uint per = 32u / gl_SubgroupSize;  // the unit's subgroups
  subgroups_reduce(v, is_max, gl_LocalInvocationID.x / 32u * per, per);
}
// The unit's shared-memory writes visible to the unit (uniform, as unit_reduce).
void unit_sync() {
  if (gl_SubgroupSize >= 32u) {
    subgroupMemoryBarrierShared();
    subgroupBarrier();
  } else {
    barrier();
  }
}
#endif

#if KV_K_KIND >= 2
const uint KNW = (KV_K_ROW_BYTES + 3u) / 4u;
#ifdef QDEC_KVEC
// QDEC_KVEC: the row read as the 16-byte words that cover it (the cache buffers end 16 bytes past
// their last row: runtime kv_setup.cpp), then shifted down to its first byte. Each load of a warp
// touches one line a thread (its own row), so 16-byte loads need ~4 L1 wavefronts a thread where
// 4-byte ones need ~13: at depth 32768 the word loads were ~3.4 M wavefronts a layer (bench/
// RESULTS.md session 69), ~15 us of a ~70 us kernel.
layout(binding = 2, std430) readonly buffer Kw4 { uvec4 kw4[]; };
const uint KV4 = (KV_K_ROW_BYTES + 14u + 15u) / 16u, KA = 4u * KV4;
#endif
// Bytes [b, b + KV_K_ROW_BYTES) of K (b even) as little-endian words w[k] = bytes 4k..4k+3:
// aligned loads, funnel-shifted by 16 bits when b is not a multiple of 4. The word past the
// last one is read only when it holds row bytes (a misaligned row of a multiple of 4 bytes).
void k_words(uint b, out uint w[KNW]) {
#ifdef QDEC_KVEC
  uint a[KA];
  [[unroll]] for (uint k = 0u; k < KV4; ++k) {
    const uvec4 x = kw4[(b >> 4) + k];
    a[4u * k] = x.x;
    a[4u * k + 1u] = x.y;
    a[4u * k + 2u] = x.z;
    a[4u * k + 3u] = x.w;
  }
  // The row's first word sits at word q of the window: a shift by q in two steps (1, then 2),
  // words past the window zero (they hold no row bytes).
  const uint q = (b >> 2) & 3u, sh = (b & 2u) << 3;
  uint t[KNW + 3u], c[KNW + 1u];
  [[unroll]] for (uint k = 0u; k < KNW + 3u; ++k)
    t[k] = (q & 1u) != 0u ? (k + 1u < KA ? a[k + 1u] : 0u) : (k < KA ? a[k] : 0u);
  [[unroll]] for (uint k = 0u; k <= KNW; ++k) c[k] = (q & 2u) != 0u ? t[k + 2u] : t[k];
  [[unroll]] for (uint k = 0u; k < KNW; ++k) w[k] = sh == 0u ? c[k] : (c[k] >> 16) | (c[k + 1u] << 16);
#else
  const uint i0 = b >> 2, sh = (b & 2u) << 3;
  uint a[KNW + 1u];
  [[unroll]] for (uint k = 0u; k < KNW; ++k) a[k] = kw[i0 + k];
  a[KNW] = KV_K_ROW_BYTES % 4u == 0u && sh != 0u ? kw[i0 + KNW] : 0u;
  [[unroll]] for (uint k = 0u; k < KNW; ++k) w[k] = sh == 0u ? a[k] : (a[k] >> 16) | (a[k + 1u] << 16);
#endif
}
// n bits at bit `bit` of the row (no field of either format straddles a word).
#define KBITS(bit, n) bitfieldExtract(kwd[(bit) >> 5], int((bit) & 31u), int(n))
#endif

#define V_ROW(jj, r) V_CODES(slot_of[jj] * p.n_head_kv + hk, r)

// Adds q·k of the stored key row `row` (slot·n_head_kv + head) to s[g] for every head g: f32 / f16 keys
// (key_scores_w scores the other kinds from their row's words).
#if KV_K_KIND == 0 || KV_K_KIND == 1
void key_scores(uint row, inout float s[G]) {
  const uint kb = row * (D / 4u);
  [[unroll]] for (uint c = 0u; c < D / 4u; ++c) {
#if KV_K_KIND == 0
    const vec4 k = kf[kb + c];
#else
    const vec4 k = vec4(kh[kb + c]);
#endif
    [[unroll]] for (uint g = 0u; g < G; ++g) s[g] += dot(qk[g][c], k);
  }
}
#else
// Adds q·k of the key row whose words (k_words) are kwd to s[g] for every head g.
void key_scores_w(uint kwd[KNW], inout float s[G]) {
#if KV_K_KIND == 2
  [[unroll]] for (uint b = 0u; b < D / 32u; ++b) {
    const uint b0 = b * 34u * 8u;
    float a[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) a[g] = 0.0;
    [[unroll]] for (uint i = 0u; i < 32u; i += 4u) {
      vec4 x;
      [[unroll]] for (uint e = 0u; e < 4u; ++e) {
        const uint bit = b0 + 16u + 8u * (i + e);
        x[e] = float(bitfieldExtract(int(kwd[bit >> 5]), int(bit & 31u), 8));
      }
      [[unroll]] for (uint g = 0u; g < G; ++g) a[g] += dot(qk[g][(32u * b + i) / 4u], x);
    }
    const float d = unpackHalf2x16(KBITS(b0, 16u)).x;
    [[unroll]] for (uint g = 0u; g < G; ++g) s[g] += d * a[g];
  }
#elif defined(QDEC_IDOT)
  [[unroll]] for (uint sg = 0u; sg < TQK_SEGMENTS; ++sg) {
    const uint b0 = TQK_SEG_BYTE_OFFSET[sg] * 8u, e0 = TQK_SEG_ELEM_OFFSET[sg];
    float a[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) a[g] = 0.0;
    [[unroll]] for (uint blk = 0u; blk < TQK_SEG_N[sg]; blk += 32u) {
      int ia[G];
      [[unroll]] for (uint g = 0u; g < G; ++g) ia[g] = 0;
      [[unroll]] for (uint i = blk; i < blk + 32u; i += 16u) {
        uvec4 qw[G];
        [[unroll]] for (uint g = 0u; g < G; ++g) qw[g] = qi8[g][(e0 + i) / 16u];
        [[unroll]] for (uint e = 0u; e < 16u; e += 4u) {
#if KV_K_TQ == 3
          const uint w = idot_word(sg, KBITS(b0 + 16u + (i + e) * 2u, 8u), KBITS(b0 + TQK_SEG_HIGH_OFFSET[sg] * 8u + i + e, 4u));
#else
          const uint w = idot_word(sg, KBITS(b0 + 16u + (i + e) * 2u, 8u), 0u);
#endif
          [[unroll]] for (uint g = 0u; g < G; ++g) ia[g] += dot4(w, qw[g][e / 4u]);
        }
      }
      [[unroll]] for (uint g = 0u; g < G; ++g) a[g] += float(ia[g]) * qstep[g][(e0 + blk) / 32u];
    }
    const float sc = unpackHalf2x16(KBITS(b0, 16u)).x * TQK_SEG_INV_SQRT_N[sg] * kstep[sg];
    [[unroll]] for (uint g = 0u; g < G; ++g) s[g] += sc * a[g];
  }
#else
  [[unroll]] for (uint sg = 0u; sg < TQK_SEGMENTS; ++sg) {
    const uint b0 = TQK_SEG_BYTE_OFFSET[sg] * 8u, e0 = TQK_SEG_ELEM_OFFSET[sg];
    float a[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) a[g] = 0.0;
    [[unroll]] for (uint i = 0u; i < TQK_SEG_N[sg]; i += 4u) {
      vec4 c;
      [[unroll]] for (uint e = 0u; e < 4u; ++e) {
        uint code = KBITS(b0 + 16u + (i + e) * TQK_LOW_BITS, TQK_LOW_BITS);
#if KV_K_TQ == 3
        code |= KBITS(b0 + TQK_SEG_HIGH_OFFSET[sg] * 8u + i + e, 1u) << 2;
#endif
        c[e] = kcent[sg * 16u + code];
      }
      [[unroll]] for (uint g = 0u; g < G; ++g) a[g] += dot(qk[g][(e0 + i) / 4u], c);
    }
    const float sc = unpackHalf2x16(KBITS(b0, 16u)).x * TQK_SEG_INV_SQRT_N[sg];
    [[unroll]] for (uint g = 0u; g < G; ++g) s[g] += sc * a[g];
  }
#endif
}
#endif

#ifdef KV_RING
// Adds q·k of f16 ring row (rr·n_head_kv + head) to s[g].
void ring_scores(uint rb, inout float s[G]) {
  [[unroll]] for (uint c = 0u; c < D / 4u; ++c) {
    const vec4 k = vec4(kring[rb + c]);
    [[unroll]] for (uint g = 0u; g < G; ++g) s[g] += dot(QPLAIN[g][c], k);
  }
}
#endif

// What a thread loads for key j of a tile before scoring it: its cache slot (~0u where it counts in another
// split), whether it counts, where the ring holds its key (k_ring: scored from the ring row rr) or value
// (vring_row, else ~0u), and the words of its key row where the kind has them.
struct key_fetch {
  uint slot, rr, vring_row;
  bool counts, k_ring;
#if KV_K_KIND >= 2
  uint kwd[KNW];
#endif
};
// blk: key j's block-table entry, blocks[btab + j / p.block_size] (block_of; the caller may load it a tile ahead).
uint block_of(uint j, uint last, uint btab) { return j <= last ? blocks[btab + j / p.block_size] : 0u; }
key_fetch fetch_key(uint j, uint blk, uint last, uint seq, uint recent_from, bool ring_split) {
  key_fetch f;
  f.slot = f.rr = 0u;
  f.vring_row = ~0u;
  f.counts = j <= last;
  f.k_ring = false;
#if KV_K_KIND >= 2
  [[unroll]] for (uint k = 0u; k < KNW; ++k) f.kwd[k] = 0u;
#endif
  if (j > last) return f;
  const uint hk = gl_WorkGroupID.x;
  f.slot = blk * p.block_size + j % p.block_size;
#ifdef KV_RING
  bool held = false;  // the ring holds key j
  if (j >= recent_from) {
    f.rr = seq * p.ring_rows + j % p.ring_rows;
    held = tags[f.rr] == j;
  }
#ifdef RING_SPLIT
  f.counts = held == ring_split;  // the ring's keys count in the window's split, the others in theirs
  if (!f.counts) f.slot = ~0u;
#endif
  if (f.counts && held) {
    f.k_ring = KV_K_KIND >= 2;
    if (KV_V_KIND >= 2) f.vring_row = f.rr;
  }
#endif
  const uint row = f.slot * p.n_head_kv + hk;
#if KV_K_KIND >= 2
  if (f.counts && !f.k_ring) k_words(row * KV_K_ROW_BYTES, f.kwd);
#endif
  return f;
}

// The streams' value sums `a` added into VSUM (G x D) one stream after another; `first`: the
// first stream's replace what VSUM held.
void stream_sums(vec4 a[G][DCH], uint stream, uint sl, bool first) {
  for (uint st = 0u; st < NS; ++st) {
    if (stream == st)
      [[unroll]] for (uint c = 0u; c < DCH; ++c) {
        const uint d = CW * c + 4u * sl;
        if (d >= D) break;
        [[unroll]] for (uint g = 0u; g < G; ++g)
          [[unroll]] for (uint i = 0u; i < 4u; ++i)
            VSUM[g * D + d + i] = (first && st == 0u ? 0.0 : VSUM[g * D + d + i]) + a[g][c][i];
      }
    barrier();
  }
}

void main() {
  const uint hk = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint lane = tid % 32u, stream = (tid / 32u) * KPW + lane / LPK, sl = lane % LPK;
  const uint h0 = hk * G;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
#endif
  if ((QDEC_SKIP & 64) != 0) return;
  uint start, last;
  RETURN_IF_NO_KEYS(t, h0, start, last);
  const uint P = uint(pos[t]), seq = seq_row[t];
#ifdef KV_RING
  const uint recent_from = P + 1u >= p.window ? P + 1u - p.window : 0u;
#endif
#ifdef RING_SPLIT
  const bool ring_split = split == p.n_splits - 1u;  // the window's split (uniform)
#else
  const bool ring_split = false;
#endif
  const uint btab = seq * p.max_blocks;
  if ((QDEC_SKIP & 16) == 0) load_centroids();
#ifdef QDEC_IDOT
  load_idot_tables();
#endif
#ifdef QDEC_VFOLD
  load_value_pairs();
#endif
  // The group's G query heads are consecutive: G·D floats from head h0.
  const uint qb = p.q_off + t * p.q_stride + h0 * D;
#if KV_K_KIND == 3 && defined(QROT_IN)
  if (!ring_split) {
    const uint rb = (t * p.n_head + h0) * (D / 4u);
    for (uint i = tid; i < G * D / 4u; i += WG) qk[i / (D / 4u)][i % (D / 4u)] = qrot[rb + i] * p.scale;
#if defined(KV_RING) && !defined(RING_SPLIT)
    for (uint i = tid; i < G * D / 4u; i += WG)
      qp[i / (D / 4u)][i % (D / 4u)] = vec4(q[qb + 4u * i], q[qb + 4u * i + 1u], q[qb + 4u * i + 2u], q[qb + 4u * i + 3u]) * p.scale;
#endif
  } else
#elif KV_K_KIND == 3
  if (!ring_split) {
    if ((QDEC_SKIP & 128) == 0)
      for (uint i = tid; i < G * D; i += WG) rot[i] = q[qb + i];
    barrier();
#if defined(KV_RING) && !defined(RING_SPLIT)
    for (uint i = tid; i < G * D / 4u; i += WG)
      qp[i / (D / 4u)][i % (D / 4u)] = vec4(rot[4u * i], rot[4u * i + 1u], rot[4u * i + 2u], rot[4u * i + 3u]) * p.scale;
    barrier();
#endif
#if (QDEC_SKIP & 1) == 0
    tq_rotate_rot(G, true);
#endif
    for (uint i = tid; i < G * D / 4u; i += WG)
      qk[i / (D / 4u)][i % (D / 4u)] = vec4(rot[4u * i], rot[4u * i + 1u], rot[4u * i + 2u], rot[4u * i + 3u]) * p.scale;
  } else  // the window's split scores f16 rows: the plain query
#endif
  for (uint i = tid; i < G * D / 4u; i += WG)
    qk[i / (D / 4u)][i % (D / 4u)] = vec4(q[qb + 4u * i], q[qb + 4u * i + 1u], q[qb + 4u * i + 2u], q[qb + 4u * i + 3u]) * p.scale;
  barrier();
#ifdef QDEC_IDOT
  if (!ring_split) {  // uniform: the window's split scores no codes
    quantize_queries();
    barrier();
  }
#endif

  float m[G], l[G];
  vec4 acc[G][DCH];
#if RING_ACC
  vec4 accp[G][DCH];  // f16 ring values, plain domain
#define ACC_RING accp
#else
#define ACC_RING acc
#endif
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    m[g] = -1.0 / 0.0;
    l[g] = 0.0;
    [[unroll]] for (uint c = 0u; c < DCH; ++c) {
      acc[g][c] = vec4(0.0);
#if RING_ACC
      accp[g][c] = vec4(0.0);
#endif
    }
  }

#ifndef KV_RING
  const uint recent_from = 0u;
#endif
  // QDEC_BLK_AHEAD: the next tile's block-table entries loaded while this tile runs (one round trip
  // fewer on a tile's path: the table read, then the key row it addresses).
  uint blk_next = block_of(start + tid, last, btab);
  for (uint j0 = start; j0 <= last; j0 += WG) {
    const uint n_keys = min(WG, last + 1u - j0);
#ifdef KV_RING
    const bool tile_ring = j0 + n_keys > recent_from;  // some key of the tile may be in the ring
#endif
    // The keys this thread's stream sums: from k_first to k_end, k_step apart (QDEC_WARP: its unit's keys of
    // the tile, [32·unit, 32·unit + 32), shared by the unit's KPW streams).
#ifdef QDEC_WARP
    const uint k_first = tid / 32u * 32u + lane / LPK, k_end = min(tid / 32u * 32u + 32u, n_keys), k_step = KPW;
#else
    const uint k_first = stream, k_end = n_keys, k_step = NS;
#endif
#ifdef QDEC_BLK_AHEAD
    const uint blk = blk_next;
    blk_next = block_of(j0 + WG + tid, last, btab);
#else
    const uint blk = j0 == start ? blk_next : block_of(j0 + tid, last, btab);
#endif
    const key_fetch f = fetch_key(j0 + tid, blk, last, seq, recent_from, ring_split);
    const uint slot = f.slot;
    const bool counts = f.counts;
#ifdef KV_RING
    const uint vring_row = f.vring_row;
#endif
#ifdef QDEC_VROW
#ifdef KV_RING
    const bool staged = !tile_ring;  // uniform
#else
    const bool staged = true;
#endif
    // The value row's covering words, loaded now and stored once they land (a key that does not count
    // stores nothing: its weights are 0, and any staged bytes decode to finite centroids).
    const uint vb = (slot * p.n_head_kv + hk) * KV_V_ROW_BYTES;
    if (staged && counts && (QDEC_SKIP & 8) == 0) {
      uvec4 w[VV4];
      [[unroll]] for (uint k = 0u; k < VV4; ++k) w[k] = vw4[(vb >> 4) + k];
      [[unroll]] for (uint k = 0u; k < VV4; ++k)
        [[unroll]] for (uint e = 0u; e < 4u; ++e) vrow[(tid * VV4 + k) * 4u + e] = w[k][e];
    }
#endif
#ifdef QDEC_VAHEAD
    // QDEC_VAHEAD: the codes of a stream's first KIF value rows of the tile loaded now, beside the key rows,
    // instead of after the softmax (a round trip fewer on a unit's path a tile), where subgroups hold whole
    // units (the rows' slots from their scoring threads by shuffles) and no key of the tile is in the ring.
#ifdef KV_RING
    const bool ahead = gl_SubgroupSize >= 32u && !tile_ring && (QDEC_SKIP & 8) == 0;  // uniform
#else
    const bool ahead = gl_SubgroupSize >= 32u && (QDEC_SKIP & 8) == 0;
#endif
    const bool a_full = k_first + (KIF - 1u) * k_step < k_end;  // the stream has KIF keys (per stream)
    uvec2 vcodes[KIF];
    [[unroll]] for (uint u = 0u; u < KIF; ++u) vcodes[u] = uvec2(0u);
    if (ahead) {
      const rdims vd0 = v_dims_of(4u * sl);
      [[unroll]] for (uint u = 0u; u < KIF; ++u) {
        const uint row_slot = subgroupShuffle(slot, (gl_SubgroupInvocationID & ~31u) + (k_first + u * k_step) % 32u);
        if (a_full) vcodes[u] = v_codes(row_slot * p.n_head_kv + hk, vd0);
      }
    }
#endif
    float s[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) s[g] = 0.0;
    if (counts) {
#ifdef KV_RING
      if (f.k_ring) ring_scores((f.rr * p.n_head_kv + hk) * (D / 4u), s);
#endif
#if KV_K_KIND >= 2
      if (!f.k_ring && (QDEC_SKIP & 4) == 0) key_scores_w(f.kwd, s);
#else
      if ((QDEC_SKIP & 4) == 0) key_scores(slot * p.n_head_kv + hk, s);
#endif
    }
#ifdef QDEC_VFOLD
    float vsc = 1.0;  // the key's value scale, in its weights (1: a ring row's f16 value)
    if (counts && f.vring_row == ~0u) {
#ifdef QDEC_VROW
      if (staged) {
        const uint x = (vb & 15u) + TQV_SEG_BYTE_OFFSET[0];  // even: the f16 scale's two bytes in one word
        vsc = unpackHalf2x16(vrow_bits(tid, x, 16u)).x * TQV_SEG_INV_SQRT_N[0];
      } else
#endif
      vsc = v_row_scale(slot * p.n_head_kv + hk);
    }
#endif
    [[unroll]] for (uint g = 0u; g < G; ++g) s[g] = counts ? s[g] : -1.0 / 0.0;
    float mt[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) mt[g] = s[g];
#ifdef QDEC_WARP
    unit_reduce(mt, true);
#else
    wg_reduce(mt, true);
#endif
    float e[G], corr[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      const float m_new = max(m[g], mt[g]);
      e[g] = counts ? exp(s[g] - m_new) : 0.0;
      corr[g] = m[g] == m_new ? 1.0 : exp(m[g] - m_new);  // 1 while no key has counted (both -inf)
      m[g] = m_new;
    }
    [[unroll]] for (uint k = 0u; k < GV; ++k) {
      vec4 pv = vec4(0.0);
      [[unroll]] for (uint i = 0u; i < 4u; ++i)
        if (4u * k + i < G) pv[i] = e[4u * k + i];
#ifdef QDEC_VFOLD
      pv *= vsc;
#endif
      probs[tid][k] = pv;
    }
    slot_of[tid] = slot;
#ifdef KV_RING
    ring_of[tid] = vring_row;
#endif
#ifdef QDEC_WARP
    unit_sync();  // probs / slot_of / ring_of of the unit's keys; l: this thread's keys (summed at the end)
#else
    wg_reduce(e, false);  // its barriers also publish probs / slot_of / ring_of
#endif
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      l[g] = l[g] * corr[g] + e[g];
      [[unroll]] for (uint c = 0u; c < DCH; ++c) {
        acc[g][c] *= corr[g];
#if RING_ACC
        accp[g][c] *= corr[g];
#endif
      }
    }
    [[unroll]] for (uint c = 0u; c < DCH; ++c) {
      const uint d = CW * c + 4u * sl;
      if (d >= D || (QDEC_SKIP & 8) != 0) break;
      const rdims vd = v_dims_of(d);
      uint jj = k_first;
#ifdef QDEC_VAHEAD
      if (c == 0u && ahead && a_full) {  // the codes loaded beside the key rows
        [[unroll]] for (uint u = 0u; u < KIF; ++u) {
          const vec4 v = v_pairs(vcodes[u].x, vcodes[u].y);
          [[unroll]] for (uint g = 0u; g < G; ++g) acc[g][c] += probs[jj + u * k_step][g / 4u][g % 4u] * v;
        }
        jj += KIF * k_step;
      }
#endif
#ifdef QDEC_VROW
      if (staged) {
        for (; jj < k_end; jj += k_step) {
          const uint x = (slot_of[jj] * p.n_head_kv + hk) * KV_V_ROW_BYTES & 15u;
          const uint lo = vrow_bits(jj, x + vd.low, KV_V_TQ == 4 ? 16u : 8u);
          const uint hi = KV_V_TQ == 3 ? vrow_bits(jj, x + vd.high, 8u) >> vd.shift : 0u;
          const vec4 v = v_pairs(KV_V_TQ < 2 ? lo >> vd.shift : lo, hi);
          [[unroll]] for (uint g = 0u; g < G; ++g) acc[g][c] += probs[jj][g / 4u][g % 4u] * v;
        }
        continue;
      }
#endif
#ifdef KV_RING
      if (tile_ring) {
        if ((QDEC_SKIP & 256) != 0) continue;
        for (; jj < k_end; jj += k_step) {
#ifdef RING_SPLIT
          if (slot_of[jj] == ~0u) continue;  // counts in another split
#endif
          const uint rr = ring_of[jj];
          if (rr != ~0u) {
            const vec4 v = vec4(vring[(rr * p.n_head_kv + hk) * (D / 4u) + d / 4u]);
            [[unroll]] for (uint g = 0u; g < G; ++g) ACC_RING[g][c] += probs[jj][g / 4u][g % 4u] * v;
          } else {
            const vec4 v = V_ROW(jj, vd);
            [[unroll]] for (uint g = 0u; g < G; ++g) acc[g][c] += probs[jj][g / 4u][g % 4u] * v;
          }
        }
        continue;
      }
#endif
      for (; jj + (KIF - 1u) * k_step < k_end; jj += KIF * k_step) {  // KIF keys' loads in flight
        vec4 v[KIF];
        [[unroll]] for (uint u = 0u; u < KIF; ++u) v[u] = V_ROW(jj + u * k_step, vd);
        [[unroll]] for (uint u = 0u; u < KIF; ++u)
          [[unroll]] for (uint g = 0u; g < G; ++g) acc[g][c] += probs[jj + u * k_step][g / 4u][g % 4u] * v[u];
      }
      for (; jj < k_end; jj += k_step) {
        const vec4 v = V_ROW(jj, vd);
        [[unroll]] for (uint g = 0u; g < G; ++g) acc[g][c] += probs[jj][g / 4u][g % 4u] * v;
      }
    }
#ifdef QDEC_WARP
    unit_sync();  // the unit's probs / slot_of / ring_of are rewritten by the next tile
#else
    barrier();  // probs / slot_of / ring_of are rewritten by the next tile
#endif
  }

#ifdef QDEC_WARP
  // The units' states merged: head g's maximum M over the units, each unit's sums scaled by
  // exp(m - M) (0 for a unit no key counted in), l the units' weighted sums.
  unit_reduce(l, false);
  if (tid % 32u == 0u)
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      unit_m[tid / 32u][g] = m[g];
      unit_l[tid / 32u][g] = l[g];
    }
  barrier();
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    float M = -1.0 / 0.0, L = 0.0;
    for (uint u = 0u; u < NW; ++u) M = max(M, unit_m[u][g]);
    for (uint u = 0u; u < NW; ++u) L += unit_m[u][g] > -1.0 / 0.0 ? exp(unit_m[u][g] - M) * unit_l[u][g] : 0.0;
    const float w = m[g] > -1.0 / 0.0 ? exp(m[g] - M) : 0.0;
    [[unroll]] for (uint c = 0u; c < DCH; ++c) {
      acc[g][c] *= w;
#if RING_ACC
      accp[g][c] *= w;
#endif
    }
    m[g] = M;
    l[g] = L;
  }
#endif
  stream_sums(acc, stream, sl, true);
#if KV_V_KIND == 3
#if (QDEC_SKIP & 2) == 0 && !defined(ROT_LATER)
  if (!ring_split) tq_rotate_rot(G, false);  // a zero sum stays zero, so splits without compressed values need no test
#endif
#if RING_ACC
  stream_sums(accp, stream, sl, false);
#endif
#endif
  for (uint i = tid; i < G * D; i += WG) {
    const uint g = i / D, d = i % D;
#ifdef SPLIT
    part[((t * p.n_head + h0 + g) * p.n_splits + split) * (D + 2u) + d] = VSUM[i];
#else
    o[p.o_off + t * p.o_stride + (h0 + g) * D + d] = VSUM[i] / l[g];
#endif
  }
#ifdef SPLIT
  if (tid < G) {
    const uint pb = ((t * p.n_head + h0 + tid) * p.n_splits + split) * (D + 2u);
    part[pb + D] = m[tid];
    part[pb + D + 1u] = l[tid];
  }
#endif
#ifdef SPLIT_COMBINE
  if ((QDEC_SKIP & 32) == 0) SPLIT_COMBINE_CALL();
#endif
}
#endif
