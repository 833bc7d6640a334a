// Decode attention on tensor cores, split over the context (flash-decoding): one workgroup of NW
// warps per (KV head, token, split) over a cache with a compressed side (q8_0 / TurboQuant; the
// other side may be f16). Opt-in (STRATA_VK_MMA_DEC=1). The G query heads that share the KV head
// are rows 0..G-1 of a 16-row f16 tile; the warps take the split's 16-key tiles in turn, each
// reading its next tile's raw fields while it decodes the current one to f16 in its own shared
// tile (kv_codec.glsl's row codecs: every element decoded once for all G heads), so S = Q K^T
// and O += P V run on the tensor cores. (Session 14's form, one warp per split, measured slower
// than attention_qdec: a warp's tile chain was the kernel's only work on an SM.)
// Two passes over the split instead of an online softmax: the scores of every key into shared
// memory, their softmax, then the values, so O is never rescaled; the warps' value sums meet in
// shared memory at the end. TurboQuant keys are scored against the rotated queries and
// TurboQuant values summed in the rotated domain, the sum rotated back once; keys within the
// full-precision window read the f16 ring (attention_qdec's semantics: key j for the token at P
// when j + window > P and the ring's tag holds j), scored by the plain queries and summed after
// the rotation back.
// Writes unnormalised partials (acc, m, l) in attention.glsl's layout, merged by its COMBINE pass.
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
layout(local_size_x = WG) in;
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
// MMA_DEC_SKIP (lab only, STRATA_VK_MMA_DEC_SKIP; wrong results): 1 no loads in fetch, 2 no decode
// in stash, 4 no key tiles in the scores pass, 8 none in the values pass, 16 the frame only (return after the
// queries are staged), 32 no synchronisation within a warp, 64 no tensor-core loads and products.
#ifndef MMA_DEC_SKIP
#define MMA_DEC_SKIP 0
#endif
const uint D = KV_D, G = GQA_G, BK = 16, NW = WG / 32;
const uint DV = D / 8;             // uvec4 per row
const uint DS = DV + 1;            // shared row stride in uvec4 (padded)
const uint PS = BK / 8 + 1;        // P row stride in uvec4
const uint LOADS = BK * DV / 32;   // uvec4 per lane per tile
const uint TS = BK * DS;           // a warp's tile in uvec4
const uint SL = MAX_SPLIT;         // the longest split (the host keeps split_len <= MAX_SPLIT)
#if WG % 32 != 0 || GQA_G > 8 || 64 * (KV_D / 8 + 1) < GQA_G * KV_D
#error "attention_mma_dec: WG a multiple of 32, GQA_G <= 8 (the warps' sums fit their tiles)"
#endif
shared uvec4 tile[NW * TS];        // each warp's K or V tile as f16 rows; first the query rows; at
                                   // the end the warps' value sums (G x D floats a warp)
shared float st[NW * 16 * BK];     // each warp's S of a tile, then 16 x 16 squares of its O
shared uvec4 pt[NW * 16 * PS];     // each warp's P of a tile, f16
shared float sc[G * SL];           // the split's scores, then its softmax weights
shared float head_m[G], head_l[G];
shared uint any_missing;
uvec4 raw[LOADS];

KV_F16_ROW_CODECS()

#ifdef KV_RING
bool ring_holds(uint seq, uint j) { return tags[seq * p.ring_rows + j % p.ring_rows] == j; }
#endif

// A warp's shared tile, S, P and scores are its own: its lanes meet there without the others.
void warp_sync() {
#if (MMA_DEC_SKIP & 32) == 0
  subgroupMemoryBarrierShared();
  subgroupBarrier();
#endif
}

// Tile rows j0..j0+BK-1 (zeros past hi) of side 0 (K) or 1 (V) into raw: phase 0 a compressed
// side's codes, phase 1 its f16 ring row (zeros where the ring lacks the key); f16 sides the cache.
// Lane k < BK finds key j0 + k's stored row once (the block table), the items take it by shuffle,
// and every item's loads are issued before any is used (keys past hi re-read the last one).
void fetch(uint side, uint j0, uint hi, uint btab, uint hk, uint seq, uint phase) {
  const uint lane = gl_SubgroupInvocationID;
  const uint jl = min(j0 + lane % BK, hi);
  const uint lane_row = (blocks[btab + jl / p.block_size] * p.block_size + jl % p.block_size) * p.n_head_kv + hk;
  [[unroll]] for (uint i = 0; i < LOADS; ++i) {
    const uint e = lane + 32 * i, k = e / DV, c = e % DV, j = j0 + k;
    const uint srow = subgroupShuffle(lane_row, k);
    uvec4 r = uvec4(0);
    if ((MMA_DEC_SKIP & 1) != 0) {
      r = uvec4(srow, c, 0, 0);
    } else if (phase == 0) {  // uniform
      if (side == 0) {
#if KV_K_KIND == 1
        r = kc[srow * DV + c];
#else
        r = k_codes(srow * KV_K_ROW_BYTES, c);
#endif
      } else {
#if KV_V_KIND == 1
        r = vc[srow * DV + c];
#else
        r = v_codes(srow * KV_V_ROW_BYTES, c);
#endif
      }
    } else {
#ifdef KV_RING
      const uint rat = ((seq * p.ring_rows + min(j, hi) % p.ring_rows) * p.n_head_kv + hk) * DV + c;
#if KV_K_KIND == 1
      if (side == 0) r = kc[srow * DV + c];
#else
      if (side == 0) r = ring_holds(seq, j) ? kring[rat] : uvec4(0);
#endif
#if KV_V_KIND == 1
      if (side == 1) r = vc[srow * DV + c];
#else
      if (side == 1) r = ring_holds(seq, j) ? vring[rat] : uvec4(0);
#endif
#endif
    }
    raw[i] = j > hi ? uvec4(0) : r;
  }
}
// raw decoded to f16 into the warp's tile at tb.
void stash(uint side, uint phase, uint tb) {
  const uint lane = gl_SubgroupInvocationID;
  [[unroll]] for (uint i = 0; i < LOADS; ++i) {
    const uint e = lane + 32 * i;
    uvec4 r = raw[i];
#if (MMA_DEC_SKIP & 2) != 0
    tile[tb + (e / DV) * DS + e % DV] = r;
    continue;
#endif
#if KV_K_KIND >= 2
    if (side == 0 && phase == 0) r = k_decode(r);
#endif
#if KV_V_KIND >= 2
    if (side == 1 && phase == 0) r = v_decode(r);
#endif
    tile[tb + (e / DV) * DS + e % DV] = r;
  }
}

// The G query rows × scale as f16 rows 0..G-1 of the first warp's tile (rows G..15 zero), loaded
// into qa by every warp; rotated: TurboQuant's domain (through rot). The whole workgroup calls it.
#define STAGE_Q(rotated)                                                                          \
  {                                                                                               \
    if (KV_K_KIND == 3 && (rotated)) {                                                            \
      for (uint e = tid; e < G * D; e += WG) ROT_AT(e) = q[qb + e] * p.scale;                     \
      barrier();                                                                                  \
      ROTATE_Q();                                                                                 \
    }                                                                                             \
    for (uint e = tid; e < 16 * DV; e += WG) {                                                    \
      const uint g = e / DV, d = 8 * (e % DV);                                                    \
      float x[8];                                                                                 \
      [[unroll]] for (uint i = 0; i < 8; ++i)                                                     \
        x[i] = g >= G ? 0.0 : KV_K_KIND == 3 && (rotated) ? ROT_AT(g * D + d + i) : q[qb + g * D + d + i] * p.scale; \
      tile[g * DS + e % DV] = pack8(x);                                                           \
    }                                                                                             \
    barrier();                                                                                    \
    [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatLoadNV(qa[c], tile, 2 * c, DS, false);   \
    barrier();                                                                                    \
  }
#if KV_K_KIND == 3
#define ROT_AT(i) rot[i]
#define ROTATE_Q() tq_rotate_rot(G, true)
#else
#define ROT_AT(i) sc[0]  // never reached: no rotation without TurboQuant keys
#define ROTATE_Q()
#endif

// The warps' value sums in acc (rows 0..G-1) into their part of the tiles (float i of warp w at
// uvec4 (w G D + i) / 4): every warp must be done with its tile (a barrier before).
#define ACC_TO_TILES()                                                                            \
  [[unroll]] for (uint c = 0; c < D / 16; ++c) {                                                  \
    coopMatStoreNV(acc[c], st, w * 256, 16, false);                                               \
    warp_sync();                                                                                  \
    for (uint e = lane; e < G * 16; e += 32) {                                                    \
      const uint i = (w * G + e / 16) * D + 16 * c + e % 16;                                      \
      tile[i / 4][i % 4] = floatBitsToUint(st[w * 256 + e]);                                      \
    }                                                                                             \
    warp_sync();                                                                                  \
  }
// (g, d)'s value sum over the warps.
float warps_sum(uint i) {
  float a = 0.0;
  for (uint v = 0; v < NW; ++v) {
    const uint at = v * G * D + i;
    a += uintBitsToFloat(tile[at / 4][at % 4]);
  }
  return a;
}

void main() {
  const uint hk = gl_WorkGroupID.x, t = gl_WorkGroupID.y, split = gl_WorkGroupID.z;
  const uint tid = gl_LocalInvocationID.x, w = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint tb = w * TS;
  const uint h0 = hk * G, P = uint(pos[t]), seq = seq_row[t], btab = seq * p.max_blocks;
  const uint start = p.chunk != 0 ? P / p.chunk * p.chunk : 0;
  const uint lo = max(start, split * p.split_len), hi = min(P, (split + 1) * p.split_len - 1);
  const uint pb = ((t * p.n_head + h0) * p.n_splits + split) * (D + 2);  // head g: + g * n_splits * (D + 2)
  if (lo > hi) {  // nothing of this split is visible to the token (uniform)
    if (tid < G) {
      part[pb + tid * p.n_splits * (D + 2) + D] = -1.0 / 0.0;
      part[pb + tid * p.n_splits * (D + 2) + D + 1] = 0.0;
    }
    return;
  }
#if KV_K_KIND == 3
  for (uint i = tid; i < TQK_SEGMENTS * 16u; i += WG) kcent[i] = TQK_CENTROIDS[i];
#endif
#if KV_V_KIND == 3
  for (uint i = tid; i < TQV_SEGMENTS * 16u; i += WG) vcent[i] = TQV_CENTROIDS[i];
#endif
  // Keys from `recent` on are in the token's window: the ring's rows where it holds them.
#ifdef KV_RING
  const uint recent = P + 1 >= p.window ? P + 1 - p.window : 0;
  if (tid == 0) any_missing = 0;
  barrier();
  bool missing = false;
  for (uint j = max(lo, recent) + tid; j <= hi; j += WG) missing = missing || !ring_holds(seq, j);
  if (subgroupAny(missing) && lane == 0) atomicOr(any_missing, 1u);
  barrier();
  const bool all_codes = any_missing != 0;  // phase 0 takes the window's missing rows too
#else
  const uint recent = hi + 1;
  const bool all_codes = true;
#endif
  const uint qb = p.q_off + t * p.q_stride + h0 * D;
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> qa[D / 16];
  STAGE_Q(true)
  if ((MMA_DEC_SKIP & 16) != 0) {
    if (tid < G) part[pb + tid * p.n_splits * (D + 2) + D] = uintBitsToFloat(tile[tid].x);
    return;
  }

  // Scores: phase 0 the codes (f16 sides: every key), phase 1 the ring's rows; warp w takes the
  // phase's tiles w, w + NW, ...
  for (uint phase = 0; phase < 2; ++phase) {
    const uint from = phase == 0 ? lo : max(lo, recent);
    const uint to = phase == 0 && !all_codes ? min(hi, recent - 1) : hi;
    if (phase == 1 && recent > hi) break;
    if (phase == 0 && !all_codes && recent <= lo) continue;
    if (KV_K_KIND == 3 && phase == 1) STAGE_Q(false)  // ring keys are plain: so are the queries that score them
    const uint first = from + BK * w;
    if (first <= to) fetch(0, first, to, btab, hk, seq, phase);
    for (uint j0 = first; j0 <= to && (MMA_DEC_SKIP & 4) == 0; j0 += BK * NW) {
      stash(0, phase, tb);
      warp_sync();
      if (j0 + BK * NW <= to) fetch(0, j0 + BK * NW, to, btab, hk, seq, phase);
      fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> s = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
      [[unroll]] for (uint c = 0; c < D / 16 && (MMA_DEC_SKIP & 64) == 0; ++c) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> kb;
        coopMatLoadNV(kb, tile, tb + 2 * c, DS, true);  // K^T: column-major view of [key][d]
        s = coopMatMulAddNV(qa[c], kb, s);
      }
      coopMatStoreNV(s, st, w * 256, BK, false);
      warp_sync();
      for (uint e = lane; e < G * BK; e += 32) {
        const uint g = e / BK, j = j0 + e % BK;
        bool mine = j <= to;
#ifdef KV_RING
        if (mine && j >= recent) mine = (phase == 1) == ring_holds(seq, j);
#endif
        if (mine) sc[g * SL + j - lo] = st[w * 256 + g * BK + e % BK];
      }
      warp_sync();  // the tile and S are rewritten by the warp's next key tile
    }
    barrier();  // phase 1 restages the queries into the first warp's tile
  }

  // The softmax of each head's scores over the split: warp w the heads w, w + NW, ...
  const uint n = hi - lo + 1;
  for (uint g = w; g < G; g += NW) {
    float mx = -1.0 / 0.0;
    for (uint k = lane; k < n; k += 32) mx = max(mx, sc[g * SL + k]);
    const float m = subgroupMax(mx);
    float sum = 0.0;
    for (uint k = lane; k < n; k += 32) {
      const float e = exp(sc[g * SL + k] - m);
      sc[g * SL + k] = e;
      sum += e;
    }
    const float l = subgroupAdd(sum);
    if (lane == 0) {
      head_m[g] = m;
      head_l[g] = l;
    }
  }
  barrier();

  // Values: O += P V per tile, phase 0 then (after the rotation back) phase 1.
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[D / 16];
  [[unroll]] for (uint c = 0; c < D / 16; ++c) acc[c] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  for (uint phase = 0; phase < 2; ++phase) {
    const uint from = phase == 0 ? lo : max(lo, recent);
    const uint to = phase == 0 && !all_codes ? min(hi, recent - 1) : hi;
#if KV_V_KIND == 3
    if (phase == 1) {  // the codes' sums, over the warps, back from the rotated domain (linear: the partial stays exact)
      barrier();
      ACC_TO_TILES()
      barrier();
      for (uint i = tid; i < G * D; i += WG) rot[i] = warps_sum(i);
      barrier();
      tq_rotate_rot(G, false);  // ends with a barrier: the tiles are free again
      [[unroll]] for (uint c = 0; c < D / 16; ++c) acc[c] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    }
#endif
    if (phase == 1 && recent > hi) break;
    if (phase == 0 && !all_codes && recent <= lo) continue;
    const uint first = from + BK * w;
    if (first <= to) fetch(1, first, to, btab, hk, seq, phase);
    for (uint j0 = first; j0 <= to && (MMA_DEC_SKIP & 8) == 0; j0 += BK * NW) {
      stash(1, phase, tb);
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
        pt[w * 16 * PS + r * PS + lane % 2] = pack8(x);
      }
      warp_sync();
      if (j0 + BK * NW <= to) fetch(1, j0 + BK * NW, to, btab, hk, seq, phase);
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pa;
      coopMatLoadNV(pa, pt, w * 16 * PS, PS, false);
      [[unroll]] for (uint c = 0; c < D / 16 && (MMA_DEC_SKIP & 64) == 0; ++c) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> vb;
        coopMatLoadNV(vb, tile, tb + 2 * c, DS, false);  // V: [key][d]
        acc[c] = coopMatMulAddNV(pa, vb, acc[c]);
      }
      warp_sync();  // the tile and P are rewritten by the warp's next value tile
    }
  }

  // The partials: the warps' sums (and the codes' sums rotated back) of rows 0..G-1, then m and l.
  barrier();
  ACC_TO_TILES()
  barrier();
  for (uint i = tid; i < G * D; i += WG) {
    float a = warps_sum(i);
#if KV_V_KIND == 3
    a += rot[i];
#endif
    part[pb + (i / D) * p.n_splits * (D + 2) + i % D] = a;
  }
  if (tid < G) {
    part[pb + tid * p.n_splits * (D + 2) + D] = head_m[tid];
    part[pb + tid * p.n_splits * (D + 2) + D + 1] = head_l[tid];
  }
}
