// Prefill attention on tensor cores (flash attention) over an f16 KV cache: a workgroup takes
// BQ = 64 consecutive query tokens of one sequence for one query head, 16 rows per warp. Key
// tiles of BK = 32 keys (K and V rows gathered through the block table into shared memory; the
// next tile is read into registers while this one is used) give S = Q K^T on the tensor cores
// (VK_NV_cooperative_matrix, f16 x f16 -> f32), then each warp runs the online softmax of its
// rows on S in shared memory (causal and chunk masks, running max m and sum l; two lanes per
// row), and O += P V on the tensor cores. O is rescaled (through shared memory: accumulators
// are opaque) only when a row's max moved. Q is scaled and held in registers as fragments.
// Push constants as attention.glsl; n_splits carries the batch's token count.
// Compressed caches (KV_D defined: kv_codec.glsl's kinds, q8_0 / TurboQuant on either side, the
// other f16): a tile's code rows are read into registers as raw fields and decoded to f16 when
// stashed (centroids from shared memory), so the tensor-core loop is the f16 one. TurboQuant keys
// are scored against queries rotated once per tile of 16 rows (<Rq, y~>); TurboQuant values are
// summed in the rotated domain and the accumulator is rotated back once (through `rot`). Keys
// within the full-precision window of a query read the f16 ring (attention_qdec's semantics:
// position j for the query at P when j + window > P and the ring's tag holds j), in the plain
// domain; one key can be codes for one query of the tile and ring for a later one, so the keys
// run in two passes: phase 0 the codes (and the ring's missing rows), phase 1 the ring, after the
// accumulator's rotation back and the plain queries' staging. The online softmax state carries
// over, since both passes add to the same sums.
// MMA_QUAD (the probed accumulator layout is mma.sync's: lane l holds rows l / 4 and l / 4 + 8 of a
// 16 x 16 square, columns 2 (l % 4) + {0, 1, 8, 9}): the softmax runs on S's accumulator elements
// in registers (row max and sum across the lane quad), P becomes the f16 operand by conversion, and
// O is rescaled in registers; S, P and the rescale never pass through shared memory.
// FA_WARPS (4 or 8: BQ = 16 x FA_WARPS query rows share each K/V tile) and FA_KEYS (32, or 64
// with MMA_QUAD) size the tiles; compressed caches take 4 warps of 32 keys. FA_FASTMASK: key
// tiles wholly inside every row's causal (and chunk) range skip the per-element masks.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#ifndef FA_WARPS
#define FA_WARPS 4
#endif
#ifndef FA_KEYS
#define FA_KEYS 32
#endif
#if defined(KV_D) && (FA_WARPS != 4 || FA_KEYS != 32)
#error attention_mma over compressed caches runs 4 warps of 32 keys
#endif
#if FA_KEYS != 32 && !defined(MMA_QUAD)
#error attention_mma: 64-key tiles need MMA_QUAD (the shared-memory softmax has two lanes of 16 keys a row)
#endif
layout(local_size_x = FA_WARPS * 32) in;
layout(binding = 1, std430) readonly buffer Q { float q[]; };
layout(binding = 2, std430) readonly buffer Kc { uvec4 kc[]; };  // f16 rows, 8 halves per uvec4
layout(binding = 3, std430) readonly buffer Vc { uvec4 vc[]; };
#ifdef KV_D
layout(binding = 2, std430) readonly buffer K16 { uint16_t k16[]; };
layout(binding = 2, std430) readonly buffer K8 { uint8_t k8[]; };
layout(binding = 3, std430) readonly buffer V16 { uint16_t v16[]; };
layout(binding = 3, std430) readonly buffer V8 { uint8_t v8[]; };
layout(binding = 8, std430) readonly buffer Kring { uvec4 kring[]; };
layout(binding = 9, std430) readonly buffer Vring { uvec4 vring[]; };
layout(binding = 10, std430) readonly buffer Tags { uint tags[]; };
#endif
layout(binding = 4, std430) readonly buffer Pos { int pos[]; };
layout(binding = 5, std430) readonly buffer SeqRow { uint seq_row[]; };
layout(binding = 6, std430) readonly buffer Blocks { uint blocks[]; };
layout(binding = 7, std430) writeonly buffer O { float o[]; };
layout(push_constant) uniform Params {
  uint n_head, n_head_kv, D, chunk;
  uint q_off, q_stride, o_off, o_stride;
  uint block_size, max_blocks;
  float scale;
  uint split_len, n_splits;
  uint window, ring_rows;  // compressed caches: the f16 ring (window 0: none)
} p;

#ifdef KV_D
const uint D = KV_D;
#else
const uint D = HEAD_D;
#endif
const uint WARPS = FA_WARPS, NT = 32 * WARPS, BQ = 16 * WARPS, BK = FA_KEYS;
const uint DV = D / 8;      // uvec4 per K/V row
const uint DS = DV + 1;     // shared row stride in uvec4 (padded)
const uint PS = BK / 8 + 1; // P row stride in uvec4
const uint LOADS = BK * DV / NT;  // uvec4 per thread per K (and V) tile
// K tile then V tile; at the start the same space holds the scaled Q tile (BQ rows).
shared uvec4 kv[2 * BK * DS > BQ * DS ? 2 * BK * DS : BQ * DS];
#ifndef MMA_QUAD
shared float ss[WARPS * 16 * BK];   // per warp: S (16 x BK), or a 16x16 O square being rescaled
shared uvec4 ps[WARPS * 16 * PS];   // per warp: P (16 x BK, f16)
shared float rowf[WARPS * 16];      // per warp and row: the rescale factor, then 1 / l
#endif
shared uint range_lo, range_hi, range_minp, range_maxstart;

uvec4 kr[LOADS], vr[LOADS];

#ifdef KV_D
#if KV_K_KIND == 0 || KV_V_KIND == 0
#error attention_mma reads f16, q8_0 and TurboQuant caches (not f32)
#endif
#ifdef KV_RING
shared uint ring_bad;  // some key of the window band lacks its ring row: phase 0 takes it
#endif

KV_F16_ROW_CODECS()

// The value sums back from TurboQuant's rotated domain: a warp's 16 rows at a time through rot.
#define ROTATE_ACC_BACK()                                                                           \
  for (uint w = 0; w < WARPS; ++w) {                                                                \
    barrier();                                                                                      \
    if (warp == w)                                                                                  \
      [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatStoreNV(acc[c], rot, 16 * c, D, false);   \
    barrier();                                                                                      \
    tq_rotate_rot(16u, false);                                                                      \
    if (warp == w)                                                                                  \
      [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatLoadNV(acc[c], rot, 16 * c, D, false);    \
  }

bool ring_holds(uint seq, uint j) { return tags[seq * p.ring_rows + j % p.ring_rows] == j; }
#endif

// Rows j0..j0+BK-1 of this head's K and V (rows past hi: zeros) into kr / vr. Compressed caches:
// phase 0 reads a compressed side's codes, phase 1 its f16 ring row (zeros where the ring does
// not hold the key: phase 0 took it).
void fetch(uint j0, uint hi, uint btab, uint row, uint hk, uint seq, uint phase) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint i = 0; i < LOADS; ++i) {
    const uint e = tid + i * NT, k = e / DV, c = e % DV, j = j0 + k;
    kr[i] = uvec4(0);
    vr[i] = uvec4(0);
    if (j <= hi) {
      const uint slot = blocks[btab + j / p.block_size] * p.block_size + j % p.block_size;
      const uint at = (slot * row + hk * D) / 8 + c;
#ifdef KV_D
      const uint srow = slot * p.n_head_kv + hk;
      const bool ring = phase == 1u;
#ifdef KV_RING
      const uint rat = ((seq * p.ring_rows + j % p.ring_rows) * p.n_head_kv + hk) * DV + c;
      const bool held = ring && ring_holds(seq, j);
#else
      const uint rat = 0u;
      const bool held = false;
#endif
#if KV_K_KIND == 1
      kr[i] = kc[at];
#else
      if (!ring) kr[i] = k_codes(srow * KV_K_ROW_BYTES, c);
      else if (held) kr[i] = kring[rat];
#endif
#if KV_V_KIND == 1
      vr[i] = vc[at];
#else
      if (!ring) vr[i] = v_codes(srow * KV_V_ROW_BYTES, c);
      else if (held) vr[i] = vring[rat];
#endif
#else
      kr[i] = kc[at];
      vr[i] = vc[at];
#endif
    }
  }
}
void stash(uint phase) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint i = 0; i < LOADS; ++i) {
    const uint e = tid + i * NT, k = e / DV, c = e % DV;
#if defined(KV_D) && KV_K_KIND >= 2
    kv[k * DS + c] = phase == 0u ? k_decode(kr[i]) : kr[i];
#else
    kv[k * DS + c] = kr[i];
#endif
#if defined(KV_D) && KV_V_KIND >= 2
    kv[BK * DS + k * DS + c] = phase == 0u ? v_decode(vr[i]) : vr[i];
#else
    kv[BK * DS + k * DS + c] = vr[i];
#endif
  }
}

// The scaled queries of the tile as f16 rows of kv (BQ x DS). rotate: TurboQuant keys' domain,
// 16 rows at a time through `rot` (every thread calls it: the rotation has barriers).
void stage_q(uint t0, uint h, uint n_tok, bool rotate) {
  const uint tid = gl_LocalInvocationID.x;
#if defined(KV_D) && KV_K_KIND == 3
  if (rotate) {
    for (uint r0 = 0; r0 < BQ; r0 += 16) {
      for (uint e = tid; e < 16 * D; e += NT) {
        const uint tq = t0 + r0 + e / D;
        rot[e] = tq < n_tok ? q[p.q_off + tq * p.q_stride + h * D + e % D] * p.scale : 0.0;
      }
      barrier();
      tq_rotate_rot(16u, true);
      for (uint e = tid; e < 16 * DV; e += NT) {
        const uint b = (e / DV) * D + 8 * (e % DV);
        float x[8];
        [[unroll]] for (uint i = 0; i < 8; ++i) x[i] = rot[b + i];
        kv[(r0 + e / DV) * DS + e % DV] = pack8(x);
      }
      barrier();  // rot is rewritten by the next rows
    }
    return;
  }
#endif
  for (uint e = tid; e < BQ * DV; e += NT) {
    const uint qr = e / DV, c = e % DV, tq = t0 + qr;
    vec4 a = vec4(0.0), b = vec4(0.0);
    if (tq < n_tok) {
      const uint at = p.q_off + tq * p.q_stride + h * D + 8 * c;
      a = vec4(q[at], q[at + 1], q[at + 2], q[at + 3]) * p.scale;
      b = vec4(q[at + 4], q[at + 5], q[at + 6], q[at + 7]) * p.scale;
    }
    kv[qr * DS + c] = uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
  }
  barrier();
}

#if defined(KV_D) && KV_K_KIND == 3
#define Q_ROTATED true
#else
#define Q_ROTATED false
#endif

void main() {
  const uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BQ, tid = gl_LocalInvocationID.x;
  const uint warp = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint row = p.n_head_kv * D, hk = h / (p.n_head / p.n_head_kv);
  const uint n_tok = p.n_splits;
  const uint seq = seq_row[t0];
  const uint btab = seq * p.max_blocks;  // every token of the tile is in one sequence
  // This lane's softmax row (two lanes per row, 16 keys each) and its causal range.
  const uint r = lane / 2, half_ = lane % 2, t = t0 + warp * 16 + r;
  const bool live = t < n_tok;
  const uint P = live ? uint(pos[t]) : 0;
  const uint start = live ? (p.chunk != 0 ? P / p.chunk * p.chunk : 0) : 0;
  if (tid == 0) {
    range_lo = 0xFFFFFFFFu;
    range_hi = 0;
    range_minp = 0xFFFFFFFFu;
    range_maxstart = 0;
  }
#ifdef KV_D
#if KV_K_KIND == 3
  for (uint i = tid; i < TQK_SEGMENTS * 16u; i += NT) kcent[i] = TQK_CENTROIDS[i];
#endif
#if KV_V_KIND == 3
  for (uint i = tid; i < TQV_SEGMENTS * 16u; i += NT) vcent[i] = TQV_CENTROIDS[i];
#endif
#endif
#ifdef KV_RING
  if (tid == 0) ring_bad = 0u;
  const uint W = p.window;
#else
  const uint W = 0;
#endif
  barrier();
  if (live && half_ == 0) {
    atomicMin(range_lo, start);
    atomicMax(range_hi, P);
    atomicMin(range_minp, P);
    atomicMax(range_maxstart, start);
  }
  stage_q(t0, h, n_tok, Q_ROTATED);  // ends with a barrier: the ranges are complete too
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> qa[D / 16];
  [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatLoadNV(qa[c], kv, (warp * 16) * DS + 2 * c, DS, false);
  barrier();  // kv is the tiles' space from here
  const uint lo = range_lo, hi = range_hi, minp = range_minp, maxstart = range_maxstart;
  if (lo > hi) return;  // no live row in this tile (uniform: shared values)
  // Keys j with j + W > minp may be ring rows for some query: the window band.
  const uint band = W == 0 ? hi + 1 : max(lo, minp + 1 >= W ? minp + 1 - W : 0);
#ifdef KV_RING
  for (uint j = band + tid; j <= hi; j += NT)
    if (!ring_holds(seq, j)) ring_bad = 1u;
  barrier();
  const bool scan_all = ring_bad != 0u;
#else
  const bool scan_all = true;
#endif

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[D / 16];
  [[unroll]] for (uint c = 0; c < D / 16; ++c) acc[c] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
#ifdef MMA_QUAD
  // This lane's two rows (a = 0, 1: row lane / 4 + 8 a of the warp's 16) and its columns of a square.
  const uint qc = 2u * (lane % 4u);
  bool rlive[2];
  uint rP[2], rstart[2];
  float rm[2], rl[2];
  [[unroll]] for (uint a = 0; a < 2; ++a) {
    const uint tt = t0 + warp * 16 + lane / 4 + 8 * a;
    rlive[a] = tt < n_tok;
    rP[a] = rlive[a] ? uint(pos[tt]) : 0;
    rstart[a] = rlive[a] ? (p.chunk != 0 ? rP[a] / p.chunk * p.chunk : 0) : 0;
    rm[a] = -1.0 / 0.0;
    rl[a] = 0.0;
  }
#else
  float m = -1.0 / 0.0, l = 0.0;
  const uint sw = warp * 16 * BK, pw = warp * 16 * PS;
#endif

  // Phase 0: every key of an f16 cache, or the codes of a compressed one (the keys each query
  // sees outside its window: up to hi - W, or all when some ring row is missing); phase 1: the
  // ring's rows of the band.
  for (uint phase = 0; phase < (W == 0 ? 1u : 2u); ++phase) {
    uint from = lo, to = hi;
    if (phase == 0 && W != 0 && !scan_all) {
      if (hi < lo + W) from = to + 1;  // every key is in some query's window: nothing in codes
      else to = hi - W;
    }
    if (phase == 1) from = band;
#if defined(KV_D) && KV_V_KIND == 3
    if (phase == 1) ROTATE_ACC_BACK();
#endif
#if defined(KV_D) && KV_K_KIND == 3
    if (phase == 1) {  // ring keys are plain: so are the queries that score them
      barrier();  // kv held the last tile
      stage_q(t0, h, n_tok, false);
      [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatLoadNV(qa[c], kv, (warp * 16) * DS + 2 * c, DS, false);
      barrier();
    }
#endif
    if (from > to) continue;
    fetch(from, to, btab, row, hk, seq, phase);
    stash(phase);
    barrier();
    for (uint j0 = from; j0 <= to; j0 += BK) {
      const bool more = j0 + BK <= to;
      if (more) fetch(j0 + BK, to, btab, row, hk, seq, phase);
#ifdef MMA_QUAD
      fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> s[BK / 16];
      [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt) {
        s[kt] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
        [[unroll]] for (uint c = 0; c < D / 16; ++c) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> kb;
          coopMatLoadNV(kb, kv, (kt * 16) * DS + 2 * c, DS, true);  // K^T: column-major view of [key][d]
          s[kt] = coopMatMulAddNV(qa[c], kb, s[kt]);
        }
      }
      // Masks and the rows' maxima: element i is row i / 4, column qc + (i & 1) + 8 ((i >> 1) & 1).
      float tmax[2] = float[2](-1.0 / 0.0, -1.0 / 0.0);
#ifdef FA_FASTMASK
      // Every key of the tile in every row's range (rows past the batch score zeros, unstored).
      const bool inside = W == 0 && j0 + BK - 1 <= minp && j0 >= maxstart;
      if (inside)
        [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt)
          [[unroll]] for (uint i = 0; i < 8; ++i) tmax[i / 4] = max(tmax[i / 4], s[kt][i]);
      else
#endif
      [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt)
        [[unroll]] for (uint i = 0; i < 8; ++i) {
          const uint a = i / 4, j = j0 + kt * 16 + qc + (i & 1u) + 8u * ((i >> 1) & 1u);
          bool ok = rlive[a] && j >= rstart[a] && j <= rP[a];
#ifdef KV_RING
          if (ok && j + W > rP[a]) ok = (phase == 1) == ring_holds(seq, j);  // the window: ring rows in phase 1
          else if (phase == 1) ok = false;
#endif
          const float v = ok ? s[kt][i] : -1.0 / 0.0;
          s[kt][i] = v;
          tmax[a] = max(tmax[a], v);
        }
      float corr[2], sum[2];
      [[unroll]] for (uint a = 0; a < 2; ++a) {
        tmax[a] = max(tmax[a], subgroupShuffleXor(tmax[a], 1));
        tmax[a] = max(tmax[a], subgroupShuffleXor(tmax[a], 2));
        const float m_new = max(rm[a], tmax[a]);
        corr[a] = m_new == -1.0 / 0.0 ? 1.0 : exp(rm[a] - m_new);
        rm[a] = m_new;
        sum[a] = 0.0;
      }
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pa[BK / 16];
      [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt) {
        [[unroll]] for (uint i = 0; i < 8; ++i) {
          const float e = s[kt][i] == -1.0 / 0.0 ? 0.0 : exp(s[kt][i] - rm[i / 4]);
          s[kt][i] = e;
          sum[i / 4] += e;
        }
        pa[kt] = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(s[kt]);
      }
      [[unroll]] for (uint a = 0; a < 2; ++a) {
        sum[a] += subgroupShuffleXor(sum[a], 1);
        sum[a] += subgroupShuffleXor(sum[a], 2);
        rl[a] = rl[a] * corr[a] + sum[a];
      }
      if (subgroupAny(corr[0] != 1.0 || corr[1] != 1.0))
        [[unroll]] for (uint c = 0; c < D / 16; ++c)
          [[unroll]] for (uint i = 0; i < 8; ++i) acc[c][i] *= corr[i / 4];
#else
      // S = Q K^T for this warp's 16 rows: BK / 16 squares, D / 16 steps each.
      [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt) {
        fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> s = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
        [[unroll]] for (uint c = 0; c < D / 16; ++c) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> kb;
          coopMatLoadNV(kb, kv, (kt * 16) * DS + 2 * c, DS, true);  // K^T: column-major view of [key][d]
          s = coopMatMulAddNV(qa[c], kb, s);
        }
        coopMatStoreNV(s, ss, sw + kt * 16, BK, false);
      }
      warp_sync_shared();
      // Online softmax: this lane's 16 keys of row r.
      float sv[16];
      float tmax = -1.0 / 0.0;
      [[unroll]] for (uint i = 0; i < 16; ++i) {
        const uint k = half_ * 16 + i, j = j0 + k;
        bool ok = live && j >= start && j <= P;
#ifdef KV_RING
        if (ok && j + W > P) ok = (phase == 1) == ring_holds(seq, j);  // the window: ring rows in phase 1
        else if (phase == 1) ok = false;
#endif
        sv[i] = ok ? ss[sw + r * BK + k] : -1.0 / 0.0;
        tmax = max(tmax, sv[i]);
      }
      tmax = max(tmax, subgroupShuffleXor(tmax, 1));
      const float m_new = max(m, tmax);
      const float corr = m_new == -1.0 / 0.0 ? 1.0 : exp(m - m_new);
      float sum = 0.0;
      float e[16];
      [[unroll]] for (uint i = 0; i < 16; ++i) {
        e[i] = sv[i] == -1.0 / 0.0 ? 0.0 : exp(sv[i] - m_new);
        sum += e[i];
      }
      sum += subgroupShuffleXor(sum, 1);
      l = l * corr + sum;
      m = m_new;
      [[unroll]] for (uint i = 0; i < 2; ++i)
        ps[pw + r * PS + half_ * 2 + i] =
            uvec4(packHalf2x16(vec2(e[8 * i], e[8 * i + 1])), packHalf2x16(vec2(e[8 * i + 2], e[8 * i + 3])),
                  packHalf2x16(vec2(e[8 * i + 4], e[8 * i + 5])), packHalf2x16(vec2(e[8 * i + 6], e[8 * i + 7])));
      if (half_ == 0) rowf[warp * 16 + r] = corr;
      const bool rescale = subgroupAny(corr != 1.0);
      warp_sync_shared();
      if (rescale) {
        [[unroll]] for (uint c = 0; c < D / 16; ++c) {
          coopMatStoreNV(acc[c], ss, sw, 16, false);
          warp_sync_shared();
          [[unroll]] for (uint i = 0; i < 8; ++i) {
            const uint el = lane * 8 + i;
            ss[sw + el] *= rowf[warp * 16 + el / 16];
          }
          warp_sync_shared();
          coopMatLoadNV(acc[c], ss, sw, 16, false);
          warp_sync_shared();
        }
      }
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pa[BK / 16];
      [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt) coopMatLoadNV(pa[kt], ps, pw + 2 * kt, PS, false);
#endif
      // O += P V.
      [[unroll]] for (uint c = 0; c < D / 16; ++c)
        [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> vb;
          coopMatLoadNV(vb, kv, BK * DS + (kt * 16) * DS + 2 * c, DS, false);  // V: [key][d]
          acc[c] = coopMatMulAddNV(pa[kt], vb, acc[c]);
        }
      barrier();  // every warp is done with this K/V tile
      if (more) {
        stash(phase);
        barrier();
      }
    }
  }
#if defined(KV_D) && KV_V_KIND == 3
  if (W == 0) ROTATE_ACC_BACK();
#endif
#ifdef MMA_QUAD
  // O / l, each element straight from its register.
  [[unroll]] for (uint a = 0; a < 2; ++a) rl[a] = rl[a] > 0.0 ? 1.0 / rl[a] : 0.0;
  [[unroll]] for (uint c = 0; c < D / 16; ++c)
    [[unroll]] for (uint i = 0; i < 8; ++i) {
      const uint a = i / 4, tt = t0 + warp * 16 + lane / 4 + 8 * a;
      if (tt < n_tok)
        o[p.o_off + tt * p.o_stride + h * D + 16 * c + qc + (i & 1u) + 8u * ((i >> 1) & 1u)] = acc[c][i] * rl[a];
    }
#else
  // O / l, written through the warp's staging square.
  if (half_ == 0) rowf[warp * 16 + r] = l > 0.0 ? 1.0 / l : 0.0;
  warp_sync_shared();
  [[unroll]] for (uint c = 0; c < D / 16; ++c) {
    coopMatStoreNV(acc[c], ss, sw, 16, false);
    warp_sync_shared();
    [[unroll]] for (uint i = 0; i < 8; ++i) {
      const uint el = lane * 8 + i, rr = el / 16, tt = t0 + warp * 16 + rr;
      if (tt < n_tok) o[p.o_off + tt * p.o_stride + h * D + 16 * c + el % 16] = ss[sw + el] * rowf[warp * 16 + rr];
    }
    warp_sync_shared();
  }
#endif
}
