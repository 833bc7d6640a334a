// Decode attention over a KV cache with a compressed side (q8_0 or TurboQuant; kv_codec.glsl),
// one workgroup per (KV head, token[, split]) as attention_dec.glsl: the G = GQA_G query heads
// that share a KV head are scored together, so each code row is read and decoded once per group.
// Semantics of kernels::cpu attention_compressed (and attention_q.glsl): positions within the
// full-precision window read the f16 ring when its tag holds them, older ones the codes.
// The kernel is latency-bound (a few workgroups per SM), so it is laid out to keep its chain of
// dependent memory accesses short:
// - The first tile's key slots, ring rows and tags, the queries and then the key code rows are
//   all loaded before the query rotation, so it and those loads overlap (a later tile's keys are
//   loaded at the end of the previous tile).
// - TurboQuant's rotations (queries forward, value sums back) run in registers, 4 elements a
//   thread, with subgroup shuffles (kv_codec.glsl's tq_rotate_*4): no barriers on a 32-wide
//   subgroup, instead of 27 barriers per rotation through shared memory.
// - Values: every key a stream reads in a tile is loaded in one batch (KIF rows in flight, ring
//   and code rows alike; keys past the tile's end re-read its last key with weight 0), not one
//   dependent load per key.
// - A tile has three barriers: the score maximum, the probabilities, the end of the tile (the
//   softmax denominators are summed per thread and reduced once at the end).
// Scores: thread i takes key i of a tile of WG keys. Its code row is read with 32-bit loads
// (rows start at even bytes: aligned words, funnel-shifted), indices and q8_0 bytes are decoded
// from the words in registers at compile-time bit positions, centroids come from a table in
// shared memory, and TurboQuant keys are scored against the G queries rotated once (<Rq, y>).
// Values: key streams of LPK lanes (one warp = 32 / LPK streams) split the tile's keys; each lane
// owns 4 dims of every chunk of 4·LPK dims, so a stream reads a value row's codes in one
// coalesced access. TurboQuant values are summed in the rotated domain and rotated back once
// per head at the end; f16 ring values go to a second, plain accumulator.
// SPLIT: workgroup z covers keys [z * split_len, (z + 1) * split_len) and writes unnormalised
// partials (acc, m, l) in attention.glsl's layout (each split rotates its own partial back, which
// the linear merge preserves), merged by attention.glsl's COMBINE pass or the SPLIT_COMBINE tail.
// Requires TQ_ROT_N >= GQA_G (the final sums use kv_codec's `rot`).
// STRATA_VK_TQ_QDEC=1 runs the first version (attention_qdec_v1.glsl) instead.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = WG) in;
#ifndef TAIL_COHERENT
#define TAIL_COHERENT
#endif
layout(binding = 0, std430) TAIL_COHERENT buffer Part { float part[]; };
layout(binding = 1, std430) readonly buffer Q { float q[]; };
layout(binding = 2, std430) readonly buffer Kw { uint kw[]; };
layout(binding = 2, std430) readonly buffer Kf { vec4 kf[]; };
layout(binding = 2, std430) readonly buffer Kh { f16vec4 kh[]; };
layout(binding = 3, std430) readonly buffer Vf { vec4 vf[]; };
layout(binding = 3, std430) readonly buffer Vh { f16vec4 vh[]; };
layout(binding = 3, std430) readonly buffer V8 { uint8_t v8[]; };
layout(binding = 3, std430) readonly buffer V16 { uint16_t v16[]; };
layout(binding = 4, std430) readonly buffer Pos { int pos[]; };
layout(binding = 5, std430) readonly buffer SeqRow { uint seq_row[]; };
layout(binding = 6, std430) readonly buffer Blocks { uint blocks[]; };
layout(binding = 7, std430) buffer O { float o[]; };
layout(binding = 8, std430) readonly buffer Kring { f16vec4 kring[]; };
layout(binding = 9, std430) readonly buffer Vring { f16vec4 vring[]; };
layout(binding = 10, std430) readonly buffer Tags { uint tags[]; };
layout(push_constant) uniform Params {
  uint n_head, n_head_kv, D, chunk;
  uint q_off, q_stride, o_off, o_stride;
  uint block_size, max_blocks;
  float scale;
  uint split_len, n_splits;
  uint window, ring_rows;
} p;


const uint D = KD, G = GQA_G, GV = (G + 3u) / 4u;
const uint NW = WG / 32u;
// Lanes per value stream: D / 4 where that divides a warp (D <= 64), else 32 (chunks of 128 dims).
const uint LPK = D <= 64u && 32u % (D / 4u) == 0u ? D / 4u : 32u;
const uint KPW = 32u / LPK, NS = NW * KPW, CW = 4u * LPK, DCH = (D + CW - 1u) / CW;
// Value rows a stream keeps in flight: all of its keys of a tile (WG / NS) where the raw loads
// are small (codes: 3 words a row), else 16.
const uint KIF = min(KV_V_KIND >= 2 ? 32u : 16u, WG / NS);

shared vec4 qk[G][D / 4u];  // queries × scale as the K side scores them (rotated for TurboQuant)
#if defined(KV_RING) && KV_K_KIND == 3
shared vec4 qp[G][D / 4u];  // the plain queries × scale, for f16 ring keys
#define QPLAIN qp
#else
#define QPLAIN qk
#endif
#if KV_K_KIND == 3
shared float kcent[TQK_SEGMENTS * 16u];
#endif
#if KV_V_KIND == 3
shared float vcent[TQV_SEGMENTS * 16u];
#endif
shared vec4 probs[WG][GV];
shared uint slot_of[WG];
#ifdef KV_RING
shared uint ring_of[WG];  // ring row of the key's value, ~0u: its stored row
#endif
shared float red[G][WG / MIN_SUBGROUP];
#if KV_HAS_TQ
#define VSUM rot  // kv_codec's rotation buffer (TQ_ROT_N >= G vectors) doubles as the value sums
#else
shared float vsum[G * D];
#define VSUM vsum
#endif

// Per-head maximum or sum over the workgroup of one value per thread and head. The caller
// ensures red[] is no longer read by a previous reduction (a barrier since).
void wg_reduce(inout float v[G], bool is_max) {
  [[unroll]] for (uint g = 0u; g < G; ++g) v[g] = is_max ? subgroupMax(v[g]) : subgroupAdd(v[g]);
  if (subgroupElect())
    [[unroll]] for (uint g = 0u; g < G; ++g) red[g][gl_SubgroupID] = v[g];
  barrier();
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    float r = red[g][0];
    for (uint s = 1u; s < gl_NumSubgroups; ++s) r = is_max ? max(r, red[g][s]) : r + red[g][s];
    v[g] = r;
  }
}

#if KV_K_KIND >= 2
const uint KNW = (KV_K_ROW_BYTES + 3u) / 4u;
// Bytes [b, b + KV_K_ROW_BYTES) of K (b even) as little-endian words w[k] = bytes 4k..4k+3:
// aligned loads, funnel-shifted by 16 bits when b is not a multiple of 4. The word past the
// last one is read only when it holds row bytes (a misaligned row of a multiple of 4 bytes).
void k_words(uint b, out uint w[KNW]) {
  const uint i0 = b >> 2, sh = (b & 2u) << 3;
  uint a[KNW + 1u];
  [[unroll]] for (uint k = 0u; k < KNW; ++k) a[k] = kw[i0 + k];
  a[KNW] = KV_K_ROW_BYTES % 4u == 0u && sh != 0u ? kw[i0 + KNW] : 0u;
  [[unroll]] for (uint k = 0u; k < KNW; ++k) w[k] = sh == 0u ? a[k] : (a[k] >> 16) | (a[k + 1u] << 16);
}
// n bits at bit `bit` of the row (no field of either format straddles a word).
#define KBITS(bit, n) bitfieldExtract(kwd[(bit) >> 5], int((bit) & 31u), int(n))

// Adds q·k of the key row held as words to s[g] for every head g.
void key_scores(uint kwd[KNW], inout float s[G]) {
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
#else
// Adds q·k of the stored f32/f16 key row `row` (slot·n_head_kv + head) to s[g].
void key_scores_row(uint row, inout float s[G]) {
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
#endif

#if defined(KV_RING) && KV_K_KIND >= 2
// Adds q·k of an f16 ring key row to s[g].
void ring_scores(f16vec4 kr[D / 4u], inout float s[G]) {
  [[unroll]] for (uint c = 0u; c < D / 4u; ++c) {
    const vec4 k = vec4(kr[c]);
    [[unroll]] for (uint g = 0u; g < G; ++g) s[g] += dot(QPLAIN[g][c], k);
  }
}
#endif

// What a thread loads for its key of a tile (key j0 + tid; past the last key, the last key's
// rows, scored -inf): its slot, then (tiles reaching the window) its ring row and tag, then its
// code row. fetch_slot issues the first loads, fetch_codes the code row (its address needs the
// slot), so that other loads can be issued between the two.
struct tile_keys {
  uint slot;
#ifdef KV_RING
  uint vrow;   // ring row of its value, ~0u: the stored row
  bool kring;  // its key is read from the ring
#if KV_K_KIND >= 2
  f16vec4 kr[D / 4u];  // its ring key row (tiles reaching the window)
#endif
#endif
#if KV_K_KIND >= 2
  uint kwd[KNW];
#endif
};
void fetch_slot(inout tile_keys k, uint j0, uint last, uint btab, uint seq, uint recent_from) {
  const uint hk = gl_WorkGroupID.x, j = min(j0 + gl_LocalInvocationID.x, last);
  k.slot = blocks[btab + j / p.block_size] * p.block_size + j % p.block_size;
#ifdef KV_RING
  k.vrow = ~0u;
  k.kring = false;
  if (j0 + min(WG, last + 1u - j0) > recent_from) {  // some key of the tile may be in the ring (uniform)
    const uint rr = seq * p.ring_rows + j % p.ring_rows;
#if KV_K_KIND >= 2
    const uint rb = (rr * p.n_head_kv + hk) * (D / 4u);
    [[unroll]] for (uint c = 0u; c < D / 4u; ++c) k.kr[c] = kring[rb + c];
#endif
    if (j0 + gl_LocalInvocationID.x <= last && j >= recent_from && tags[rr] == j) {
      k.kring = KV_K_KIND >= 2;
      if (KV_V_KIND >= 2) k.vrow = rr;
    }
  }
#endif
}
void fetch_codes(inout tile_keys k) {
#if KV_K_KIND >= 2
  k_words((k.slot * p.n_head_kv + gl_WorkGroupID.x) * KV_K_ROW_BYTES, k.kwd);
#endif
}

// Where a lane's 4 value dims d..d+3 sit in a stored row (per chunk, outside the key loop).
struct vdims {
  uint d;
#if KV_V_KIND == 2
  uint blk;  // byte of the q8_0 block within the row
#elif KV_V_KIND == 3
  uint blk, low, high, shift, cbase;  // block byte, low-plane byte, high-plane byte, bit, centroids
  float inv_sqrt_n;
#endif
};
vdims vdims_of(uint d) {
  vdims r;
  r.d = d;
#if KV_V_KIND == 2
  r.blk = d / 32u * 34u;
#elif KV_V_KIND == 3
  uint sg = 0u;
  [[unroll]] for (uint i = 1u; i < TQV_SEGMENTS; ++i)
    if (d >= TQV_SEG_ELEM_OFFSET[i]) sg = i;
  r.blk = 0u;
  r.high = 0u;
  r.inv_sqrt_n = 0.0;
  uint dl = d;
  [[unroll]] for (uint i = 0u; i < TQV_SEGMENTS; ++i)
    if (i == sg) {
      r.blk = TQV_SEG_BYTE_OFFSET[i];
      r.high = TQV_SEG_BYTE_OFFSET[i] + TQV_SEG_HIGH_OFFSET[i] + (d - TQV_SEG_ELEM_OFFSET[i]) / 8u;
      r.inv_sqrt_n = TQV_SEG_INV_SQRT_N[i];
      dl = d - TQV_SEG_ELEM_OFFSET[i];
    }
  r.low = r.blk + 2u + dl * TQV_LOW_BITS / 8u;
  r.shift = dl % 8u;
  r.cbase = sg * 16u;
#endif
  return r;
}
// Dims d..d+3 of the stored value row `row` (TurboQuant: in the rotated domain, y = s·c/√n), as
// raw loads (v_load) decoded later (v_decode), so that a batch of rows is in flight at once.
#if KV_V_KIND == 0 || KV_V_KIND == 1
#define VRAW vec4
VRAW v_load(uint row, vdims vd) {
  const uint b = row * KV_V_ROW_BYTES;
#if KV_V_KIND == 0
  return vf[(b + 4u * vd.d) / 16u];
#else
  return vec4(vh[(b + 2u * vd.d) / 8u]);
#endif
}
vec4 v_decode(VRAW r, vdims vd) { return r; }
#elif KV_V_KIND == 2
#define VRAW uvec3
VRAW v_load(uint row, vdims vd) {
  const uint b = row * KV_V_ROW_BYTES;
  const uint i = (b + vd.blk + 2u + vd.d % 32u) / 2u;
  return uvec3(uint(v16[i]), uint(v16[i + 1u]), uint(v16[(b + vd.blk) / 2u]));
}
vec4 v_decode(VRAW r, vdims vd) {
  const uint w = r.x | (r.y << 16);
  const vec4 x = vec4(bitfieldExtract(int(w), 0, 8), bitfieldExtract(int(w), 8, 8), bitfieldExtract(int(w), 16, 8),
                      bitfieldExtract(int(w), 24, 8));
  return x * unpackHalf2x16(r.z).x;
}
#else
#define VRAW uvec3
VRAW v_load(uint row, vdims vd) {
  const uint b = row * KV_V_ROW_BYTES;
  uvec3 r;
  r.x = uint(v16[(b + vd.blk) / 2u]);
#if KV_V_TQ == 4
  r.y = uint(v16[(b + vd.low) / 2u]);
#else
  r.y = uint(v8[b + vd.low]);
#endif
#if KV_V_TQ == 3
  r.z = uint(v8[b + vd.high]);
#else
  r.z = 0u;
#endif
  return r;
}
vec4 v_decode(VRAW r, vdims vd) {
  const float sc = unpackHalf2x16(r.x).x * vd.inv_sqrt_n;
#if KV_V_TQ == 1
  const uint lo = r.y >> vd.shift;
#else
  const uint lo = r.y;
#endif
#if KV_V_TQ == 3
  const uint hi = r.z >> vd.shift;
#endif
  vec4 c;
  [[unroll]] for (uint e = 0u; e < 4u; ++e) {
    uint code = bitfieldExtract(lo, int(e * TQV_LOW_BITS), int(TQV_LOW_BITS));
#if KV_V_TQ == 3
    code |= bitfieldExtract(hi, int(e), 1) << 2;
#endif
    c[e] = vcent[vd.cbase + code];
  }
  return c * sc;
}
#endif

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

#if KV_HAS_TQ
// The register rotations' layout: thread tid holds elements e0..e0+3 of vector g = pass·VPP + tid / TQ_TPV.
const uint VPP = WG / TQ_TPV, QPASS = (G + VPP - 1u) / VPP;
#endif

void main() {
  const uint hk = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint lane = tid % 32u, stream = (tid / 32u) * KPW + lane / LPK, sl = lane % LPK;
  const uint h0 = hk * G;
  // The group's G query heads are consecutive: G·D floats from head h0.
  const uint qb = p.q_off + t * p.q_stride + h0 * D;
#if KV_K_KIND == 3
  // The queries are loaded first (their address needs no other load), in the rotation's layout.
  const uint e0 = 4u * (tid % TQ_TPV);
  vec4 qx[QPASS];
  [[unroll]] for (uint pass = 0u; pass < QPASS; ++pass) {
    const uint g = pass * VPP + tid / TQ_TPV, i = qb + g * D + e0;
    qx[pass] = g < G && e0 < D ? vec4(q[i], q[i + 1u], q[i + 2u], q[i + 3u]) : vec4(0.0);
  }
#endif
  const uint P = uint(pos[t]), seq = seq_row[t];
  uint start = p.chunk != 0u ? P / p.chunk * p.chunk : 0u;
  uint last = P;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
  start = max(start, split * p.split_len);
  last = min(P, (split + 1u) * p.split_len - 1u);
  if (start > last) {  // nothing of this split is visible to the token (uniform per workgroup)
    if (tid < G) {
      const uint pb = ((t * p.n_head + h0 + tid) * p.n_splits + split) * (D + 2u);
      part[pb + D] = -1.0 / 0.0;
      part[pb + D + 1u] = 0.0;
    }
#ifdef SPLIT_COMBINE
    SPLIT_COMBINE_CALL();
#endif
    return;
  }
#endif
#ifdef KV_RING
  const uint recent_from = P + 1u >= p.window ? P + 1u - p.window : 0u;
#else
  const uint recent_from = 0u;
#endif
  const uint btab = seq * p.max_blocks;
  tile_keys tk;
  fetch_slot(tk, start, last, btab, seq, recent_from);
#if KV_K_KIND == 3
  for (uint i = tid; i < TQK_SEGMENTS * 16u; i += WG) kcent[i] = TQK_CENTROIDS[i];
#endif
#if KV_V_KIND == 3
  for (uint i = tid; i < TQV_SEGMENTS * 16u; i += WG) vcent[i] = TQV_CENTROIDS[i];
#endif
#if KV_K_KIND != 3
  for (uint i = tid; i < G * D / 4u; i += WG)
    qk[i / (D / 4u)][i % (D / 4u)] = vec4(q[qb + 4u * i], q[qb + 4u * i + 1u], q[qb + 4u * i + 2u], q[qb + 4u * i + 3u]) * p.scale;
#endif
  fetch_codes(tk);
#if KV_K_KIND == 3
  [[unroll]] for (uint pass = 0u; pass < QPASS; ++pass) {
    const uint g = pass * VPP + tid / TQ_TPV;
    const bool act = g < G && e0 < D;
#ifdef KV_RING
    if (act) qp[g][e0 / 4u] = qx[pass] * p.scale;
#endif
    const vec4 x = tq_rotate_forward4(qx[pass], e0);  // every thread: the exchanges may have barriers
    if (act) qk[g][e0 / 4u] = x * p.scale;
  }
#endif
  barrier();

  float m[G], lt[G];  // running maximum per head; this thread's share of the softmax sum
  vec4 acc[G][DCH];
#if defined(KV_RING) && KV_V_KIND == 3
  vec4 accp[G][DCH];  // f16 ring values, plain domain
#define ACC_RING accp
#else
#define ACC_RING acc
#endif
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    m[g] = -1.0 / 0.0;
    lt[g] = 0.0;
    [[unroll]] for (uint c = 0u; c < DCH; ++c) {
      acc[g][c] = vec4(0.0);
#if defined(KV_RING) && KV_V_KIND == 3
      accp[g][c] = vec4(0.0);
#endif
    }
  }
  bool any_ring = false;  // some tile reached the window (uniform)

  for (uint j0 = start; j0 <= last; j0 += WG) {
    const uint j = j0 + tid;
    float s[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) s[g] = 0.0;
#if KV_K_KIND >= 2
#ifdef KV_RING
    if (tk.kring)
      ring_scores(tk.kr, s);
    else
#endif
      key_scores(tk.kwd, s);
#else
    key_scores_row(tk.slot * p.n_head_kv + hk, s);
#endif
    [[unroll]] for (uint g = 0u; g < G; ++g)
      if (j > last) s[g] = -1.0 / 0.0;
    slot_of[tid] = tk.slot;
#ifdef KV_RING
    ring_of[tid] = j <= last ? tk.vrow : ~0u;
#endif
    float mt[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) mt[g] = s[g];
    wg_reduce(mt, true);
    float e[G], corr[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      const float m_new = max(m[g], mt[g]);
      e[g] = j <= last ? exp(s[g] - m_new) : 0.0;
      corr[g] = exp(m[g] - m_new);
      m[g] = m_new;
      lt[g] = lt[g] * corr[g] + e[g];
    }
    [[unroll]] for (uint k = 0u; k < GV; ++k) {
      vec4 pv = vec4(0.0);
      [[unroll]] for (uint i = 0u; i < 4u; ++i)
        if (4u * k + i < G) pv[i] = e[4u * k + i];
      probs[tid][k] = pv;
    }
    barrier();  // publishes probs / slot_of / ring_of
    [[unroll]] for (uint g = 0u; g < G; ++g)
      [[unroll]] for (uint c = 0u; c < DCH; ++c) {
        acc[g][c] *= corr[g];
#if defined(KV_RING) && KV_V_KIND == 3
        accp[g][c] *= corr[g];
#endif
      }
    const uint n_keys = min(WG, last + 1u - j0);
#ifdef KV_RING
    const bool tile_ring = j0 + n_keys > recent_from;  // some key of the tile may be in the ring
    any_ring = any_ring || tile_ring;
#endif
    [[unroll]] for (uint c = 0u; c < DCH; ++c) {
      const uint d = CW * c + 4u * sl;
      if (d >= D) break;
      const vdims vd = vdims_of(d);
      for (uint jj = stream; jj < n_keys; jj += KIF * NS) {  // KIF keys' loads in flight
        VRAW r[KIF];
        [[unroll]] for (uint u = 0u; u < KIF; ++u)
          r[u] = v_load(slot_of[min(jj + u * NS, n_keys - 1u)] * p.n_head_kv + hk, vd);
#if defined(KV_RING) && KV_V_KIND >= 2
        if (tile_ring) {
          f16vec4 rv[KIF];
          [[unroll]] for (uint u = 0u; u < KIF; ++u) {
            const uint rr = ring_of[min(jj + u * NS, n_keys - 1u)];
            rv[u] = vring[((rr != ~0u ? rr : 0u) * p.n_head_kv + hk) * (D / 4u) + d / 4u];
          }
          [[unroll]] for (uint u = 0u; u < KIF; ++u) {
            const uint kk = jj + u * NS, kl = min(kk, n_keys - 1u);
            const vec4 pr[GV] = probs[kl];
            if (ring_of[kl] != ~0u) {
              const vec4 v = vec4(rv[u]);
              [[unroll]] for (uint g = 0u; g < G; ++g) ACC_RING[g][c] += (kk < n_keys ? pr[g / 4u][g % 4u] : 0.0) * v;
            } else {
              const vec4 v = v_decode(r[u], vd);
              [[unroll]] for (uint g = 0u; g < G; ++g) acc[g][c] += (kk < n_keys ? pr[g / 4u][g % 4u] : 0.0) * v;
            }
          }
          continue;
        }
#endif
        [[unroll]] for (uint u = 0u; u < KIF; ++u) {
          const uint kk = jj + u * NS, kl = min(kk, n_keys - 1u);
          const vec4 pr[GV] = probs[kl];
          const vec4 v = v_decode(r[u], vd);
          [[unroll]] for (uint g = 0u; g < G; ++g) acc[g][c] += (kk < n_keys ? pr[g / 4u][g % 4u] : 0.0) * v;
        }
      }
    }
    if (j0 + WG <= last) {  // the next tile's keys (here, not before the values: registers)
      fetch_slot(tk, j0 + WG, last, btab, seq, recent_from);
      fetch_codes(tk);
    }
    barrier();  // probs / slot_of / ring_of / red are rewritten by the next tile
  }

  float l[G];
  [[unroll]] for (uint g = 0u; g < G; ++g) l[g] = lt[g];
  wg_reduce(l, false);
  stream_sums(acc, stream, sl, true);
#if KV_V_KIND == 3
  {  // the code values' sums rotated back, in registers (every thread: the exchanges may have barriers)
    const uint e0v = 4u * (tid % TQ_TPV);
    [[unroll]] for (uint pass = 0u; pass < QPASS; ++pass) {
      const uint g = pass * VPP + tid / TQ_TPV, i = g * D + e0v;
      const bool act = g < G && e0v < D;
      vec4 x = act ? vec4(VSUM[i], VSUM[i + 1u], VSUM[i + 2u], VSUM[i + 3u]) : vec4(0.0);
      x = tq_rotate_inverse4(x, e0v);
      if (act) {
        VSUM[i] = x.x;
        VSUM[i + 1u] = x.y;
        VSUM[i + 2u] = x.z;
        VSUM[i + 3u] = x.w;
      }
    }
    barrier();
  }
#ifdef KV_RING
  if (any_ring) stream_sums(accp, stream, sl, false);
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
  SPLIT_COMBINE_CALL();
#endif
}
