// Decode attention on tensor cores, split over the context (flash-decoding): one warp per (KV
// head, token, split) over a cache with a compressed side (q8_0 / TurboQuant; the other side may
// be f16). Opt-in (STRATA_VK_MMA_DEC=1): correct, but slower than attention_qdec on the H200
// (bench/RESULTS.md, session 14). The G query heads that
// share the KV head are rows 0..G-1 of a 16-row f16 tile; key tiles of 16 rows are read a tile
// ahead as raw fields and decoded to f16 in shared memory (kv_codec.glsl's row codecs), so
// S = Q K^T and O += P V run on the tensor cores and the decode is spread over the whole warp
// (attention_qdec decodes a key per thread, on each key's chain).
// Two passes over the split instead of an online softmax: the scores of every key into shared
// memory, their softmax, then the values, so O is never rescaled. TurboQuant keys are scored
// against the rotated queries and TurboQuant values summed in the rotated domain, the sum rotated
// back once; keys within the full-precision window read the f16 ring (attention_qdec's semantics:
// key j for the token at P when j + window > P and the ring's tag holds j), scored by the plain
// queries and summed after the rotation back.
// Writes unnormalised partials (acc, m, l) in attention.glsl's layout, merged by its COMBINE pass.
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
layout(local_size_x = 32) in;
layout(binding = 0, std430) buffer Part { float part[]; };
layout(binding = 1, std430) readonly buffer Q { float q[]; };
layout(binding = 2, std430) readonly buffer Kc { uvec4 kc[]; };  // f16 rows, 8 halves per uvec4
layout(binding = 2, std430) readonly buffer K16 { uint16_t k16[]; };
layout(binding = 2, std430) readonly buffer K8 { uint8_t k8[]; };
layout(binding = 3, std430) readonly buffer Vc { uvec4 vc[]; };
layout(binding = 3, std430) readonly buffer V16 { uint16_t v16[]; };
layout(binding = 3, std430) readonly buffer V8 { uint8_t v8[]; };
layout(binding = 4, std430) readonly buffer Pos { int pos[]; };
layout(binding = 5, std430) readonly buffer SeqRow { uint seq_row[]; };
layout(binding = 6, std430) readonly buffer Blocks { uint blocks[]; };
layout(binding = 8, std430) readonly buffer Kring { uvec4 kring[]; };
layout(binding = 9, std430) readonly buffer Vring { uvec4 vring[]; };
layout(binding = 10, std430) readonly buffer Tags { uint tags[]; };
layout(push_constant) uniform Params {
  uint n_head, n_head_kv, D, chunk;
  uint q_off, q_stride, o_off, o_stride;
  uint block_size, max_blocks;
  float scale;
  uint split_len, n_splits;
  uint window, ring_rows;
} p;

#if KV_K_KIND == 0 || KV_V_KIND == 0
#error attention_mma_dec reads f16, q8_0 and TurboQuant caches (not f32)
#endif
const uint D = KV_D, G = GQA_G, BK = 16;
const uint DV = D / 8;             // uvec4 per row
const uint DS = DV + 1;            // shared row stride in uvec4 (padded)
const uint PS = BK / 8 + 1;        // P row stride in uvec4
const uint LOADS = BK * DV / 32;   // uvec4 per lane per tile
const uint SL = MAX_SPLIT;         // the longest split (the host keeps split_len <= MAX_SPLIT)
shared uvec4 tile[BK * DS];        // a K or V tile as f16 rows; first the query rows
shared float st[16 * BK];          // S of a tile; at the end a 16 x 16 square of O on its way out
shared uvec4 pt[16 * PS];          // P of a tile, f16
shared float sc[G * SL];           // the split's scores, then its softmax weights
uvec4 raw[LOADS];

KV_F16_ROW_CODECS()

#ifdef KV_RING
bool ring_holds(uint seq, uint j) { return tags[seq * p.ring_rows + j % p.ring_rows] == j; }
#endif

// Tile rows j0..j0+BK-1 (zeros past hi) of side 0 (K) or 1 (V) into raw: phase 0 a compressed
// side's codes, phase 1 its f16 ring row (zeros where the ring lacks the key); f16 sides the cache.
void fetch(uint side, uint j0, uint hi, uint btab, uint hk, uint seq, uint phase) {
  const uint lane = gl_LocalInvocationID.x;
  [[unroll]] for (uint i = 0; i < LOADS; ++i) {
    const uint e = lane + 32 * i, k = e / DV, c = e % DV, j = j0 + k;
    raw[i] = uvec4(0);
    if (j > hi) continue;
    const uint srow = (blocks[btab + j / p.block_size] * p.block_size + j % p.block_size) * p.n_head_kv + hk;
#ifdef KV_RING
    const uint rat = ((seq * p.ring_rows + j % p.ring_rows) * p.n_head_kv + hk) * DV + c;
    const bool held = phase == 1 && ring_holds(seq, j);
#else
    const uint rat = 0;
    const bool held = false;
#endif
    if (side == 0) {
#if KV_K_KIND == 1
      raw[i] = kc[srow * DV + c];
#else
      if (phase == 0) raw[i] = k_codes(srow * KV_K_ROW_BYTES, c);
      else if (held) raw[i] = kring[rat];
#endif
    } else {
#if KV_V_KIND == 1
      raw[i] = vc[srow * DV + c];
#else
      if (phase == 0) raw[i] = v_codes(srow * KV_V_ROW_BYTES, c);
      else if (held) raw[i] = vring[rat];
#endif
    }
  }
}
void stash(uint side, uint phase) {
  const uint lane = gl_LocalInvocationID.x;
  [[unroll]] for (uint i = 0; i < LOADS; ++i) {
    const uint e = lane + 32 * i;
    uvec4 r = raw[i];
#if KV_K_KIND >= 2
    if (side == 0 && phase == 0) r = k_decode(r);
#endif
#if KV_V_KIND >= 2
    if (side == 1 && phase == 0) r = v_decode(r);
#endif
    tile[(e / DV) * DS + e % DV] = r;
  }
}

// The G query rows × scale as f16 rows 0..G-1 of tile (rows G..15 zero); rotated: TurboQuant's
// domain (through rot; every lane calls it).
void stage_q(uint qb, bool rotated) {
  const uint lane = gl_LocalInvocationID.x;
#if KV_K_KIND == 3
  if (rotated) {
    for (uint e = lane; e < G * D; e += 32) rot[e] = q[qb + e] * p.scale;
    barrier();
    tq_rotate_rot(G, true);
  }
#endif
  for (uint e = lane; e < 16 * DV; e += 32) {
    const uint g = e / DV, d = 8 * (e % DV);
    float x[8];
    [[unroll]] for (uint i = 0; i < 8; ++i) {
#if KV_K_KIND == 3
      if (rotated) {
        x[i] = g < G ? rot[g * D + d + i] : 0.0;
        continue;
      }
#endif
      x[i] = g < G ? q[qb + g * D + d + i] * p.scale : 0.0;
    }
    tile[g * DS + e % DV] = pack8(x);
  }
  barrier();
}

void main() {
  const uint hk = gl_WorkGroupID.x, t = gl_WorkGroupID.y, split = gl_WorkGroupID.z, lane = gl_LocalInvocationID.x;
  const uint h0 = hk * G, P = uint(pos[t]), seq = seq_row[t], btab = seq * p.max_blocks;
  const uint start = p.chunk != 0 ? P / p.chunk * p.chunk : 0;
  const uint lo = max(start, split * p.split_len), hi = min(P, (split + 1) * p.split_len - 1);
  const uint pb = ((t * p.n_head + h0) * p.n_splits + split) * (D + 2);  // head g: + g * n_splits * (D + 2)
  if (lo > hi) {  // nothing of this split is visible to the token (uniform)
    if (lane < G) {
      part[pb + lane * p.n_splits * (D + 2) + D] = -1.0 / 0.0;
      part[pb + lane * p.n_splits * (D + 2) + D + 1] = 0.0;
    }
    return;
  }
#if KV_K_KIND == 3
  for (uint i = lane; i < TQK_SEGMENTS * 16u; i += 32) kcent[i] = TQK_CENTROIDS[i];
#endif
#if KV_V_KIND == 3
  for (uint i = lane; i < TQV_SEGMENTS * 16u; i += 32) vcent[i] = TQV_CENTROIDS[i];
#endif
  // Keys from `recent` on are in the token's window: the ring's rows where it holds them.
#ifdef KV_RING
  const uint recent = P + 1 >= p.window ? P + 1 - p.window : 0;
  bool missing = false;
  for (uint j = max(lo, recent) + lane; j <= hi; j += 32) missing = missing || !ring_holds(seq, j);
  const bool all_codes = subgroupAny(missing);  // phase 0 takes the window's missing rows too
#else
  const uint recent = hi + 1;
  const bool all_codes = true;
#endif
  const uint qb = p.q_off + t * p.q_stride + h0 * D;
  stage_q(qb, KV_K_KIND == 3);
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> qa[D / 16];
  [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatLoadNV(qa[c], tile, 2 * c, DS, false);
  barrier();

  // Scores: phase 0 the codes (f16 sides: every key), phase 1 the ring's rows.
  for (uint phase = 0; phase < 2; ++phase) {
    const uint from = phase == 0 ? lo : max(lo, recent);
    const uint to = phase == 0 && !all_codes ? min(hi, recent - 1) : hi;
    if (phase == 1 && recent > hi) break;
    if (phase == 0 && !all_codes && recent <= lo) continue;
#if KV_K_KIND == 3
    if (phase == 1) {  // ring keys are plain: so are the queries that score them
      stage_q(qb, false);
      [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatLoadNV(qa[c], tile, 2 * c, DS, false);
      barrier();
    }
#endif
    fetch(0, from, to, btab, hk, seq, phase);
    for (uint j0 = from; j0 <= to; j0 += BK) {
      stash(0, phase);
      barrier();
      if (j0 + BK <= to) fetch(0, j0 + BK, to, btab, hk, seq, phase);
      fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> s = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
      [[unroll]] for (uint c = 0; c < D / 16; ++c) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> kb;
        coopMatLoadNV(kb, tile, 2 * c, DS, true);  // K^T: column-major view of [key][d]
        s = coopMatMulAddNV(qa[c], kb, s);
      }
      coopMatStoreNV(s, st, 0, BK, false);
      barrier();
      for (uint e = lane; e < G * BK; e += 32) {
        const uint g = e / BK, j = j0 + e % BK;
        bool mine = j <= to;
#ifdef KV_RING
        if (mine && j >= recent) mine = (phase == 1) == ring_holds(seq, j);
#endif
        if (mine) sc[g * SL + j - lo] = st[g * BK + e % BK];
      }
      barrier();  // tile and st are rewritten by the next key tile
    }
  }

  // The softmax of each head's scores over the split.
  const uint n = hi - lo + 1;
  float m[G], l[G];
  [[unroll]] for (uint g = 0; g < G; ++g) {
    float mx = -1.0 / 0.0;
    for (uint k = lane; k < n; k += 32) mx = max(mx, sc[g * SL + k]);
    m[g] = subgroupMax(mx);
    float sum = 0.0;
    for (uint k = lane; k < n; k += 32) {
      const float w = exp(sc[g * SL + k] - m[g]);
      sc[g * SL + k] = w;
      sum += w;
    }
    l[g] = subgroupAdd(sum);
  }
  barrier();

  // Values: O += P V per tile, phase 0 then (after the rotation back) phase 1.
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[D / 16];
  [[unroll]] for (uint c = 0; c < D / 16; ++c) acc[c] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  for (uint phase = 0; phase < 2; ++phase) {
    const uint from = phase == 0 ? lo : max(lo, recent);
    const uint to = phase == 0 && !all_codes ? min(hi, recent - 1) : hi;
#if KV_V_KIND == 3
    if (phase == 1) {  // the codes' sums back from the rotated domain (linear: the partial stays exact)
      [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatStoreNV(acc[c], rot, 16 * c, D, false);
      barrier();
      tq_rotate_rot(G, false);
      [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatLoadNV(acc[c], rot, 16 * c, D, false);
      barrier();
    }
#endif
    if (phase == 1 && recent > hi) break;
    if (phase == 0 && !all_codes && recent <= lo) continue;
    fetch(1, from, to, btab, hk, seq, phase);
    for (uint j0 = from; j0 <= to; j0 += BK) {
      stash(1, phase);
      {  // P of the tile: lane = row r (of 16) and half h of its 16 keys
        const uint r = lane / 2, k0 = 8 * (lane % 2);
        float x[8];
        [[unroll]] for (uint i = 0; i < 8; ++i) {
          const uint j = j0 + k0 + i;
          bool mine = r < G && j <= to;
#ifdef KV_RING
          if (mine && j >= recent) mine = (phase == 1) == ring_holds(seq, j);
#endif
          x[i] = mine ? sc[min(r, G - 1) * SL + min(j - lo, SL - 1)] : 0.0;
        }
        pt[r * PS + lane % 2] = pack8(x);
      }
      barrier();
      if (j0 + BK <= to) fetch(1, j0 + BK, to, btab, hk, seq, phase);
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pa;
      coopMatLoadNV(pa, pt, 0, PS, false);
      [[unroll]] for (uint c = 0; c < D / 16; ++c) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> vb;
        coopMatLoadNV(vb, tile, 2 * c, DS, false);  // V: [key][d]
        acc[c] = coopMatMulAddNV(pa, vb, acc[c]);
      }
      barrier();  // tile and pt are rewritten by the next value tile
    }
  }

  // The partials: rows 0..G-1 of O, 16 dims at a time through st, then m and l.
  [[unroll]] for (uint c = 0; c < D / 16; ++c) {
    coopMatStoreNV(acc[c], st, 0, 16, false);
    barrier();
    for (uint e = lane; e < G * 16; e += 32)
      part[pb + (e / 16) * p.n_splits * (D + 2) + 16 * c + e % 16] = st[e];
    barrier();
  }
  [[unroll]] for (uint g = 0; g < G; ++g)
    if (lane == g) {
      part[pb + g * p.n_splits * (D + 2) + D] = m[g];
      part[pb + g * p.n_splits * (D + 2) + D + 1] = l[g];
    }
}
