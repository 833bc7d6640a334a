// Decode attention over the paged f16/f32 KV cache, one workgroup per (KV head, token[, split]):
// the G = n_head / n_head_kv query heads that share a KV head are scored together, so each K
// and V row is read once per group instead of once per query head. HEAD_D and GQA_G are
// compile-time, so a key row's loads are unrolled and all in flight at once.
// Thread i scores key i of a tile of WG keys for all G heads; then each thread accumulates
// value dims tid, tid + WG, ... for all G heads. Online softmax per head.
// SPLIT: workgroup z covers keys [z * split_len, (z + 1) * split_len) and writes unnormalised
// partials (acc, m, l) in attention.glsl's layout, merged by its COMBINE pass.
layout(local_size_x = WG) in;
layout(binding = 0, std430) buffer Part { float part[]; };
layout(binding = 1, std430) readonly buffer Q { float q[]; };
#ifdef KV_K_F32
layout(binding = 2, std430) readonly buffer Kc { vec4 kc[]; };
#else
layout(binding = 2, std430) readonly buffer Kc { f16vec4 kc[]; };
#endif
#ifdef KV_V_F32
layout(binding = 3, std430) readonly buffer Vc { float vc[]; };
#else
layout(binding = 3, std430) readonly buffer Vc { float16_t vc[]; };
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
const uint DPT = (D + WG - 1) / WG;  // value dims per thread
shared vec4 qs[G][D / 4];
shared float probs[G][WG];
shared uint slot_of[WG];
shared float red[G][WG / MIN_SUBGROUP];

// Per-head maximum (MAX) or sum over the workgroup of one value per thread and head.
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
  float m[G], l[G], acc[G][DPT];
  for (uint g = 0; g < G; ++g) {
    m[g] = -1.0 / 0.0;
    l[g] = 0.0;
    for (uint k = 0; k < DPT; ++k) acc[g][k] = 0.0;
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
      for (uint k = 0; k < DPT; ++k) acc[g][k] *= corr[g];
    }
    const uint n_keys = min(WG, last + 1 - j0);
    for (uint k = 0; k < DPT; ++k) {
      const uint d = tid + k * WG;
      if (d >= D) break;
      const uint vb = hk * D + d;
      uint jj = 0;
      for (; jj + 4 <= n_keys; jj += 4) {
        const float v0 = float(vc[slot_of[jj] * row + vb]), v1 = float(vc[slot_of[jj + 1] * row + vb]);
        const float v2 = float(vc[slot_of[jj + 2] * row + vb]), v3 = float(vc[slot_of[jj + 3] * row + vb]);
        for (uint g = 0; g < G; ++g)
          acc[g][k] += probs[g][jj] * v0 + probs[g][jj + 1] * v1 + probs[g][jj + 2] * v2 + probs[g][jj + 3] * v3;
      }
      for (; jj < n_keys; ++jj) {
        const float v0 = float(vc[slot_of[jj] * row + vb]);
        for (uint g = 0; g < G; ++g) acc[g][k] += probs[g][jj] * v0;
      }
    }
    barrier();  // probs / slot_of are rewritten by the next tile
  }
  for (uint g = 0; g < G; ++g) {
    const uint h = h0 + g;
#ifdef SPLIT
    const uint pb = ((t * p.n_head + h) * p.n_splits + split) * (D + 2);
    for (uint k = 0; k < DPT; ++k) {
      const uint d = tid + k * WG;
      if (d < D) part[pb + d] = acc[g][k];
    }
    if (tid == 0) {
      part[pb + D] = m[g];
      part[pb + D + 1] = l[g];
    }
#else
    for (uint k = 0; k < DPT; ++k) {
      const uint d = tid + k * WG;
      if (d < D) o[p.o_off + t * p.o_stride + h * D + d] = acc[g][k] / l[g];
    }
#endif
  }
}
