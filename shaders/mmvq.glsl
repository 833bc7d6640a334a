// Quantized weights x int8 activations for decode and small batches: y[t][n] = sum_k W[n][k] x[t][k]
// with x already in 32-element int8 blocks (quantize_q8.glsl). Each weight format supplies, in
// its shaders/quant/<fmt>.glsl under MMVQ, a unit of MMVQ_UNIT elements: mmvq_load() issues the
// unit's weight loads, mmvq_dot() multiplies it with one token's codes using packed 4x8-bit
// integer dot products (dot4) and applies the block scales. A format with HAS_MMVQ_INIT fills
// its shared tables in mmvq_init() (a barrier) as main() starts (IQ4_XS: its grid's lookup).
// Layout: a workgroup has WG / LPR lane groups; a group owns RPG consecutive rows and its LPR
// lanes stride over the row's units, U units in flight per lane (all loads issued before any
// math), so a warp reads contiguous weight bytes and each lane keeps several loads outstanding.
// Every weight unit is read once for the NT tokens of the workgroup. A lane group's sum is a
// subgroup sum when it is the subgroup (SG_LPR), a clustered one when it is a part of it
// (SG_CLUSTER: short rows, e.g. LPR 8 for an expert's 768-wide down row of 12 units), else it
// meets in shared memory.
// Variants:
//  SWIGLU        two weights (gate at 0, up at up_off bytes further in the binding): y = silu(g.x) * (u.x)
//  ADD_RESIDUAL  y = r + W.x (r may alias y)
//  MOE_IDS       workgroup y is a (token, expert slot) pair; the weight is that expert's slab
//  MOE_GROUPED   (with MOE_IDS) workgroup y is a chunk of up to NT pairs routed to one expert
//                (moe.glsl MOE_GROUP's table, bound in place of the ids): the expert's weights
//                are read once for the chunk; chunks past the table's count exit at once
//  NORM_TAIL     (with ADD_RESIDUAL, not with MOE_IDS) the last workgroup runs the next RMS norm
//                of the rows y just written (norm_tail.glsl)
//  MOE_COMBINE_TAIL  (with MOE_IDS, not MOE_GROUPED: the experts' down matvec) the last
//                workgroup combines each token's expert rows with the residual
//                (moe_combine_tail.glsl), then, with NORM_TAIL, runs the next norm over them
//  NORM_OUT      (with ADD_RESIDUAL) half of the next RMS norm, so no dispatch of its own sits
//                between this matvec and the next: the rows y times the norm's weight, as int8
//                blocks for the next matvec, and each 32-row block's sum of y^2. A 1 / rms
//                factor scales every code of a row alike, so the codes need not wait for it.
//  RMS_IN        (not with MOE_IDS or NORM_TAIL) the other half: the input is NORM_OUT's codes;
//                the block sums give 1 / rms(x), which scales the dot products (RMS_IN = K).
//  TOPK_IN       (with MOE_IDS, not MOE_GROUPED: decode's gate/up) the router's top-k as a
//                prologue: each workgroup ranks its pair's token's logits (moe_topk.glsl, bindings
//                from TOPK_IN + 1) and reads that rank's expert; the first workgroup of each token
//                writes the ids and weights for the down matvec and the combine. The top-k costs
//                no dispatch (and no level) of its own.
//  MOE_BLOCK_TAIL  (with MOE_IDS, not MOE_GROUPED: decode's experts' down matvec) the workgroup
//                that completes a 32-row block of a token runs the combine with the residual and
//                the next norm's first half for that block (moe_block_tail.glsl)
//  ROUTER_PARTS  (with NORM_OUT or a plain MOE_BLOCK_TAIL; = the experts) the MoE router's
//                logits as per-block parts of the rows times the norm's weight (router_parts.glsl,
//                bindings from ROUTER_PARTS_AT: 11 with NORM_OUT, 4 in the block tails). TOPK_IN
//                with TOPK_PARTS sums them and applies the 1 / rms: the router has no dispatch.
//  MOE_BLOCK_TAIL without MOE_IDS (NT 1, no ADD_RESIDUAL: decode's O projection before an MoE
//                FFN): y is the raw rows; the tails add them to the residual (moe_block_tail.glsl
//                with k = 1) and write the next norm's first half block by block, for layers
//                whose projection cannot own whole blocks (NORM_OUT's 32 rows a workgroup).
//  W_CACHED      (with MOE_IDS and W_SOURCES 2: GPU-cached experts read through the slot map) the
//                expert ids are the model's, not slots: binding W_CACHED holds the block's map
//                ([0] the host copy's gate-to-up offset in bytes, [1 + e] expert e's slot or -1),
//                and a workgroup whose expert has no slot reads it from the host copy of every
//                expert (binding 0's second source) over PCIe. No host round trip decides where
//                an expert is read from. CACHE_LOG (the down matvec): the first workgroup of each
//                pair writes its expert id to binding W_CACHED + 1, the routing the host's cache
//                policy reads after the step.
//  PAIR_SKIP     (with W_CACHED, not MOE_GROUPED or TOPK_IN: the misses-on-the-CPU hand-off's
//                experts) an id with bit 31 set is a pair the CPU computes: no weight read, zeros out.
//  MISS_ONLY     (with PAIR_SKIP: the GPU's share of a missed expert, read from the host copy beside
//                the CPU's work) a pair whose expert has a slot is skipped too: only misses compute.
//  TOPK_IN with RMS_IN and TOPK_PARTS (= the blocks a token): the router's logits come as
//                ROUTER_PARTS' parts and the experts' input as NORM_OUT's codes; the top-k's
//                bindings then start at 11 (TOPK_IN = 10), the block sums of x^2 again at 14.
#if defined(NORM_TAIL) && defined(MOE_IDS) && !defined(MOE_COMBINE_TAIL)
#error "NORM_TAIL follows a residual matvec or the MoE combine"
#endif
#if defined(MOE_COMBINE_TAIL) && (!defined(MOE_IDS) || defined(MOE_GROUPED) || defined(QUANT_OUT))
#error "MOE_COMBINE_TAIL needs every workgroup to reach the end of main()"
#endif
#if defined(NORM_OUT) && (!defined(ADD_RESIDUAL) || defined(QUANT_OUT) || defined(NORM_TAIL) || defined(MOE_IDS))
#error "NORM_OUT follows a residual matvec and writes the quantized slot QUANT_OUT would"
#endif
#if defined(RMS_IN) && ((defined(MOE_IDS) && !defined(TOPK_IN)) || defined(NORM_TAIL))
#error "RMS_IN reads the rows of a plain matvec input, or the experts' input beside the router's parts"
#endif
#if defined(TOPK_PARTS) && (!defined(TOPK_IN) || !defined(RMS_IN))
#error "TOPK_PARTS ranks ROUTER_PARTS' logits: the experts' input is NORM_OUT's codes (RMS_IN)"
#endif
#if defined(ROUTER_PARTS) && !defined(NORM_OUT) && !(defined(MOE_BLOCK_TAIL) && !defined(MOE_IDS))
#error "ROUTER_PARTS dots the rows NORM_OUT or a projection's block tails scale by the norm's weight"
#endif
#if defined(TOPK_IN) && (!defined(MOE_IDS) || defined(MOE_GROUPED) || defined(MOE_COMBINE_TAIL) || defined(NORM_TAIL))
#error "TOPK_IN routes the pairs of a per-pair expert matvec"
#endif
#if defined(MOE_BLOCK_TAIL) && ((!defined(MOE_IDS) && (NT != 1 || defined(ADD_RESIDUAL))) || defined(MOE_GROUPED) || defined(QUANT_OUT) || defined(MOE_COMBINE_TAIL) || defined(NORM_TAIL) || defined(TOPK_IN))
#error "MOE_BLOCK_TAIL follows the experts' per-pair down matvec or a one-token projection, every workgroup reaching the end of main()"
#endif
#ifndef TAIL_COHERENT
#define TAIL_COHERENT
#endif
// UR (STRATA_VK_MMVQ_UNROLL=1, off): the loops over tokens, rows and units in flight carry the
// unroll hint, so acc[ROWS][NT] and the per-token row indices stay in registers even where a loop
// exits early (t >= nt). On the H200 it removes 160 bytes of local memory at 8 tokens (Q4_K
// 4096 x 4096 40.3 -> 31.5 us) and changes nothing at 1-4 tokens, the counts the matvec takes.
// LAB (vk_matvec_bench q:...:LAB=n; results are then wrong, times only): bit 0 skips the
// activation loads and the products (the weight words are only folded together, mmvq_lab), bit 1
// reads one cache-hot unit instead of the row's weights.
#ifdef UR
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
// MMVQ_MT (steps of 2-8 tokens, formats with HAS_MMVQ_PREP; MT_OFF turns it off for A/B):
// each unit is unpacked once per row and each token's activations are loaded once per unit for
// all the group's rows, so a token adds only its dot products (quant/q4_k.glsl). The loops over
// rows and tokens are unrolled so acc[ROWS][NT] stays in registers.
#if defined(HAS_MMVQ_PREP) && NT > 1 && NT <= 8 && !defined(MT_OFF) && !defined(LAB)
#define MMVQ_MT 1
#endif
#ifdef SG_CLUSTER
// A butterfly of shuffles over the LPR lanes of a group (lavapipe's subgroupClusteredAdd summed
// wrongly: rel. error 1.0 against the float64 product in vk_matvec_bench).
#extension GL_KHR_shader_subgroup_shuffle : require
float lane_group_sum(float v) {
  for (uint o = LPR / 2; o > 0; o /= 2) v += subgroupShuffleXor(v, o);
  return v;
}
#endif
layout(local_size_x = WG) in;
// Bindings 1 (xq: int8 codes) and 2 (xs: block scales and sums) are declared in common.glsl,
// before the formats' MMVQ units that read them.
layout(binding = 3, std430) TAIL_COHERENT buffer Y { float y[]; };
#ifdef ADD_RESIDUAL
layout(binding = 4, std430) readonly buffer R { float res[]; };
#endif
// PAIR_OUT: two matrices of one input, shape and format (decode's K and V projections), up_off
// bytes apart in one bound range, as one dispatch: a lane group's row r of both, the first into
// y, the second into y2 at r_off / r_stride (the fields ADD_RESIDUAL would use).
#if defined(PAIR_OUT) && (defined(SWIGLU) || defined(ADD_RESIDUAL) || defined(QUANT_OUT) || defined(NORM_OUT) || defined(MOE_IDS) || defined(NORM_TAIL) || defined(MOE_BLOCK_TAIL) || defined(ROUTER_PARTS))
#error "PAIR_OUT: two plain matvecs of one input"
#endif
#ifdef PAIR_OUT
layout(binding = 4, std430) writeonly buffer Y2 { float y2[]; };
#endif
// STACK_OUT: two or three matrices of one input, format and row width (decode's Q, K and V
// projections) as one matvec over their rows stacked: rows [0, ids_off) of the first, [ids_off,
// in_div) of the second at up_off bytes, [in_div, N) of the third at expert_bytes bytes (the
// fields a plain matvec leaves unused), into y, y2 (r_off / r_stride) and y3. Each segment's rows
// are whole workgroups (the host checks), so a workgroup's segment is uniform and every row's sum
// is the one its matrix's own dispatch computes.
#if defined(STACK_OUT) && (defined(PAIR_OUT) || defined(SWIGLU) || defined(ADD_RESIDUAL) || defined(QUANT_OUT) || defined(NORM_OUT) || defined(MOE_IDS) || defined(NORM_TAIL) || defined(MOE_BLOCK_TAIL) || defined(ROUTER_PARTS))
#error "STACK_OUT: plain matvecs of one input"
#endif
#ifdef STACK_OUT
layout(binding = 4, std430) writeonly buffer Y2 { float y2[]; };
layout(binding = 11, std430) writeonly buffer Y3 { float y3[]; };
#endif
#ifdef MOE_IDS
layout(binding = 5, std430) readonly buffer Ids { int ids[]; };
#endif
#if defined(MISS_ONLY) && !defined(PAIR_SKIP)
#error "MISS_ONLY is a PAIR_SKIP kernel that also skips the pairs a slot holds"
#endif
#if defined(PAIR_SKIP) && (!defined(W_CACHED) || defined(MOE_GROUPED) || defined(TOPK_IN))
#error "PAIR_SKIP marks pairs of a cached block's per-pair expert matvec the CPU computes"
#endif
#if defined(W_CACHED) && (!defined(MOE_IDS) || !defined(W_SOURCES))
#error "W_CACHED maps a per-pair expert matvec's experts to the slots or the host copy (W_SOURCES 2)"
#endif
#ifdef W_CACHED
layout(binding = W_CACHED, std430) readonly buffer CacheMap { int cache_map[]; };
#ifdef CACHE_LOG
layout(binding = W_CACHED + 1, std430) writeonly buffer CacheLog { int cache_log[]; };
#endif
// Expert e's index in its source (its slot, or e in the host copy), setting w_src; e is clamped
// to the block's experts first (a broken router's id must not index past the map).
uint cached_expert(uint e) {
  e = min(e, uint(cache_map.length()) - 2u);
  const int s = cache_map[1u + e];
  w_src = s >= 0 ? 0u : 1u;
  return s >= 0 ? uint(s) : e;
}
#define EXPERT_INDEX(e) cached_expert(e)
#define UP_OFF (w_src == 0u ? p.up_off : uint(cache_map[0]))
#else
#define EXPERT_INDEX(e) (e)
#define UP_OFF p.up_off
#endif
#if defined(QUANT_OUT) || defined(NORM_OUT)
// The outputs again as the next matvec's int8 input (quantize_q8.glsl's layout and rounding):
// a workgroup owns whole 32-row blocks, so it quantizes its own rows.
layout(binding = 6, std430) writeonly buffer XQO { uvec4 xqo[]; };
layout(binding = 7, std430) writeonly buffer XSO { vec4 xso[]; };
#endif
#ifdef NORM_OUT
layout(binding = 8, std430) readonly buffer NormW { float norm_w[]; };
layout(binding = 9, std430) writeonly buffer SqOut { float sq_out[]; };  // [token][block of 32 rows]
#endif
#ifdef RMS_IN
layout(binding = 10, std430) readonly buffer SqIn { float sq_in[]; };
#endif
layout(push_constant) uniform Params {
  uint K, N, n_tok, row_bytes;
  uint q_off, q_stride;   // int8 codes, in uvec4 (16 codes)
  uint s_off, s_stride;   // block scales and sums, in vec4 (one per 32 codes)
  uint y_off, y_stride;
  uint r_off, r_stride;
  uint up_off, expert_bytes, ids_off, in_div;
#if defined(MOE_COMBINE_TAIL)
  MOE_COMBINE_TAIL_PC
#elif defined(NORM_TAIL)
  NORM_TAIL_PC
#elif defined(RMS_IN) && !defined(TOPK_IN)
  float rms_eps;
#elif defined(TOPK_IN)
  uint topk_n_expert, topk_l_off, topk_l_stride;  // the router's logits or parts (k is in_div)
#ifdef RMS_IN
  float rms_eps;
#endif
#elif defined(MOE_BLOCK_TAIL)
  MOE_BLOCK_TAIL_PC
#endif
#ifdef STACK_OUT
  uint y3_off, y3_stride;
#endif
} p;

#if defined(SWIGLU) || defined(PAIR_OUT)
const uint NW = 2;
#else
const uint NW = 1;
#endif
const uint GROUPS = WG / LPR;
const uint ROWS = RPG * NW;
#if !defined(SG_LPR) && !defined(SG_CLUSTER)
shared float red[ROWS * NT][WG];
#endif
#if defined(QUANT_OUT) || defined(NORM_OUT)
const uint WG_ROWS = GROUPS * RPG;
shared float outv[NT][WG_ROWS];
#endif
#ifdef NORM_OUT
shared float outsq[NT][WG_ROWS];
#endif
#ifdef RMS_IN
const uint RMS_NB = RMS_IN / 32;                 // block sums per token
const uint RMS_PER_LANE = (RMS_NB + LPR - 1) / LPR;
#endif

void main() {
#ifdef HAS_MMVQ_INIT
  mmvq_init();  // every invocation, before any workgroup returns
#endif
  w_set_rows(p.row_bytes);
  const uint lane = gl_LocalInvocationID.x % LPR, grp = gl_LocalInvocationID.x / LPR;
  const uint wgx = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.z;
  const uint row0 = (wgx * GROUPS + grp) * RPG;
  // Per token of the workgroup: the activation row it reads (xr) and the output row (yr).
  uint xr[NT], yr[NT];
#if defined(MOE_GROUPED)
  const uint chunk = gl_WorkGroupID.y;
  if (chunk >= uint(ids[0])) return;  // the whole workgroup: no barrier has been reached
  const uint expert = uint(ids[4 + 3 * chunk]);
  const uint wbase = min(EXPERT_INDEX(expert), w_last_expert(p.expert_bytes)) * p.expert_bytes, pfirst = uint(ids[5 + 3 * chunk]);
  const uint nt = uint(ids[6 + 3 * chunk]);
  UNROLL for (uint t = 0; t < NT; ++t) {
    const uint pair = uint(ids[p.ids_off + pfirst + min(t, nt - 1)]);
    xr[t] = pair / p.in_div;
    yr[t] = pair;
  }
#ifdef CACHE_LOG
  if (wgx == 0u && gl_LocalInvocationIndex < nt) cache_log[uint(ids[p.ids_off + pfirst + gl_LocalInvocationIndex])] = int(expert);
#endif
#elif defined(MOE_IDS)
  const uint t0 = gl_WorkGroupID.y;
#ifdef TOPK_IN
#if defined(TOPK_PARTS) && defined(TOPK_DIRECT)
  topk_eps = p.rms_eps;  // moe_topk_sg() adds the parts itself
#elif defined(TOPK_PARTS)
  topk_sum_parts(t0 / p.in_div, p.topk_n_expert, p.topk_l_off, p.topk_l_stride, p.rms_eps);
#endif
#if defined(TOPK_LAB) && (TOPK_LAB & 1) != 0
  const uint wbase = t0 % p.in_div * p.expert_bytes;  // lab (wrong results): rank r reads expert r, no top-k
#elif defined(TOPK_LEAN)  // each subgroup selects ranks 0 .. this pair's alone, no barrier (moe_topk.glsl)
  const bool topk_writer = gl_WorkGroupID.x == 0 && gl_WorkGroupID.z == 0 && t0 % p.in_div == 0 && gl_SubgroupID == 0u;
  const uint wbase = EXPERT_INDEX(moe_topk_sg(t0 / p.in_div, p.topk_n_expert, p.in_div, p.topk_l_off, p.topk_l_stride, topk_writer,
                                             0u, t0 % p.in_div)) * p.expert_bytes;
#else
  moe_topk(t0 / p.in_div, p.topk_n_expert, p.in_div, p.topk_l_off, p.topk_l_stride,
           gl_WorkGroupID.x == 0 && gl_WorkGroupID.z == 0 && t0 % p.in_div == 0, 0u);
  // (clamped: NaN logits leave ranks unwritten, and the id must stay inside the experts' tensor)
  const uint wbase = EXPERT_INDEX(min(topk_sel[t0 % p.in_div], p.topk_n_expert - 1u)) * p.expert_bytes;
#endif
#elif defined(PAIR_SKIP)
  // The host's ids (expert_cache.cpp's misses on the CPU): bit 31 marks a pair whose sum the CPU
  // computes; its workgroups read no weight and write zeros, which the combine adds as nothing.
  const uint id_word = uint(ids[p.ids_off + t0]);
  const uint expert = id_word & 0x7FFFFFFFu;
  const uint wbase = min(EXPERT_INDEX(expert), w_last_expert(p.expert_bytes)) * p.expert_bytes;  // sets w_src
#ifdef MISS_ONLY
  const bool pair_skip = id_word != expert || w_src == 0u;
#else
  const bool pair_skip = id_word != expert;
#endif
#ifdef CACHE_LOG
  if (wgx == 0u && gl_LocalInvocationIndex == 0u) cache_log[t0] = int(expert);
#endif
#else
  const uint expert = uint(ids[p.ids_off + t0]);
  const uint wbase = min(EXPERT_INDEX(expert), w_last_expert(p.expert_bytes)) * p.expert_bytes;
#ifdef CACHE_LOG
  if (wgx == 0u && gl_LocalInvocationIndex == 0u) cache_log[t0] = int(expert);
#endif
#endif
  const uint nt = 1;
  UNROLL for (uint t = 0; t < NT; ++t) {
    xr[t] = t0 / p.in_div;
    yr[t] = t0;
  }
#else
  const uint t0 = gl_WorkGroupID.y * NT;
#ifdef STACK_OUT  // the workgroup's segment: its matrix's rows and bytes
  const uint wg_row = wgx * GROUPS * RPG;
  const uint seg = wg_row < p.ids_off ? 0u : wg_row < p.in_div ? 1u : 2u;
  const uint seg_first = seg == 0u ? 0u : seg == 1u ? p.ids_off : p.in_div;
  const uint seg_end = seg == 0u ? p.ids_off : seg == 1u ? p.in_div : p.N;
  const uint wbase = seg == 0u ? 0u : seg == 1u ? p.up_off : p.expert_bytes;
#else
  const uint wbase = 0;
#endif
  const uint nt = min(NT, p.n_tok - t0);
  UNROLL for (uint t = 0; t < NT; ++t) {
    xr[t] = t0 + t;
    yr[t] = t0 + t;
  }
#endif
  uint rbase[ROWS];
  UNROLL for (uint r = 0; r < RPG; ++r)
#ifdef STACK_OUT
    rbase[r] = wbase + (min(row0 + r, seg_end - 1) - seg_first) * p.row_bytes;
#else
    UNROLL for (uint w = 0; w < NW; ++w) rbase[r * NW + w] = wbase + w * UP_OFF + min(row0 + r, p.N - 1) * p.row_bytes;
#endif

  float acc[ROWS][NT];
  UNROLL for (uint r = 0; r < ROWS; ++r)
    UNROLL for (uint t = 0; t < NT; ++t) acc[r][t] = 0.0;
#ifdef NORM_OUT
  float nwv[RPG];  // loaded now, used after the weights
  UNROLL for (uint r = 0; r < RPG; ++r) nwv[r] = norm_w[min(row0 + r, p.N - 1)];
#endif
#ifdef RMS_IN
  // The block sums are issued before the weight loop and summed after it, in a fixed order.
  float sqv[NT][RMS_PER_LANE];
  UNROLL for (uint t = 0; t < NT; ++t) {
    const uint base = min(xr[t], xr[0] + nt - 1) * RMS_NB;
    UNROLL for (uint i = 0; i < RMS_PER_LANE; ++i) {
      const uint b = lane + i * LPR;
      sqv[t][i] = b < RMS_NB ? sq_in[base + b] : 0.0;
    }
  }
#endif

#ifdef PAIR_SKIP
  const uint n_units = pair_skip ? 0u : p.K / MMVQ_UNIT;
#else
  const uint n_units = p.K / MMVQ_UNIT;
#endif
  for (uint u0 = lane; u0 < n_units; u0 += LPR * U) {
    mmvq_w wv[U][ROWS];
    UNROLL for (uint k = 0; k < U; ++k) {
      const uint u = min(u0 + k * LPR, n_units - 1);  // a clamped unit is loaded but not used
#if defined(LAB) && (LAB & 2) != 0
      UNROLL for (uint r = 0; r < ROWS; ++r) wv[k][r] = mmvq_load(wbase, lane & 3u);  // lab: one unit, cache-hot
#else
      UNROLL for (uint r = 0; r < ROWS; ++r) wv[k][r] = mmvq_load(rbase[r], u);
#endif
    }
    UNROLL for (uint k = 0; k < U; ++k) {
      const uint u = u0 + k * LPR;
      if (u >= n_units) break;
#if defined(LAB) && (LAB & 1) != 0
      UNROLL for (uint r = 0; r < ROWS; ++r) acc[r][0] += float(mmvq_lab(wv[k][r]) & 1u);  // lab: weights only
      continue;
#endif
#ifdef MMVQ_MT
      mmvq_p pw[ROWS];
      [[unroll]] for (uint r = 0; r < ROWS; ++r) pw[r] = mmvq_prep(wv[k][r], u);
      [[unroll]] for (uint t = 0; t < NT; ++t) {
        if (t >= nt) break;
        const mmvq_a a = mmvq_act(u, p.q_off + xr[t] * p.q_stride, p.s_off + xr[t] * p.s_stride);
        [[unroll]] for (uint r = 0; r < ROWS; ++r) acc[r][t] += mmvq_dot_p(pw[r], a);
      }
#else
      UNROLL for (uint t = 0; t < NT; ++t) {
        if (t >= nt) break;
        const uint qb = p.q_off + xr[t] * p.q_stride, sb = p.s_off + xr[t] * p.s_stride;
        UNROLL for (uint r = 0; r < ROWS; ++r) acc[r][t] += mmvq_dot(wv[k][r], u, qb, sb);
      }
#endif
    }
  }

#if defined(SG_LPR)  // a lane group is exactly one subgroup
  UNROLL for (uint r = 0; r < ROWS; ++r)
    UNROLL for (uint t = 0; t < NT; ++t) acc[r][t] = subgroupAdd(acc[r][t]);
#elif defined(SG_CLUSTER)  // a lane group is an aligned cluster of LPR lanes of a subgroup
  UNROLL for (uint r = 0; r < ROWS; ++r)
    UNROLL for (uint t = 0; t < NT; ++t) acc[r][t] = lane_group_sum(acc[r][t]);
#else
  UNROLL for (uint r = 0; r < ROWS; ++r)
    UNROLL for (uint t = 0; t < NT; ++t) red[r * NT + t][gl_LocalInvocationID.x] = acc[r][t];
  barrier();
  if (lane == 0)
    UNROLL for (uint r = 0; r < ROWS; ++r)
      UNROLL for (uint t = 0; t < NT; ++t) {
        float s = 0.0;
        for (uint l = 0; l < LPR; ++l) s += red[r * NT + t][grp * LPR + l];
        acc[r][t] = s;
      }
#endif
#ifdef RMS_IN
  UNROLL for (uint t = 0; t < NT; ++t) {
    float ss = 0.0;
    UNROLL for (uint i = 0; i < RMS_PER_LANE; ++i) ss += sqv[t][i];
#if defined(SG_LPR)
    ss = subgroupAdd(ss);
#elif defined(SG_CLUSTER)
    ss = lane_group_sum(ss);
#else
    barrier();  // lane 0 has read red above
    red[0][gl_LocalInvocationID.x] = ss;
    barrier();
    ss = 0.0;
    for (uint l = 0; l < LPR; ++l) ss += red[0][grp * LPR + l];
#endif
    const float rs = 1.0 / sqrt(ss / float(RMS_IN) + p.rms_eps);
    UNROLL for (uint r = 0; r < ROWS; ++r) acc[r][t] *= rs;
  }
#endif
  if (lane == 0)
    UNROLL for (uint r = 0; r < RPG; ++r) {
      const uint row = row0 + r;
#ifdef STACK_OUT
      if (row >= seg_end) break;
      UNROLL for (uint t = 0; t < NT; ++t) {
        if (t >= nt) break;
        const uint lrow = row - seg_first;
        if (seg == 0u) y[p.y_off + yr[t] * p.y_stride + lrow] = acc[r][t];
        else if (seg == 1u) y2[p.r_off + yr[t] * p.r_stride + lrow] = acc[r][t];
        else y3[p.y3_off + yr[t] * p.y3_stride + lrow] = acc[r][t];
      }
      continue;
#endif
      if (row >= p.N) break;
      UNROLL for (uint t = 0; t < NT; ++t) {
        if (t >= nt) break;
#ifdef PAIR_OUT
        y[p.y_off + yr[t] * p.y_stride + row] = acc[r * 2][t];
        y2[p.r_off + yr[t] * p.r_stride + row] = acc[r * 2 + 1][t];
        continue;
#endif
#ifdef SWIGLU
        const float g = acc[r * 2][t];
        const float v = g / (1.0 + exp(-g)) * acc[r * 2 + 1][t];
#else
        const float v = acc[r][t];
#endif
#ifdef ADD_RESIDUAL
        const float yv = res[p.r_off + yr[t] * p.r_stride + row] + v;
#else
        const float yv = v;
#endif
        y[p.y_off + yr[t] * p.y_stride + row] = yv;
#ifdef QUANT_OUT
        outv[t][grp * RPG + r] = v;
#endif
#ifdef NORM_OUT
        outv[t][grp * RPG + r] = yv * nwv[r];
        outsq[t][grp * RPG + r] = yv * yv;
#endif
      }
    }
#if defined(QUANT_OUT) || defined(NORM_OUT)
  // N is a multiple of 32 and a workgroup's first row is a multiple of WG_ROWS (itself a
  // multiple of 32): every block this workgroup quantizes is complete.
  barrier();
  const uint tid = gl_LocalInvocationID.x, row_base = wgx * WG_ROWS;
  if (tid < NT * (WG_ROWS / 32)) {
    const uint t = tid / (WG_ROWS / 32), b = tid % (WG_ROWS / 32);
    const uint r0 = b * 32;
    if (t < nt && row_base + r0 < p.N) {
      const uint blk = (row_base + r0) / 32;
#ifdef NORM_OUT
      float sq = 0.0;
      for (uint i = 0; i < 32; ++i) sq += outsq[t][r0 + i];
      sq_out[yr[t] * (p.N / 32) + blk] = sq;
#endif
      vec4 v[8];
      for (uint i = 0; i < 8; ++i)
        v[i] = vec4(outv[t][r0 + 4 * i], outv[t][r0 + 4 * i + 1], outv[t][r0 + 4 * i + 2], outv[t][r0 + 4 * i + 3]);
      const q8_block qb = q8_quantize(v);
      const uint qo = p.q_off + yr[t] * p.q_stride + blk * 2;  // in uvec4
      xqo[qo] = qb.lo;
      xqo[qo + 1] = qb.hi;
      xso[p.s_off + yr[t] * p.s_stride + blk] = qb.s;
    }
  }
#endif
#if defined(ROUTER_PARTS) && defined(NORM_OUT)  // outv is complete since the barrier above (router_parts.glsl)
  for (uint tb = 0; tb < NT * (WG_ROWS / 32); ++tb) {
    const uint t = tb / (WG_ROWS / 32), r0 = (tb % (WG_ROWS / 32)) * 32;
    if (t >= nt || row_base + r0 >= p.N) continue;  // uniform
    vec4 v[8];
    for (uint i = 0; i < 8; ++i)
      v[i] = vec4(outv[t][r0 + 4 * i], outv[t][r0 + 4 * i + 1], outv[t][r0 + 4 * i + 2], outv[t][r0 + 4 * i + 3]);
    router_part_block(yr[t], (row_base + r0) / 32, p.N, v);
  }
#endif
#if defined(MOE_COMBINE_TAIL)
  MOE_COMBINE_TAIL_CALL()
#elif defined(MOE_BLOCK_TAIL)
  moe_block_tail(gl_WorkGroupID.y, wgx * GROUPS * RPG, GROUPS * RPG, p.N, p.y_off, p.y_stride, p.bt_k, p.bt_out_off,
                 p.bt_out_stride, p.bt_r_off, p.bt_r_stride, p.bt_weighted != 0u, p.bt_q_stride, p.bt_s_stride);
#elif defined(NORM_TAIL)
  NORM_TAIL_CALL();
#endif
}
