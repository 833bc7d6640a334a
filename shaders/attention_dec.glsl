// Decode attention over the paged f16/f32 KV cache, one workgroup per (KV head, token[, split]):
// the G = n_head / n_head_kv query heads that share a KV head are scored together, so each K
// and V row is read once per group instead of once per query head. HEAD_D and GQA_G are
// compile-time, so a key row's loads are unrolled and all in flight at once. Two forms: LANES
// (below: lanes split each key row) where the subgroup allows, else a thread a key:
// Scores: thread i takes key i of a tile of WG keys, for all G heads (online softmax per head).
// Values: the warps split the tile's keys and each lane owns 4 dims of every 128-dim chunk, so a
// warp reads a whole V row per key in one coalesced load (8 bytes a lane for f16) and keeps 8
// keys' loads in flight; the warps' sums meet in shared memory at the end. (Issuing all 32 of a
// warp's V loads with the tile's K loads measured 7% slower end to end on the H200 at depth 4096.)
// SPLIT: workgroup z covers keys [z * split_len, (z + 1) * split_len) and writes unnormalised
// partials (acc, m, l) in attention.glsl's layout, merged by its COMBINE pass.
layout(local_size_x = WG) in;
#ifndef TAIL_COHERENT
#define TAIL_COHERENT
#endif
layout(binding = 0, std430) TAIL_COHERENT buffer Part { float part[]; };
layout(binding = 1, std430) readonly buffer Q { float q[]; };
#ifdef KV_K_F32
layout(binding = 2, std430) readonly buffer Kc { vec4 kc[]; };
#else
layout(binding = 2, std430) readonly buffer Kc { f16vec4 kc[]; };
#endif
#ifdef KV_V_F32
layout(binding = 3, std430) readonly buffer Vc { float vc[]; };
#else
layout(binding = 3, std430) readonly buffer Vc { f16vec4 vc4[]; };  // rows of D, D % 4 == 0
#endif
layout(binding = 4, std430) readonly buffer Pos { int pos[]; };
layout(binding = 5, std430) readonly buffer SeqRow { uint seq_row[]; };
layout(binding = 6, std430) readonly buffer Blocks { uint blocks[]; };
layout(binding = 7, std430) buffer O { float o[]; };
layout(push_constant) uniform Params {
  uint n_head, n_head_kv, D, chunk;
  uint q_off, q_stride, o_off, o_stride;
  uint block_size, max_blocks;
  float scale;
  uint split_len, n_splits;
#ifdef HEAD_OPS
  HEAD_OPS_PC  // head_ops_kv.glsl
#endif
} p;
#ifdef HEAD_OPS
// HEAD_OPS (LANES form; head_ops_kv.glsl): every workgroup with keys takes its group's G query
// heads and the K row through the ops (HO_ROWS = G + 1); the one whose keys end at the token's
// own position (the split holding it) appends the K and V rows and scores them from shared
// memory, so no workgroup reads a row this dispatch writes.
uint ho_pos = ~0u;  // the token's position: its key and value come from kself / vself
#if !defined(LANES) || HO_ROWS != GQA_G + 1
#error "attention_dec HEAD_OPS: the LANES form, HO_ROWS = GQA_G + 1"
#endif
#endif

vec4 v_at(uint base, uint d) {  // 4 dims of a V row from d (D is a multiple of 4)
#ifdef KV_V_F32
  return vec4(vc[base + d], vc[base + d + 1], vc[base + d + 2], vc[base + d + 3]);
#else
  return vec4(vc4[(base + d) / 4]);
#endif
}

const uint D = HEAD_D, G = GQA_G;

// The keys [start, last] workgroup (KV head, token t[, split]) sums: the token's causal (or
// chunked) range, cut to the split. False for a split with none of them (uniform per workgroup),
// after writing its empty partial (m = -inf, l = 0) for the merge.
bool key_range(uint t, uint h0, out uint start, out uint last) {
  const uint P = uint(pos[t]);
  start = p.chunk != 0 ? P / p.chunk * p.chunk : 0;
  last = P;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
  start = max(start, split * p.split_len);
  last = min(P, (split + 1) * p.split_len - 1);
  if (start > last) {
    if (gl_LocalInvocationID.x < G) {
      const uint pb = ((t * p.n_head + h0 + gl_LocalInvocationID.x) * p.n_splits + split) * (D + 2);
      part[pb + D] = -1.0 / 0.0;
      part[pb + D + 1] = 0.0;
    }
    return false;
  }
#endif
  return true;
}

#ifdef LANES
#extension GL_KHR_shader_subgroup_shuffle : require
// LANES (the default on devices whose subgroups hold a key row's lanes): each group of LPK lanes
// of a subgroup is a stream of keys, and the lanes split the head's dims (DPL a lane), so a key
// or value row is one coalesced load. A stream takes KC = LPK / G consecutive keys at a time:
// their K and V rows are all loaded before any use, each lane's partial dot products of the
// chunk's KC x G (key, head) pairs are summed over the group by halving exchanges (LPK - 1
// shuffles, after which lane i holds pair i = key i / G, head i % G), and the online softmax
// runs per stream with no workgroup barrier in the key loop; the streams' (m, l, acc) meet in
// shared memory once at the end. The thread-a-key form reads a key row in 32 separate loads, a
// row per lane, and meets at four workgroup barriers per tile of keys (H200, qwen3-8b: 19.2 ->
// 16.4 us a layer at depth 4096; bench/RESULTS.md session 24).
#ifndef CHUNK_KEYS
#define CHUNK_KEYS (LPK / GQA_G)
#endif
const uint DPL = D / LPK;               // dims per lane: a multiple of 4
const uint KC = CHUNK_KEYS;             // keys per chunk of a stream (CHUNK_KEYS: fewer, fewer registers)
const uint PAIRS = KC * G;              // a chunk's (key, head) pairs: LPK, or a fraction of it
const uint NS = WG / LPK;               // streams per workgroup
#if LPK % GQA_G != 0 || HEAD_D % (4 * LPK) != 0 || (LPK / GQA_G) % CHUNK_KEYS != 0
#error "attention_dec LANES: LPK must be a multiple of GQA_G, HEAD_D of 4 * LPK, and CHUNK_KEYS divide LPK / GQA_G"
#endif
shared float pw[NS][LPK];               // a chunk's probabilities, pair i at i
shared float cw[NS][G];                 // a chunk's rescale factor per head
shared float sm_m[NS][G], sm_l[NS][G];  // the streams' softmax state at the end
shared float vsum[NS][G][D];            // the streams' unnormalised value sums

vec4 k4(uint base, uint d) {  // 4 dims of a K row from d
#ifdef KV_K_F32
  return kc[(base + d) / 4];
#else
  return vec4(kc[(base + d) / 4]);
#endif
}

// The K and V rows (this lane's dims) of the chunk of keys from j0; keys past `last` re-read
// the last one (weighted 0).
void load_chunk(uint j0, uint last, uint btab, uint vb, uint row, out vec4 kr[KC][DPL / 4], out vec4 vr[KC][DPL / 4]) {
#ifdef CHUNK_SLOTS
  uint slots[KC];
  PAGED_SLOTS(slots, KC, j0, last, blocks, btab, p.block_size)
#endif
  [[unroll]] for (uint k = 0; k < KC; ++k) {
    const uint j = min(j0 + k, last);
#ifdef CHUNK_SLOTS
    const uint base = slots[k] * row + vb;
#else
    const uint base = (blocks[btab + j / p.block_size] * p.block_size + j % p.block_size) * row + vb;
#endif
#ifdef HEAD_OPS
    if (j == ho_pos) {  // the step's own key and value (this lane's dims: vb % D on)
      [[unroll]] for (uint c = 0; c < DPL / 4; ++c) {
        kr[k][c] = kself[(vb % D) / 4 + c];
        vr[k][c] = vself[(vb % D) / 4 + c];
      }
      continue;
    }
#endif
    [[unroll]] for (uint c = 0; c < DPL / 4; ++c) {
      kr[k][c] = k4(base, 4 * c);
      vr[k][c] = v_at(base, 4 * c);
    }
  }
}

void main() {
  const uint hk = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint sid = gl_SubgroupID * (gl_SubgroupSize / LPK) + gl_SubgroupInvocationID / LPK;  // stream
  const uint li = gl_SubgroupInvocationID % LPK, d0 = li * DPL;
  const uint h0 = hk * G, row = p.n_head_kv * D;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
#endif
  uint start, last;
  RETURN_IF_NO_KEYS(t, h0, start, last);
  const uint btab = seq_row[t] * p.max_blocks;
  vec4 qr[G][DPL / 4];  // this lane's dims of every head's query, times the scale
#ifdef HEAD_OPS
  const uint P = uint(pos[t]);
  const float temp = ho_run(ho_src_of(p), t, h0, hk, D, row, P, last == P);  // the split holding P appends
  ho_pos = P;
  // As attn_prep writes the query (times the temperature) and the kernel reads it (times the scale).
  [[unroll]] for (uint g = 0; g < G; ++g)
    [[unroll]] for (uint c = 0; c < DPL / 4; ++c) {
      const uint d = d0 + 4 * c;
      qr[g][c] = vec4(ho_h[g][d] * temp, ho_h[g][d + 1] * temp, ho_h[g][d + 2] * temp, ho_h[g][d + 3] * temp) * p.scale;
    }
#else
  [[unroll]] for (uint g = 0; g < G; ++g)
    [[unroll]] for (uint c = 0; c < DPL / 4; ++c) {
      const uint qb = p.q_off + t * p.q_stride + (h0 + g) * D + d0 + 4 * c;
      qr[g][c] = vec4(q[qb], q[qb + 1], q[qb + 2], q[qb + 3]) * p.scale;
    }
#endif
  vec4 acc[G][DPL / 4];
  [[unroll]] for (uint g = 0; g < G; ++g)
    [[unroll]] for (uint c = 0; c < DPL / 4; ++c) acc[g][c] = vec4(0.0);
  float m = -1.0 / 0.0, l = 0.0;  // the running max and sum of this lane's pair's head (li % G)
  const uint vb = hk * D + d0;
  for (uint j0 = start + sid * KC; j0 <= last; j0 += NS * KC) {
    // (Loading the next chunk while this one is summed measured no faster on the H200.)
    vec4 kr[KC][DPL / 4], vr[KC][DPL / 4];
    load_chunk(j0, last, btab, vb, row, kr, vr);
    float pv[PAIRS];  // pair k * G + g: this lane's share of key k's score for head g
    [[unroll]] for (uint k = 0; k < KC; ++k)
      [[unroll]] for (uint g = 0; g < G; ++g) {
        float d = 0.0;
        [[unroll]] for (uint c = 0; c < DPL / 4; ++c) d += dot(qr[g][c], kr[k][c]);
        pv[k * G + g] = d;
      }
    HALVE_PAIRS(pv, li, PAIRS, 16u) HALVE_PAIRS(pv, li, PAIRS, 8u) HALVE_PAIRS(pv, li, PAIRS, 4u)
    HALVE_PAIRS(pv, li, PAIRS, 2u) HALVE_PAIRS(pv, li, PAIRS, 1u)
    JOIN_PAIR_GROUPS(pv[0], PAIRS, LPK)
    const float s = j0 + (li % PAIRS) / G <= last ? pv[0] : -1.0 / 0.0;
    float cm = s;  // the chunk's max for this lane's head: over the lanes of that head
    for (uint o = G; o < PAIRS; o *= 2) cm = max(cm, subgroupShuffleXor(cm, o));
    const float mn = max(m, cm);
    const float e = exp(s - mn), corr = exp(m - mn);
    float es = e;
    for (uint o = G; o < PAIRS; o *= 2) es += subgroupShuffleXor(es, o);
    l = l * corr + es;
    m = mn;
    pw[sid][li] = e;
    if (li < G) cw[sid][li] = corr;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    [[unroll]] for (uint g = 0; g < G; ++g) {
      const float cg = cw[sid][g];
      [[unroll]] for (uint c = 0; c < DPL / 4; ++c) acc[g][c] *= cg;
    }
    [[unroll]] for (uint k = 0; k < KC; ++k)
      [[unroll]] for (uint g = 0; g < G; ++g) {
        const float pg = pw[sid][k * G + g];
        [[unroll]] for (uint c = 0; c < DPL / 4; ++c) acc[g][c] += pg * vr[k][c];
      }
    subgroupBarrier();  // pw / cw are rewritten by the next chunk
  }
  // The streams meet: each writes its state, then every (head, dim) sums the streams' values
  // weighted by exp(m_s - M) for the head's maximum M.
  if (li < G) {
    sm_m[sid][li] = m;
    sm_l[sid][li] = l;
  }
  [[unroll]] for (uint g = 0; g < G; ++g)
    [[unroll]] for (uint c = 0; c < DPL / 4; ++c)
      [[unroll]] for (uint i = 0; i < 4; ++i) vsum[sid][g][d0 + 4 * c + i] = acc[g][c][i];
  barrier();
  for (uint i = tid; i < G * D; i += WG) {
    const uint g = i / D, d = i % D, h = h0 + g;
    float M = -1.0 / 0.0;
    for (uint s = 0; s < NS; ++s) M = max(M, sm_m[s][g]);
    float a = 0.0, L = 0.0;
    for (uint s = 0; s < NS; ++s) {
      const float w = sm_m[s][g] > -1.0 / 0.0 ? exp(sm_m[s][g] - M) : 0.0;  // a stream with no key: 0
      a += w * vsum[s][g][d];
      L += w * sm_l[s][g];
    }
#ifdef SPLIT
    const uint pb = ((t * p.n_head + h) * p.n_splits + split) * (D + 2);
    part[pb + d] = a;
    if (d == 0) {
      part[pb + D] = M;
      part[pb + D + 1] = L;
    }
#else
    o[p.o_off + t * p.o_stride + h * D + d] = a / L;
#ifdef ATTN_F16_OUT
    attn_f16_out((t * p.n_head + h) * D + d, a / L);
#endif
#endif
  }
#ifdef SPLIT_COMBINE
  SPLIT_COMBINE_CALL();
#endif
}
#else  // the thread-a-key form (devices whose subgroups are narrower than LPK would need)
const uint NW = WG / 32;           // warps; warp w accumulates keys w, w + NW, ... of a tile
const uint DCH = (D + 127) / 128;  // 128-dim chunks; lane l owns dims 128c + 4l .. 128c + 4l + 3
shared vec4 qs[G][D / 4];
shared float probs[G][WG];
shared uint slot_of[WG];
shared float red[G][WG / MIN_SUBGROUP];
shared float vsum[G][D];

// Per-head maximum or sum over the workgroup of one value per thread and head.
void wg_reduce(inout float v[G], bool is_max) {
  for (uint g = 0; g < G; ++g) v[g] = is_max ? subgroupMax(v[g]) : subgroupAdd(v[g]);
  barrier();  // red[] may still be read by the previous reduction
  if (subgroupElect())
    for (uint g = 0; g < G; ++g) red[g][gl_SubgroupID] = v[g];
  barrier();
  for (uint g = 0; g < G; ++g) {
    float r = red[g][0];
    for (uint s = 1; s < gl_NumSubgroups; ++s) r = is_max ? max(r, red[g][s]) : r + red[g][s];
    v[g] = r;
  }
}

void main() {
  const uint hk = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint warp = tid / 32, lane = tid % 32;
  const uint h0 = hk * G, row = p.n_head_kv * D;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
#endif
  uint start, last;
  RETURN_IF_NO_KEYS(t, h0, start, last);
  const uint btab = seq_row[t] * p.max_blocks;
  for (uint i = tid; i < G * D / 4; i += WG) {
    const uint g = i / (D / 4), c = i % (D / 4);
    const uint qb = p.q_off + t * p.q_stride + (h0 + g) * D + 4 * c;
    qs[g][c] = vec4(q[qb], q[qb + 1], q[qb + 2], q[qb + 3]) * p.scale;
  }
  barrier();
  float m[G], l[G];
  vec4 acc[G][DCH];
  for (uint g = 0; g < G; ++g) {
    m[g] = -1.0 / 0.0;
    l[g] = 0.0;
    for (uint c = 0; c < DCH; ++c) acc[g][c] = vec4(0.0);
  }

  for (uint j0 = start; j0 <= last; j0 += WG) {
    const uint j = j0 + tid;
    float s[G];
    for (uint g = 0; g < G; ++g) s[g] = -1.0 / 0.0;
    uint slot = 0;
    if (j <= last) {
      slot = blocks[btab + j / p.block_size] * p.block_size + j % p.block_size;
      const uint kb = (slot * row + hk * D) / 4;
      vec4 kr[D / 4];
      for (uint c = 0; c < D / 4; ++c) kr[c] = vec4(kc[kb + c]);
      for (uint g = 0; g < G; ++g) {
        float d = 0.0;
        for (uint c = 0; c < D / 4; ++c) d += dot(qs[g][c], kr[c]);
        s[g] = d;
      }
    }
    float mt[G];
    for (uint g = 0; g < G; ++g) mt[g] = s[g];
    wg_reduce(mt, true);
    float e[G], corr[G];
    for (uint g = 0; g < G; ++g) {
      const float m_new = max(m[g], mt[g]);
      e[g] = j <= last ? exp(s[g] - m_new) : 0.0;
      corr[g] = exp(m[g] - m_new);
      m[g] = m_new;
      probs[g][tid] = e[g];
    }
    slot_of[tid] = slot;
    wg_reduce(e, false);  // its barriers also publish probs / slot_of
    for (uint g = 0; g < G; ++g) {
      l[g] = l[g] * corr[g] + e[g];
      for (uint c = 0; c < DCH; ++c) acc[g][c] *= corr[g];
    }
    const uint n_keys = min(WG, last + 1 - j0);
    for (uint c = 0; c < DCH; ++c) {
      const uint d = 128 * c + 4 * lane;
      if (d >= D) break;
      const uint vb = hk * D;
      uint jj = warp;
      for (; jj + 7 * NW < n_keys; jj += 8 * NW) {  // 8 keys' loads in flight
        vec4 v[8];
        for (uint u = 0; u < 8; ++u) v[u] = v_at(slot_of[jj + u * NW] * row + vb, d);
        for (uint u = 0; u < 8; ++u)
          for (uint g = 0; g < G; ++g) acc[g][c] += probs[g][jj + u * NW] * v[u];
      }
      for (; jj < n_keys; jj += NW) {
        const vec4 v = v_at(slot_of[jj] * row + vb, d);
        for (uint g = 0; g < G; ++g) acc[g][c] += probs[g][jj] * v;
      }
    }
    barrier();  // probs / slot_of are rewritten by the next tile
  }
  // The warps' partial sums, added in turn (vsum is G x D: small enough for any device).
  for (uint w = 0; w < NW; ++w) {
    if (warp == w)
      for (uint g = 0; g < G; ++g)
        for (uint c = 0; c < DCH; ++c) {
          const uint d = 128 * c + 4 * lane;
          if (d >= D) break;
          for (uint i = 0; i < 4; ++i) vsum[g][d + i] = (w == 0 ? 0.0 : vsum[g][d + i]) + acc[g][c][i];
        }
    barrier();
  }
  for (uint i = tid; i < G * D; i += WG) {
    const uint g = i / D, d = i % D, h = h0 + g;
#ifdef SPLIT
    part[((t * p.n_head + h) * p.n_splits + split) * (D + 2) + d] = vsum[g][d];
#else
    o[p.o_off + t * p.o_stride + h * D + d] = vsum[g][d] / l[g];
#ifdef ATTN_F16_OUT
    attn_f16_out((t * p.n_head + h) * D + d, vsum[g][d] / l[g]);
#endif
#endif
  }
#ifdef SPLIT
  if (tid < G) {
    const uint pb = ((t * p.n_head + h0 + tid) * p.n_splits + split) * (D + 2);
    part[pb + D] = m[tid];
    part[pb + D + 1] = l[tid];
  }
#endif
#ifdef SPLIT_COMBINE
  SPLIT_COMBINE_CALL();
#endif
}
#endif
