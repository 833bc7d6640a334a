// Decode attention over the paged f16/f32 KV cache, one workgroup per (KV head, token[, split]):
// the G = n_head / n_head_kv query heads that share a KV head are scored together, so each K
// and V row is read once per group instead of once per query head. HEAD_D and GQA_G are
// compile-time, so a key row's loads are unrolled and all in flight at once.
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
} p;

const uint D = HEAD_D, G = GQA_G;
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

vec4 v_at(uint base, uint d) {  // 4 dims of a V row from d (D is a multiple of 4)
#ifdef KV_V_F32
  return vec4(vc[base + d], vc[base + d + 1], vc[base + d + 2], vc[base + d + 3]);
#else
  return vec4(vc4[(base + d) / 4]);
#endif
}

void main() {
  const uint hk = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint warp = tid / 32, lane = tid % 32;
  const uint h0 = hk * G, row = p.n_head_kv * D;
  const uint P = uint(pos[t]);
  uint start = p.chunk != 0 ? P / p.chunk * p.chunk : 0;
  uint last = P;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
  start = max(start, split * p.split_len);
  last = min(P, (split + 1) * p.split_len - 1);
  if (start > last) {  // nothing of this split is visible to the token (uniform per workgroup)
    if (tid < G) {
      const uint pb = ((t * p.n_head + h0 + tid) * p.n_splits + split) * (D + 2);
      part[pb + D] = -1.0 / 0.0;
      part[pb + D + 1] = 0.0;
    }
#ifdef SPLIT_COMBINE
    SPLIT_COMBINE_CALL();
#endif
    return;
  }
#endif
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
