// attention_qdec.glsl's LANES form, appended after it by the shader assembler (pipelines.cpp)
// when LANES is defined: it uses attention_qdec.glsl's bindings, decoders and helpers.
#ifdef LANES
#extension GL_KHR_shader_subgroup_shuffle : require
// LANES (attention_dec.glsl's LANES form over code rows): each group of LPK lanes of a subgroup
// is a stream of keys, the lanes split the head's dims (where they sit in a row found once), so a
// code row is one coalesced load and a lane decodes only its dims. A stream takes KC = LPK / G
// keys at a time: all their loads issued first, the lanes' partial dot products of the KC x G
// (key, head) pairs summed by halving exchanges, an online softmax per stream with no workgroup
// barrier. Two passes share the softmax state: the codes of every key the ring does not hold
// (rotated query and sums), then, where the split reaches the window, the ring's f16 rows (plain
// query and sums) in the same registers (H200, tq3 at depth 4096: 48.1 us a layer against 58.7
// with both beside each other). The streams meet in shared memory once.
// LANES_ONE_PASS (no window, or the window's keys in a split of their own): each split runs one of the
// two passes, so its streams' sums merge once (below).
#if defined(LANES_ONE_PASS) && defined(KV_RING) && !defined(RING_SPLIT)
#error "attention_qdec LANES_ONE_PASS: no window ring, or RING_SPLIT"
#endif
#ifndef CHUNK_KEYS
#define CHUNK_KEYS (LPK / GQA_G)
#endif
// KC keys a chunk (CHUNK_KEYS: fewer, fewer registers), PAIRS = KC x G (key, head) pairs.
const uint DPL = D / LPK, NC = DPL / 4u, KC = CHUNK_KEYS, PAIRS = KC * G, NS = WG / LPK;
#if LPK % GQA_G != 0 || KV_D % (4 * LPK) != 0 || (LPK / GQA_G) % CHUNK_KEYS != 0
#error "attention_qdec LANES: LPK must be a multiple of GQA_G, KV_D of 4 * LPK, and CHUNK_KEYS divide LPK / GQA_G"
#endif
shared float pw[NS][LPK];                // a chunk's probabilities, pair i at i
shared float cw[NS][G];                  // a chunk's rescale factor per head
shared float sm_m[NS][G], sm_l[NS][G], sm_mc[NS][G];  // the streams' softmax state; sm_mc: max after the codes
shared float vsum[NS][G][D];             // the streams' unnormalised value sums
shared float w_codes[NS][G], w_all[NS][G], head_max[G];  // the merge's weights exp(m_s - M) and M a head
#if KV_HAS_TQ
#define rot_or_sum rot  // kv_codec's rotation buffer (TQ_ROT_N >= G vectors) holds the merged sums
#else
shared float rot_or_sum[G * D];
#endif
// The merge's weights, once a (stream, head) by thread tid < NS * G (visible after the caller's
// next barrier): head g's maximum M over the streams' final states, and exp(m - M) for the
// stream's maximum after the codes (sm_mc) and its final one (sm_m); a stream with no key: 0.
// (Each (head, dim) computed them itself: 3 x NS exponentials and 2 x NS maxima a dim; the whole
// merge, QDEC_SKIP 32, was ~7 of the kernel's 32 us a layer at depth 4096 on the H200.)
void merge_weights(uint tid) {
  if (tid >= NS * G) return;
  const uint s = tid / G, g = tid % G;
  float M = -1.0 / 0.0;
  for (uint k = 0u; k < NS; ++k) M = max(M, sm_m[k][g]);
#ifndef LANES_ONE_PASS
  w_codes[s][g] = sm_mc[s][g] > -1.0 / 0.0 ? exp(sm_mc[s][g] - M) : 0.0;
#endif
  w_all[s][g] = sm_m[s][g] > -1.0 / 0.0 ? exp(sm_m[s][g] - M) : 0.0;
  if (s == 0u) head_max[g] = M;
}
// Head g's softmax sum over the streams, relative to head_max[g].
float merged_l(uint g) {
  float L = 0.0;
  for (uint s = 0u; s < NS; ++s) L += w_all[s][g] * sm_l[s][g];
  return L;
}
// The streams' sums of vsum at (g, d), each relative to its maximum after the codes or its final
// one, weighted to head_max[g].
float merged_sum(uint g, uint d, bool codes) {
  float a = 0.0;
  for (uint s = 0u; s < NS; ++s) a += (codes ? w_codes[s][g] : w_all[s][g]) * vsum[s][g][d];
  return a;
}
// Element i (head i / D, dim i % D) of the group's merged value sum a: the split's partial, with the head's
// maximum and softmax sum beside its dims, or (unsplit) the output a / sum.
void write_merged(uint t, uint h0, uint i, float a) {
  const uint g = i / D, d = i % D;
#ifdef SPLIT
  const uint pb = ((t * p.n_head + h0 + g) * p.n_splits + gl_WorkGroupID.z) * (D + 2u);
  part[pb + d] = a;
  if (d == 0u) {
    part[pb + D] = head_max[g];
    part[pb + D + 1u] = merged_l(g);
  }
#else
  o[p.o_off + t * p.o_stride + (h0 + g) * D + d] = a / merged_l(g);
#endif
}
// This lane's dims of the group's queries (from q[qb]) × scale.
void plain_query(uint qb, uint d0, out vec4 qr[G][NC]) {
  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint c = 0u; c < NC; ++c) {
      const uint b = qb + g * D + d0 + 4u * c;
      qr[g][c] = vec4(q[b], q[b + 1u], q[b + 2u], q[b + 3u]) * p.scale;
    }
}
void put_sums(uint sid, uint d0, vec4 a[G][NC]) {
  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint c = 0u; c < NC; ++c)
      [[unroll]] for (uint i = 0u; i < 4u; ++i) vsum[sid][g][d0 + 4u * c + i] = a[g][c][i];
}

// One chunk of keys from j0 whose rows are in kr / vr (bit k of `valid`: key j0 + k counts):
// the scores against qr, the stream's online softmax (m, l) and its value sums acc (pv: pair
// k * G + g, this lane's share of key k's score for head g). A macro over main()'s variables: a
// function taking the rows as arrays compiled to 2x the code and ran 2x slower.
#define FLOAT_SCORES(pv)                                                                   \
  [[unroll]] for (uint k = 0u; k < KC; ++k)                                                \
    [[unroll]] for (uint g = 0u; g < G; ++g) {                                             \
      float d = 0.0;                                                                       \
      [[unroll]] for (uint c = 0u; c < NC; ++c) d += dot(qr[g][c], kr[k][c]);               \
      pv[k * G + g] = d;                                                                   \
    }
// QDEC_IDOT: the codes' keys as int8 words kw8 (a lane's four dims) and scales ks (the row's s/√n
// times the centroids' step) against the lane's int8 queries qw and their block steps qs.
#define INT_SCORES(pv)                                                                     \
  [[unroll]] for (uint k = 0u; k < KC; ++k)                                                \
    [[unroll]] for (uint g = 0u; g < G; ++g) {                                             \
      float d = 0.0;                                                                       \
      [[unroll]] for (uint c = 0u; c < NC; ++c) d += float(dot4(kw8[k][c], qw[g][c])) * (qs[g][c] * ks[k][c]); \
      pv[k * G + g] = d;                                                                   \
    }
#define CHUNK_STEP() CHUNK_STEP_WITH(FLOAT_SCORES)
#define PW_SCALE 1.0  // a weight's factor: QDEC_VFOLD's code pass scales it by its key's value scale
#define CHUNK_STEP_WITH(SCORES) {                                                          \
  float pv[PAIRS];                                                                         \
  SCORES(pv)                                                                               \
  HALVE_PAIRS(pv, li, PAIRS, 16u) HALVE_PAIRS(pv, li, PAIRS, 8u) HALVE_PAIRS(pv, li, PAIRS, 4u) \
  HALVE_PAIRS(pv, li, PAIRS, 2u) HALVE_PAIRS(pv, li, PAIRS, 1u)                            \
  JOIN_PAIR_GROUPS(pv[0], PAIRS, LPK)                                                      \
  const float s = ((valid >> ((li % PAIRS) / G)) & 1u) != 0u ? pv[0] : -1.0 / 0.0;         \
  float cm = s;                                                                            \
  for (uint o = G; o < PAIRS; o *= 2u) cm = max(cm, subgroupShuffleXor(cm, o));            \
  const float mn = max(m, cm);                                                             \
  const float e = s > -1.0 / 0.0 ? exp(s - mn) : 0.0, corr = m == mn ? 1.0 : exp(m - mn);  \
  float es = e;                                                                            \
  for (uint o = G; o < PAIRS; o *= 2u) es += subgroupShuffleXor(es, o);                    \
  l = l * corr + es;                                                                       \
  m = mn;                                                                                  \
  pw[sid][li] = e * PW_SCALE;                                                              \
  if (li < G) cw[sid][li] = corr;                                                          \
  subgroupMemoryBarrierShared();                                                           \
  subgroupBarrier();                                                                       \
  [[unroll]] for (uint g = 0u; g < G; ++g) {                                               \
    const float cg = cw[sid][g];                                                           \
    [[unroll]] for (uint c = 0u; c < NC; ++c) acc[g][c] *= cg;                             \
  }                                                                                        \
  [[unroll]] for (uint k = 0u; k < KC; ++k)                                                \
    [[unroll]] for (uint g = 0u; g < G; ++g) {                                             \
      const float pg = pw[sid][k * G + g];                                                 \
      [[unroll]] for (uint c = 0u; c < NC; ++c) acc[g][c] += pg * vr[k][c];                \
    }                                                                                      \
  subgroupBarrier();                                                                       \
  }

void main() {
  const uint hk = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint sid = gl_SubgroupID * (gl_SubgroupSize / LPK) + gl_SubgroupInvocationID / LPK;  // stream
  const uint li = gl_SubgroupInvocationID % LPK, d0 = li * DPL;
  const uint h0 = hk * G;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
#endif
  if ((QDEC_SKIP & 64) != 0) return;
  uint start, last;
  RETURN_IF_NO_KEYS(t, h0, start, last);
  const uint P = uint(pos[t]), seq = seq_row[t], btab = seq * p.max_blocks;
#ifdef RING_SPLIT
  const bool ring_split = split == p.n_splits - 1u;  // the window's split (uniform): pass 2 only
#else
  const bool ring_split = false;
#endif
  if ((QDEC_SKIP & 16) == 0) load_centroids();
#ifdef QDEC_IDOT
  load_idot_tables();
#endif
#ifdef QDEC_VFOLD
  load_value_pairs();
#endif
  const uint qb = p.q_off + t * p.q_stride + h0 * D;
  vec4 qr[G][NC];  // this lane's dims of the queries × scale as the codes score them
#if KV_K_KIND == 3 && defined(QROT_IN)
  if (!ring_split) {
    barrier();  // the centroids
    [[unroll]] for (uint g = 0u; g < G; ++g)
      [[unroll]] for (uint c = 0u; c < NC; ++c) qr[g][c] = qrot[((t * p.n_head + h0 + g) * D + d0) / 4u + c] * p.scale;
  } else
#elif KV_K_KIND == 3
  if (!ring_split) {
    for (uint i = tid; i < G * D; i += WG) rot[i] = q[qb + i];
    barrier();
#if (QDEC_SKIP & 1) == 0
    tq_rotate_rot(G, true);  // ends with a barrier
#endif
    [[unroll]] for (uint g = 0u; g < G; ++g)
      [[unroll]] for (uint c = 0u; c < NC; ++c) {
        const uint b = g * D + d0 + 4u * c;
        qr[g][c] = vec4(rot[b], rot[b + 1u], rot[b + 2u], rot[b + 3u]) * p.scale;
      }
  } else
#endif
  {
    barrier();  // the centroids
    plain_query(qb, d0, qr);
  }
#ifdef QDEC_IDOT
  const float idot_lane_dims_in_one_block[32u % DPL == 0u ? 1 : -1] = float[](0.0);  // a compile error otherwise
  // This lane's dims of the queries as int8 a 32-dim block (the thread-a-key form's quantize_queries:
  // the block's 32 / DPL lanes share its maximum).
  uint qw[G][NC];
  float qs[G][NC];
  [[unroll]] for (uint g = 0u; g < G; ++g) {
    float a = 0.0;
    [[unroll]] for (uint c = 0u; c < NC; ++c) a = max(a, max_abs4(qr[g][c]));
    for (uint o = 1u; o < 32u / DPL; o *= 2u) a = max(a, subgroupShuffleXor(a, o));
    const float inv = a > 0.0 ? 127.0 / a : 0.0;
    [[unroll]] for (uint c = 0u; c < NC; ++c) {
      qw[g][c] = query_int8x4(qr[g][c], inv);
      qs[g][c] = a / 127.0;
    }
  }
#endif
  rdims kd[NC], vd[NC];
  [[unroll]] for (uint c = 0u; c < NC; ++c) {
    kd[c] = k_dims_of(d0 + 4u * c);
    vd[c] = v_dims_of(d0 + 4u * c);
  }
#ifdef KV_RING
  const uint recent_from = P + 1u >= p.window ? P + 1u - p.window : 0u;
#endif
  vec4 acc[G][NC];
  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint c = 0u; c < NC; ++c) acc[g][c] = vec4(0.0);
  float m = -1.0 / 0.0, l = 0.0;  // the running max and sum of this lane's pair's head (li % G)
  // Pass 1: the codes. Keys past `last` re-read the last one and keys the ring holds read
  // nothing (zeros); neither counts. The window's split has no codes to read.
  for (uint j0 = start + sid * KC; !ring_split && j0 <= last; j0 += NS * KC) {
#ifdef QDEC_IDOT
    uint kw8[KC][NC];
    float ks[KC][NC];
    vec4 vr[KC][NC];
#else
    vec4 kr[KC][NC], vr[KC][NC];
#endif
#ifdef QDEC_VFOLD
    float vsk[KC];  // the keys' value scales s/√n (0 where a key does not count)
#endif
    uint valid = 0u;
#ifdef CHUNK_SLOTS
    uint slots[KC];
    PAGED_SLOTS(slots, KC, j0, last, blocks, btab, p.block_size)
#endif
    [[unroll]] for (uint k = 0u; k < KC; ++k) {
      const uint j = min(j0 + k, last);
      bool codes = j0 + k <= last;
#ifdef KV_RING
      if (j >= recent_from) codes = codes && tags[seq * p.ring_rows + j % p.ring_rows] != j;
#endif
      valid |= codes ? 1u << k : 0u;
#ifdef CHUNK_SLOTS
      const uint row = slots[k] * p.n_head_kv + hk;
#else
      const uint row = (blocks[btab + j / p.block_size] * p.block_size + j % p.block_size) * p.n_head_kv + hk;
#endif
      [[unroll]] for (uint c = 0u; c < NC; ++c) {  // loaded unconditionally, then selected: every load in flight
#ifdef QDEC_IDOT
        const uint b = row * KV_K_ROW_BYTES, sg = kd[c].cbase / 16u;
        const float sc = unpackHalf2x16(uint(k16[(b + kd[c].blk) / 2u])).x * kd[c].inv_sqrt_n * kstep[sg];
        const uint w = idot_word(sg, uint(k8[b + kd[c].low]), KV_K_TQ == 3 ? (uint(k8[b + kd[c].high]) >> kd[c].shift) & 15u : 0u);
        kw8[k][c] = codes ? w : 0u;
        ks[k][c] = codes ? sc : 0.0;
#else
        const vec4 kx = (QDEC_SKIP & 4) != 0 ? vec4(float(row & 7u)) : K_DIMS_LAB(row, kd[c]);
        kr[k][c] = codes ? kx : vec4(0.0);
#endif
#ifdef QDEC_VFOLD
        const vec4 vx = V_CODES(row, vd[c]);
#else
        const vec4 vx = (QDEC_SKIP & 8) != 0 ? vec4(float(row & 7u)) : V_DIMS_LAB(row, vd[c]);
#endif
        vr[k][c] = codes ? vx : vec4(0.0);
      }
#ifdef QDEC_VFOLD
      vsk[k] = codes ? v_row_scale(row) : 0.0;
#endif
    }
#ifdef QDEC_VFOLD
    float vpair_scale = vsk[0];  // the value scale of this lane's (key, head) pair after the exchanges
    [[unroll]] for (uint k = 1u; k < KC; ++k)
      if ((li % PAIRS) / G == k) vpair_scale = vsk[k];
#undef PW_SCALE
#define PW_SCALE vpair_scale
#endif
#ifdef QDEC_IDOT
    CHUNK_STEP_WITH(INT_SCORES)
#else
    CHUNK_STEP()
#endif
#undef PW_SCALE
#define PW_SCALE 1.0
  }
#ifndef LANES_ONE_PASS
  if (li < G) sm_mc[sid][li] = m;
  put_sums(sid, d0, acc);  // the codes' sums, relative to sm_mc
  [[unroll]] for (uint g = 0u; g < G; ++g)
    [[unroll]] for (uint c = 0u; c < NC; ++c) acc[g][c] = vec4(0.0);
#endif
#ifdef KV_RING
  // Pass 2: the window's keys the ring holds, against the plain query (RING_SPLIT: only in the
  // window's split, whose query is plain already).
  const uint ring_start = max(start, recent_from);
#ifdef RING_SPLIT
  if (ring_split) {
#else
  if (ring_start <= last) {  // uniform per workgroup
    plain_query(qb, d0, qr);
#endif
    for (uint j0 = ring_start + sid * KC; j0 <= last; j0 += NS * KC) {
      vec4 kr[KC][NC], vr[KC][NC];
      uint valid = 0u;
      [[unroll]] for (uint k = 0u; k < KC; ++k) {
        const uint j = min(j0 + k, last), rr = seq * p.ring_rows + j % p.ring_rows;
        const bool ring = j0 + k <= last && tags[rr] == j;
        valid |= ring ? 1u << k : 0u;
        const uint rb = (rr * p.n_head_kv + hk) * (D / 4u) + d0 / 4u;
#if KV_K_KIND < 2 || KV_V_KIND < 2  // an f32 / f16 side is read from the cache
        const uint row = (blocks[btab + j / p.block_size] * p.block_size + j % p.block_size) * p.n_head_kv + hk;
#endif
        [[unroll]] for (uint c = 0u; c < NC; ++c) {
#if KV_K_KIND >= 2
          const vec4 kx = vec4(kring[rb + c]);
#else
          const vec4 kx = k_dims(row, kd[c]);
#endif
#if KV_V_KIND >= 2
          const vec4 vx = vec4(vring[rb + c]);
#else
          const vec4 vx = v_dims(row, vd[c]);
#endif
          kr[k][c] = ring ? kx : vec4(0.0);
          vr[k][c] = ring ? vx : vec4(0.0);
        }
      }
      CHUNK_STEP()
    }
  }
#endif
  // The streams meet: the codes' sums merged (and rotated back), then the ring's added.
  if ((QDEC_SKIP & 32) != 0) {  // lab: one partial value a lane, no merge
    part[((t * p.n_head + h0) * p.n_splits + gl_WorkGroupID.z) * (D + 2u) + tid % D] = acc[0][0].x + m + l;
    return;
  }
  if (li < G) {
    sm_m[sid][li] = m;
    sm_l[sid][li] = l;
  }
#ifdef LANES_ONE_PASS
  // Every split ran one pass (the codes, or with RING_SPLIT the window's split the ring's rows), so the
  // streams' sums merge once, weighted by their final maxima: the two-pass merge's second barrier pair and
  // second sum over the streams added zeros. The same results, bit for bit.
  put_sums(sid, d0, acc);
  barrier();
  merge_weights(tid);
  barrier();
#if KV_V_KIND == 3 && (QDEC_SKIP & 2) == 0 && !defined(ROT_LATER)
  if (!ring_split) {  // uniform: the code splits' sums rotated back here
    for (uint i = tid; i < G * D; i += WG) rot_or_sum[i] = merged_sum(i / D, i % D, false);
    barrier();
    tq_rotate_rot(G, false);  // ends with a barrier
  }
  for (uint i = tid; i < G * D; i += WG) write_merged(t, h0, i, ring_split ? merged_sum(i / D, i % D, false) : rot_or_sum[i]);
#else
  for (uint i = tid; i < G * D; i += WG) write_merged(t, h0, i, merged_sum(i / D, i % D, false));
#endif
#else
  barrier();
  merge_weights(tid);
  barrier();
  for (uint i = tid; i < G * D; i += WG) rot_or_sum[i] = merged_sum(i / D, i % D, true);
  barrier();
  put_sums(sid, d0, acc);  // the ring's (vsum's reads are done)
#if KV_V_KIND == 3 && (QDEC_SKIP & 2) == 0 && !defined(ROT_LATER)
  if (!ring_split)
    tq_rotate_rot(G, false);  // ends with a barrier; a zero sum stays zero
  else
#endif
    barrier();
  for (uint i = tid; i < G * D; i += WG) write_merged(t, h0, i, rot_or_sum[i] + merged_sum(i / D, i % D, false));
#endif
#ifdef SPLIT_COMBINE
  SPLIT_COMBINE_CALL();
#endif
}
#endif
