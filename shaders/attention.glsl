// Causal (optionally chunked) attention over the paged KV cache with grouped-query heads:
// one workgroup per (token, query head) walks its sequence's positions [start, pos] in tiles
// of WG keys with an online softmax (running max m, sum l; flash-attention style), so any
// context length runs in fixed shared memory. Thread i scores key i of a tile; the value
// accumulation gives each thread head dims i, i + WG, ...
// SPLIT (decode): workgroup z takes keys [z * split_len, (z + 1) * split_len) only and writes
// its unnormalised partial (acc, m, l) to `part`; COMBINE merges the partials per head
// (flash-decoding), so a long context is read by many workgroups instead of one per head.
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer Q { float q[]; };
#ifdef KV_K_F32
layout(binding = 2, std430) readonly buffer Kc { float kc[]; };
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
#ifdef HEAD_OPS
  HEAD_OPS_PC  // head_ops_kv.glsl
#endif
} p;
// HEAD_OPS (unsplit decode of one-token steps over an f16/f32 cache): head_ops_kv.glsl, its
// query head and its group's K row; the group's first head appends.
// SPLIT partials: per (token, head, split) D accumulators then m and l.
layout(binding = 0, std430) buffer Part { float part[]; };

#ifdef QUANT_OUT
// Decode (unsplit, and COMBINE): the output rows also as the output projection's int8 input
// (quantize_q8.glsl's blocks and rounding), so no quantize dispatch sits between the two;
// QUANT_OUT is the width of a row of the int8 slot. A workgroup owns a head: D / 32 blocks.
layout(binding = 8, std430) writeonly buffer XQO { uvec4 xqo[]; };
layout(binding = 9, std430) writeonly buffer XSO { vec4 xso[]; };
shared float q8v[256];  // the head's outputs (DMAX)
void q8_store_head(uint t, uint h) {
  const uint b = gl_LocalInvocationID.x;
  if (b >= p.D / 32) return;
  vec4 v[8];
  for (uint i = 0; i < 8; ++i)
    v[i] = vec4(q8v[32 * b + 4 * i], q8v[32 * b + 4 * i + 1], q8v[32 * b + 4 * i + 2], q8v[32 * b + 4 * i + 3]);
  const q8_block qb = q8_quantize(v);
  const uint blk = (h * p.D) / 32 + b;
  const uint qo = t * (QUANT_OUT / 16) + blk * 2;  // in uvec4: a row is QUANT_OUT codes
  xqo[qo] = qb.lo;
  xqo[qo + 1] = qb.hi;
  xso[t * (QUANT_OUT / 32) + blk] = qb.s;
}
#endif

float q_in(uint t, uint h, uint d) { return q[p.q_off + t * p.q_stride + h * p.D + d]; }
#ifdef KV_K_F32
float k_at(uint i) { return kc[i]; }
#else
float k_at(uint i) { return float(kc[i / 4][i % 4]); }
#endif
float v_at(uint i) { return float(vc[i]); }

#if defined(QTILE)
// Prefill: a workgroup takes QT consecutive query tokens of one sequence for one head and walks
// the keys in tiles of KT held in shared memory (f16), so each key is read once per QT queries
// instead of once per query. 8 threads per query row; online softmax per row.
#if defined(KV_K_F32) || defined(KV_V_F32)
// f32 caches keep f32 tiles (exact), half as many keys per tile to fit 32 KiB of shared memory.
#define KV_TILE_T float
const uint KT = 16;
#else
#define KV_TILE_T float16_t
const uint KT = 32;
#endif
const uint QT = 16, DQ = 128;
shared float qt[QT][DQ];
shared KV_TILE_T kt[KT][DQ];
shared KV_TILE_T vt[KT][DQ];
shared float pt[QT][KT + 1];
shared uint slot_t[KT];
shared float rred[QT][8];
shared uint range_lo, range_hi;

void main() {
  const uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * QT, tid = gl_LocalInvocationID.x;
  const uint D = p.D, row = p.n_head_kv * D, hk = h / (p.n_head / p.n_head_kv);
  const uint n_tok = p.n_splits;  // tokens in the batch (push constant reused)
  const uint qi = tid / 8, part = tid % 8;
  const uint t = t0 + qi;
  const bool live = t < n_tok;
  const uint P = live ? uint(pos[t]) : 0;
  const uint start = live ? (p.chunk != 0 ? P / p.chunk * p.chunk : 0) : 0;
  const uint btab = seq_row[t0] * p.max_blocks;  // every token of the tile is in one sequence
  if (tid == 0) {
    range_lo = 0xFFFFFFFFu;
    range_hi = 0;
  }
  for (uint i = tid; i < QT * D; i += WG) {
    const uint q = i / D, d = i % D;
    qt[q][d] = t0 + q < n_tok ? q_in(t0 + q, h, d) : 0.0;
  }
  barrier();
  if (live && part == 0) {
    atomicMin(range_lo, start);
    atomicMax(range_hi, P);
  }
  barrier();
  const uint lo = range_lo, hi = range_hi;
  float m = -1.0 / 0.0, l = 0.0;
  float acc[DQ / 8];
  for (uint i = 0; i < DQ / 8; ++i) acc[i] = 0.0;

  for (uint j0 = lo; j0 <= hi; j0 += KT) {
    for (uint i = tid; i < KT; i += WG) {
      const uint j = j0 + i;
      slot_t[i] = j <= hi ? blocks[btab + j / p.block_size] * p.block_size + j % p.block_size : 0;
    }
    barrier();
    for (uint i = tid; i < KT * D; i += WG) {
      const uint k = i / D, d = i % D;
      const bool ok = j0 + k <= hi;
      kt[k][d] = KV_TILE_T(ok ? k_at(slot_t[k] * row + hk * D + d) : 0.0);
      vt[k][d] = KV_TILE_T(ok ? v_at(slot_t[k] * row + hk * D + d) : 0.0);
    }
    barrier();
    // Scores of this thread's 4 keys (k = part + 8 * i) for its query row.
    float sc[KT / 8];
    float rmax = -1.0 / 0.0;
    for (uint i = 0; i < KT / 8; ++i) {
      const uint k = part + 8 * i, j = j0 + k;
      float s = -1.0 / 0.0;
      if (live && j >= start && j <= P) {
        float d = 0.0;
        for (uint c = 0; c < D; ++c) d += qt[qi][c] * float(kt[k][c]);
        s = d * p.scale;
      }
      sc[i] = s;
      rmax = max(rmax, s);
    }
    rred[qi][part] = rmax;
    barrier();
    float tile_max = -1.0 / 0.0;
    for (uint i = 0; i < 8; ++i) tile_max = max(tile_max, rred[qi][i]);
    const float m_new = max(m, tile_max);
    float psum = 0.0;
    for (uint i = 0; i < KT / 8; ++i) {
      const float e = sc[i] > -1.0 / 0.0 ? exp(sc[i] - m_new) : 0.0;
      pt[qi][part + 8 * i] = e;
      psum += e;
    }
    barrier();  // rred reads done before it is rewritten; pt complete
    rred[qi][part] = psum;
    barrier();
    float tile_sum = 0.0;
    for (uint i = 0; i < 8; ++i) tile_sum += rred[qi][i];
    const float corr = m_new > -1.0 / 0.0 ? exp(m - m_new) : 1.0;
    l = l * corr + tile_sum;
    m = m_new;
    for (uint i = 0; i < DQ / 8; ++i) {
      const uint d = part + 8 * i;
      if (d >= D) break;
      float a = acc[i] * corr;
      for (uint k = 0; k < KT; ++k) a += pt[qi][k] * float(vt[k][d]);
      acc[i] = a;
    }
    barrier();  // tiles are rewritten next
  }
  if (live)
    for (uint i = 0; i < DQ / 8; ++i) {
      const uint d = part + 8 * i;
      if (d < D) o[p.o_off + t * p.o_stride + h * D + d] = acc[i] / l;
    }
}
#elif defined(COMBINE)
// The splits' partials merged per (token, head) in one round of memory latency: the workgroup's
// threads are split groups of DW = min(D, WG) dims (group g sums splits g, g + GS, ...), each
// issuing its CIF partial values first, so their loads overlap the (m, l) merge (split s's pair
// read by thread s); then the groups' sums meet in shared memory. (A thread a dim walking every
// split eight loads at a time waited out five latencies at 33 splits, ~8 us a layer on the H200;
// a thread walking every split's m and l itself was a chain of dependent L2 reads, 15 us a call
// on the H100.)
const uint CMAX = 128;  // splits (max_splits in backend.cpp)
#ifndef COMBINE_CIF
#define COMBINE_CIF 8
#endif
const uint CIF = COMBINE_CIF;  // partial values a thread keeps in flight
shared float cw[CMAX];
shared float cred[WG / MIN_SUBGROUP];
shared float csum[WG];
#ifdef ROT_LATER
// TurboQuant values (attention_qdec ROT_LATER): the code splits' partials are in the rotated
// domain, so their merged sum is rotated back here, once a head instead of once a split
// (kv_codec.glsl's inverse rotation on `rot`); ROT_LATER 2: the last split is the window's
// (RING_SPLIT), plain f16 values, added after the rotation.
#if ROT_LATER == 2
shared float csum_plain[WG];
shared float cplain[256];
#endif
#endif
void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint base = (t * p.n_head + h) * p.n_splits * (p.D + 2);
  const uint DW = min(p.D, WG), GS = WG / DW, g = tid / DW, dl = tid % DW;
  const uint s_first = g < GS ? g : p.n_splits;  // threads past GS * DW sum nothing
  float v[CIF];
  [[unroll]] for (uint i = 0; i < CIF; ++i) {
    const uint s = s_first + i * GS;
    v[i] = s < p.n_splits ? part[base + s * (p.D + 2) + dl] : 0.0;
  }
  float mv = -1.0 / 0.0, lv = 0.0;
  if (tid < p.n_splits) {
    mv = part[base + tid * (p.D + 2) + p.D];
    lv = part[base + tid * (p.D + 2) + p.D + 1];
  }
  float M = subgroupMax(mv);
  if (subgroupElect()) cred[gl_SubgroupID] = M;
  barrier();
  M = cred[0];
  for (uint k = 1; k < gl_NumSubgroups; ++k) M = max(M, cred[k]);
  const float w = mv > -1.0 / 0.0 ? exp(mv - M) : 0.0;
  if (tid < p.n_splits) cw[tid] = w;
  const float ls = subgroupAdd(lv * w);
  barrier();  // every thread has read cred's maxima
  if (subgroupElect()) cred[gl_SubgroupID] = ls;
  barrier();  // also publishes cw
  float L = 0.0;
  for (uint k = 0; k < gl_NumSubgroups; ++k) L += cred[k];
  for (uint d0 = 0; d0 < p.D; d0 += DW) {
    const uint d = d0 + dl;
    float a = 0.0, ap = 0.0;
    for (uint s0 = s_first; s0 < p.n_splits; s0 += CIF * GS) {
      if (d0 != 0 || s0 != s_first)  // the first round's values were loaded above
        [[unroll]] for (uint i = 0; i < CIF; ++i) {
          const uint s = s0 + i * GS;
          v[i] = s < p.n_splits && d < p.D ? part[base + s * (p.D + 2) + d] : 0.0;
        }
      [[unroll]] for (uint i = 0; i < CIF; ++i) {
        const uint s = s0 + i * GS;
        if (s < p.n_splits && cw[s] != 0.0) {  // an empty split wrote only m, l
#if ROT_LATER == 2
          if (s == p.n_splits - 1) ap += v[i] * cw[s];
          else
#endif
          a += v[i] * cw[s];
        }
      }
    }
    csum[tid] = a;
#if ROT_LATER == 2
    csum_plain[tid] = ap;
#endif
    barrier();
    if (g == 0 && d < p.D) {
      for (uint k = 1; k < GS; ++k) a += csum[k * DW + dl];
#ifdef ROT_LATER
      rot[d] = a;
#if ROT_LATER == 2
      for (uint k = 1; k < GS; ++k) ap += csum_plain[k * DW + dl];
      cplain[d] = ap;
#endif
    }
#else
      o[p.o_off + t * p.o_stride + h * p.D + d] = a / L;
#ifdef QUANT_OUT
      q8v[d] = a / L;
#endif
#ifdef ATTN_F16_OUT
      attn_f16_out((t * p.n_head + h) * p.D + d, a / L);
#endif
    }
#endif
    barrier();  // csum is rewritten by the next dims; q8v is complete after the last
  }
#ifdef ROT_LATER
#ifdef LAB_NO_ROT  // lab only, wrong results (STRATA_VK_QDEC_SKIP bit 2 where the merge rotates): the rotation's time
  barrier();
#else
  tq_rotate_rot(1u, false);  // by every thread; ends with a barrier
#endif
  for (uint d = tid; d < p.D; d += WG) {
#if ROT_LATER == 2
    const float y = (rot[d] + cplain[d]) / L;
#else
    const float y = rot[d] / L;
#endif
    o[p.o_off + t * p.o_stride + h * p.D + d] = y;
#ifdef QUANT_OUT
    q8v[d] = y;
#endif
#ifdef ATTN_F16_OUT
    attn_f16_out((t * p.n_head + h) * p.D + d, y);
#endif
  }
  barrier();  // q8v is complete
#endif
#ifdef QUANT_OUT
  q8_store_head(t, h);
#endif
}
#else

const uint DMAX = 256;
const uint PER_THREAD = (DMAX + WG - 1) / WG;
shared vec4 qs[DMAX / 4];
#ifdef V4_D
// Unsplit decode with an f16 V cache (V4_D = head_dim, D / 4 dividing WG): the value sum of a
// tile runs over WG / (D / 4) key groups at once, each thread four dims of every key of its
// group (8-byte loads), the groups summed once at the end. A thread per dim walking all WG keys
// of a tile was the unsplit kernel's time (13 us a layer at depth < 128 on the H100).
layout(binding = 3, std430) readonly buffer Vc4 { f16vec4 vc4[]; };
const uint V4_G = V4_D / 4, V4_KG = WG / V4_G;
shared vec4 v4red[WG];
#endif
shared float probs[WG];
shared uint slot_of[WG];
shared float red[WG / MIN_SUBGROUP];
// Value dims of key jj of a tile (slot_of): four (V4_D, this thread's) or dim d.
#ifdef HEAD_OPS
// The cache's index stays in range for the own row too: a compiler may load both arms and select.
#define V_SLOT(jj) (slot_of[jj] == ~0u ? 0u : slot_of[jj])
#define V4_AT(jj) (slot_of[jj] == ~0u ? vself[v4_dl] : vec4(vc4[(V_SLOT(jj) * row + hk * V4_D) / 4 + v4_dl]))
#define V_AT(jj, d) (slot_of[jj] == ~0u ? vself[(d) / 4][(d) % 4] : float(vc[V_SLOT(jj) * row + hk * D + (d)]))
#else
#define V4_AT(jj) vec4(vc4[(slot_of[jj] * row + hk * V4_D) / 4 + v4_dl])
#define V_AT(jj, d) float(vc[slot_of[jj] * row + hk * D + (d)])
#endif

float wg_max(float v) {
  v = subgroupMax(v);
  barrier();
  if (subgroupElect()) red[gl_SubgroupID] = v;
  barrier();
  float r = red[0];
  for (uint g = 1; g < gl_NumSubgroups; ++g) r = max(r, red[g]);
  return r;
}
float wg_sum(float v) {
  v = subgroupAdd(v);
  barrier();
  if (subgroupElect()) red[gl_SubgroupID] = v;
  barrier();
  float r = 0.0;
  for (uint g = 0; g < gl_NumSubgroups; ++g) r += red[g];
  return r;
}

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint hk = h / (p.n_head / p.n_head_kv);
  const uint D = p.D, row = p.n_head_kv * D;
  const uint P = uint(pos[t]);
  uint start = p.chunk != 0 ? P / p.chunk * p.chunk : 0;
  uint last = P;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
  const uint pbase = ((t * p.n_head + h) * p.n_splits + split) * (p.D + 2);
  start = max(start, split * p.split_len);
  last = min(P, (split + 1) * p.split_len - 1);
  if (start > last) {  // nothing of this split is visible to the token (uniform per workgroup)
    if (tid == 0) {
      part[pbase + p.D] = -1.0 / 0.0;
      part[pbase + p.D + 1] = 0.0;
    }
    return;
  }
#endif
  const uint btab = seq_row[t] * p.max_blocks;
#ifdef HEAD_OPS
  // The query head and its group's K row through the ops together; the group's first head
  // appends. No workgroup reads the rows it writes: the own key and value come from kself / vself.
  const float temp = ho_run(ho_src_of(p), t, h, hk, D, row, P, h % (p.n_head / p.n_head_kv) == 0);
  for (uint i = tid; i < D / 4; i += WG)
    qs[i] = vec4(ho_h[0][4 * i] * temp, ho_h[0][4 * i + 1] * temp, ho_h[0][4 * i + 2] * temp, ho_h[0][4 * i + 3] * temp);
#else
  for (uint i = tid; i < D / 4; i += WG) {
    const uint qb = p.q_off + t * p.q_stride + h * D + 4 * i;
    qs[i] = vec4(q[qb], q[qb + 1], q[qb + 2], q[qb + 3]);
  }
#endif
  barrier();
  float m = -1.0 / 0.0, l = 0.0;
  float acc[PER_THREAD];
  for (uint k = 0; k < PER_THREAD; ++k) acc[k] = 0.0;
#ifdef V4_D
  vec4 acc4 = vec4(0.0);
  const uint v4_kg = tid / V4_G, v4_dl = tid % V4_G;
#endif

  for (uint j0 = start; j0 <= last; j0 += WG) {
    const uint j = j0 + tid;
    float s = -1.0 / 0.0;
    uint slot = 0;
    if (j <= last) {
      slot = blocks[btab + j / p.block_size] * p.block_size + j % p.block_size;
      const uint kb = slot * row + hk * D;
      float d = 0.0;
      // The key row's words in batches of 16 loads before their dot products (same order): D is a
      // push constant, so a loop of one load and one dot waited out a memory latency per word
      // (32 a key at head dim 128).
      for (uint c0 = 0; c0 < D / 4; c0 += 16) {
        vec4 kr[16];
        [[unroll]] for (uint u = 0; u < 16; ++u) {
          const uint c = min(c0 + u, D / 4 - 1);
#ifdef HEAD_OPS
          if (j == P) {  // the step's own key, from shared memory
            kr[u] = kself[c];
            continue;
          }
#endif
#ifdef KV_K_F32
          kr[u] = vec4(kc[kb + 4 * c], kc[kb + 4 * c + 1], kc[kb + 4 * c + 2], kc[kb + 4 * c + 3]);
#else
          kr[u] = vec4(kc[kb / 4 + c]);
#endif
        }
        [[unroll]] for (uint u = 0; u < 16; ++u)
          if (c0 + u < D / 4) d += dot(qs[c0 + u], kr[u]);
      }
      s = d * p.scale;
    }
    const float m_new = max(m, wg_max(s));
    const float e = j <= last ? exp(s - m_new) : 0.0;
    const float corr = exp(m - m_new);
    probs[tid] = e;
#ifdef HEAD_OPS
    slot_of[tid] = j == P ? ~0u : slot;  // ~0u: the step's own value (vself)
#else
    slot_of[tid] = slot;
#endif
    l = l * corr + wg_sum(e);  // wg_sum's barriers also publish probs / slot_of
    m = m_new;
    const uint n_keys = min(WG, last + 1 - j0);
#ifdef V4_D
    acc4 *= corr;
    uint jj = v4_kg;
    for (; jj + 7 * V4_KG < n_keys; jj += 8 * V4_KG) {  // 8 keys' loads in flight, summed in key order
      vec4 v[8];
      [[unroll]] for (uint u = 0; u < 8; ++u) v[u] = V4_AT(jj + u * V4_KG);
      [[unroll]] for (uint u = 0; u < 8; ++u) acc4 += probs[jj + u * V4_KG] * v[u];
    }
    for (; jj < n_keys; jj += V4_KG) acc4 += probs[jj] * V4_AT(jj);
#else
    for (uint k = 0; k < PER_THREAD; ++k) {
      const uint d = tid + k * WG;
      if (d >= D) break;
      float a = acc[k] * corr;
      uint jj = 0;
      for (; jj + 8 <= n_keys; jj += 8) {  // 8 keys' loads in flight, summed in key order
        float v[8];
        [[unroll]] for (uint u = 0; u < 8; ++u) v[u] = V_AT(jj + u, d);
        [[unroll]] for (uint u = 0; u < 8; ++u) a += probs[jj + u] * v[u];
      }
      for (; jj < n_keys; ++jj) a += probs[jj] * V_AT(jj, d);
      acc[k] = a;
    }
#endif
    barrier();  // probs / slot_of are rewritten by the next tile
  }
#ifdef V4_D
  // The key groups' sums, in group order, into the per-dim accumulators of the paths below.
  v4red[tid] = acc4;
  barrier();
  for (uint k = 0; k < PER_THREAD; ++k) {
    const uint d = tid + k * WG;
    if (d >= D) break;
    float a = 0.0;
    for (uint g = 0; g < V4_KG; ++g) a += v4red[g * V4_G + d / 4][d % 4];
    acc[k] = a;
  }
#endif
#ifdef SPLIT
  for (uint k = 0; k < PER_THREAD; ++k) {
    const uint d = tid + k * WG;
    if (d < D) part[pbase + d] = acc[k];
  }
  if (tid == 0) {
    part[pbase + D] = m;
    part[pbase + D + 1] = l;
  }
#else
  for (uint k = 0; k < PER_THREAD; ++k) {
    const uint d = tid + k * WG;
    if (d < D) o[p.o_off + t * p.o_stride + h * D + d] = acc[k] / l;
#ifdef QUANT_OUT
    if (d < D) q8v[d] = acc[k] / l;
#endif
#ifdef ATTN_F16_OUT
    if (d < D) attn_f16_out((t * p.n_head + h) * D + d, acc[k] / l);
#endif
  }
#ifdef QUANT_OUT
  barrier();
  q8_store_head(t, h);
#endif
#endif
}
#endif
