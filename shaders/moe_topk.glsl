// Top-k routing of one token: the k experts with the largest router logits (ties: lower id
// first) and their weights (softmax over all experts renormalised over the k, or sigmoid for
// Llama 4: ROUTER_SIGMOID) -> ids[t*k + j], wts[t*k + j]. Used by moe.glsl MOE_TOPK (one
// workgroup per token), as the router matvec's tail (matvec.glsl TOPK_TAIL: its last
// workgroup routes every token of the step) and as the experts' gate/up matvec's prologue
// (mmvq.glsl TOPK_IN: every workgroup routes its pair's token). Up to 256 experts and k <= 64.
// Bindings from TOPK_TAIL / TOPK_IN + 1 (moe.glsl: from 1): +0 ids, +1 weights, +2 the logits.
// TOPK_PARTS (= blocks a token, TOPK_IN only): +2 holds the router's logits as per-block parts
// of the unnormalised rows (mmvq.glsl ROUTER_PARTS: [token][block][expert], experts a multiple of
// 4) and +3 the blocks' sums of x^2; topk_sum_parts() sums the parts (TOPK_SEGS threads an
// expert quad, each over every TOPK_SEGS-th block) and applies the 1 / rms before the ranking.
// TOPK_LPARTS (default TOPK_PARTS): the logits' parts a token where they are not one a block
// (router_product.glsl: 2, [token][part][expert]); the sums of x^2 stay TOPK_PARTS blocks.
// TOPK_DIRECT (with TOPK_LEAN, few parts): each lane adds its experts' parts straight from memory
// and ranks the unscaled sums (1 / rms is positive: the same order), so no barrier precedes the
// ranking; only the writing subgroup sums the x^2 blocks, and it scales the logits in the weights.
// The caller sets topk_eps (the norm's epsilon) first.
#if defined(TOPK_TAIL)
#define TOPK_BINDING (TOPK_TAIL + 1)
#elif defined(TOPK_IN)
#define TOPK_BINDING (TOPK_IN + 1)
#else
#define TOPK_BINDING 1
#endif
layout(binding = TOPK_BINDING + 0, std430) buffer TopkIds { int topk_ids[]; };
layout(binding = TOPK_BINDING + 1, std430) buffer TopkWts { float topk_wts[]; };
#ifdef TOPK_PARTS
#ifndef TOPK_LPARTS
#define TOPK_LPARTS TOPK_PARTS
#endif
#if defined(TOPK_DIRECT) && (!defined(TOPK_LEAN) || TOPK_LPARTS > 4)
#error "TOPK_DIRECT: the lean top-k over at most 4 parts a logit"
#endif
const uint TOPK_LOADS = TOPK_LPARTS < 8 ? TOPK_LPARTS : 8;  // parts loaded before the sums
layout(binding = TOPK_BINDING + 2, std430) readonly buffer TopkParts { vec4 topk_l4[]; };
layout(binding = TOPK_BINDING + 3, std430) readonly buffer TopkSq { float topk_sq[]; };
#ifdef TOPK_DIRECT
float topk_eps;  // the FFN norm's epsilon, set by the caller
#else
shared vec4 topk_psum[TOPK_SEGS][64];
#endif
#else
layout(binding = TOPK_BINDING + 2, std430) coherent readonly buffer TopkLogits { float topk_l[]; };
#endif

const uint TOPK_PER_THREAD = (256u + WG - 1u) / WG;
#if !defined(TOPK_LEAN) || (defined(TOPK_PARTS) && !defined(TOPK_DIRECT))
shared float topk_logit[256];
#endif
#ifndef TOPK_LEAN
shared float topk_wsel[64];
shared uint topk_sel[64];  // the selected experts by rank, for the caller
#endif
shared float topk_red[WG / MIN_SUBGROUP];

float topk_wg_max(float v) {
  v = subgroupMax(v);
  barrier();
  if (subgroupElect()) topk_red[gl_SubgroupID] = v;
  barrier();
  float r = topk_red[0];
  for (uint g = 1u; g < gl_NumSubgroups; ++g) r = max(r, topk_red[g]);
  return r;
}
float topk_wg_sum(float v) {
  v = subgroupAdd(v);
  barrier();
  if (subgroupElect()) topk_red[gl_SubgroupID] = v;
  barrier();
  float r = 0.0;
  for (uint g = 0u; g < gl_NumSubgroups; ++g) r += topk_red[g];
  return r;
}

#if defined(TOPK_PARTS) && !defined(TOPK_DIRECT)
// Token t's logits from its parts (starting at l_off + t * l_stride floats, l_off and l_stride
// multiples of 4) into topk_logit[]: the sum over blocks times 1 / rms(x) (eps: the norm's).
void topk_sum_parts(uint t, uint n_expert, uint l_off, uint l_stride, float eps) {
  const uint tid = gl_LocalInvocationIndex, e4n = n_expert / 4u;
  float sq = 0.0;
  for (uint b = tid; b < TOPK_PARTS; b += WG) sq += topk_sq[t * TOPK_PARTS + b];
  const float rs = 1.0 / sqrt(topk_wg_sum(sq) / float(TOPK_PARTS * 32u) + eps);
  const uint base = (l_off + t * l_stride) / 4u;
  for (uint i = tid; i < e4n * TOPK_SEGS; i += WG) {
    const uint e4 = i % e4n, seg = i / e4n;
    vec4 acc = vec4(0.0);
#ifdef ROUTER_PARTS_LAB  // lab (wrong results): one block's parts only, the bound with the sums free
    for (uint b0 = seg; b0 < 1u; b0 += TOPK_LOADS * TOPK_SEGS) {
#else
    for (uint b0 = seg; b0 < TOPK_LPARTS; b0 += TOPK_LOADS * TOPK_SEGS) {
#endif
      vec4 v[TOPK_LOADS];  // the loads in flight before the sums
      [[unroll]] for (uint u = 0u; u < TOPK_LOADS; ++u) {
        // The index stays in range past the last part (a compiler may load both arms of the select).
        const uint b = b0 + u * TOPK_SEGS;
        const vec4 l = topk_l4[base + min(b, TOPK_LPARTS - 1u) * e4n + e4];
        v[u] = b < TOPK_LPARTS ? l : vec4(0.0);
      }
      [[unroll]] for (uint u = 0u; u < TOPK_LOADS; ++u) acc += v[u];
    }
    topk_psum[seg][e4] = acc;
  }
  barrier();
  for (uint e = tid; e < n_expert; e += WG) {
    float s = 0.0;
    for (uint seg = 0u; seg < TOPK_SEGS; ++seg) s += topk_psum[seg][e / 4u][e % 4u];
    topk_logit[e] = s * rs;
  }
  barrier();
}
#endif

#ifdef TOPK_LEAN
// The lean form (the default; STRATA_VK_TOPK_LEAN=0 runs the full form below. TOPK_LEAN = experts a lane,
// at least n_expert / the subgroup's size; k at most the subgroup's size): each subgroup ranks alone,
// with no shared memory and no barrier. Expert e sits in lane e % S, slot e / S (S = the subgroup's
// size); the k largest are taken one at a time (the maximum across the subgroup, then the lowest
// slot and lowest lane holding it: ties go to the lower id). The full form's chain before a gate/up
// workgroup's first weight load (TOPK_IN: six barriers, 128 shared reads a thread) was the cost. The weights
// come from the k selected logits alone: softmax over all experts renormalised over the k is
// exp(l_r - l_0) / sum_j exp(l_j - l_0) over the selected (l_0 the largest), so the maximum and the
// sum over every expert cancel. Same ids as the full form; the weights equal its to the last bits.
// Runs ranks 0..want (all k where write_out) and returns rank want's expert; write_out: this
// subgroup writes ranks first..k-1 (ids and weights, at t * (k - first) + rank - first).
#extension GL_KHR_shader_subgroup_ballot : require
uint moe_topk_sg(uint t, uint n_expert, uint k, uint l_off, uint l_stride, bool write_out, uint first, uint want) {
  const uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize;
  float v[TOPK_LEAN];
  [[unroll]] for (uint i = 0u; i < TOPK_LEAN; ++i) {
    const uint e = i * S + lane;
#if defined(TOPK_DIRECT)  // the parts' sum, unscaled
    float l = 0.0;
    [[unroll]] for (uint q = 0u; q < TOPK_LPARTS; ++q) {
      const uint j = l_off + t * l_stride + q * n_expert + min(e, n_expert - 1u);
      l += topk_l4[j / 4u][j % 4u];
    }
    v[i] = e < n_expert ? l : -1.0 / 0.0;
#elif defined(TOPK_PARTS)  // topk_sum_parts() has filled them
    v[i] = e < n_expert ? topk_logit[min(e, n_expert - 1u)] : -1.0 / 0.0;
#else
    v[i] = e < n_expert ? topk_l[l_off + t * l_stride + min(e, n_expert - 1u)] : -1.0 / 0.0;
#endif
  }
  float l0 = 0.0, my_l = -1.0 / 0.0;  // lane r < k: rank r's logit (write_out)
  uint my_id = 0u, want_id = 0u;
  const uint ranks = write_out ? k : want + 1u;
  for (uint r = 0u; r < ranks; ++r) {
    float lm = v[0];
    [[unroll]] for (uint i = 1u; i < TOPK_LEAN; ++i) lm = max(lm, v[i]);
    const float m = subgroupMax(lm);
    // The lowest slot holding m in any lane, then that slot's lowest lane (the padding's -inf is
    // past every id, so it is never taken before a real expert of the same logit).
    uint slot = TOPK_LEAN, win = 0u;
    [[unroll]] for (uint i = TOPK_LEAN; i-- > 0u;) {
      const uvec4 b = subgroupBallot(v[i] == m);
      if (b != uvec4(0u)) {
        slot = i;
        win = subgroupBallotFindLSB(b);
      }
    }
    // NaN logits (a broken model's) match no maximum: the id stays a real expert's, never past the tensor.
    const uint id = min(slot * S + win, n_expert - 1u);
    [[unroll]] for (uint i = 0u; i < TOPK_LEAN; ++i)
      if (i == slot && lane == win) v[i] = -1.0 / 0.0;
    if (r == 0u) l0 = m;
    if (lane == r) {
      my_l = m;
      my_id = id;
    }
    if (r == want) want_id = id;
  }
  if (write_out) {
#ifdef TOPK_DIRECT  // the logits were ranked unscaled: 1 / rms(x) from the blocks' sums of x^2
    float sq = 0.0;
    for (uint b = lane; b < TOPK_PARTS; b += S) sq += topk_sq[t * TOPK_PARTS + b];
    const float rs = 1.0 / sqrt(subgroupAdd(sq) / float(TOPK_PARTS * 32u) + topk_eps);
#else
    const float rs = 1.0;
#endif
#ifdef ROUTER_SIGMOID
    const float w = 1.0 / (1.0 + exp(-(my_l * rs)));
#else
    const float x = lane < k ? exp((my_l - l0) * rs) : 0.0;
    const float w = x / subgroupAdd(x);
#endif
    if (lane < k && lane >= first) {
      topk_ids[t * (k - first) + lane - first] = int(my_id);
      topk_wts[t * (k - first) + lane - first] = w;
    }
  }
  return want_id;
}
// The full form's interface: every subgroup ranks, the first one writes.
void moe_topk(uint t, uint n_expert, uint k, uint l_off, uint l_stride, bool write_out, uint first) {
  moe_topk_sg(t, n_expert, k, l_off, l_stride, write_out && gl_SubgroupID == 0u, first, 0u);
}
#else
// Token t's logits start at l_off + t * l_stride (floats). Every invocation calls it; the ids
// and weights go to memory where write_out holds (the same for the whole workgroup), and the
// ids by rank to topk_sel[] in any case. first > 0 writes only ranks first..k-1, at
// t * (k - first) + rank - first (weights still normalised over all k): the GPU's share of a
// block whose first ranks the CPU computes (cpu_experts.cpp, the CPU ranks the same way).
void moe_topk(uint t, uint n_expert, uint k, uint l_off, uint l_stride, bool write_out, uint first) {
  // Each thread ranks its experts against all others (ties: lower id first), so the top-k
  // needs no serial selection; max and softmax sum are taken in the same sweep.
  const uint tid = gl_LocalInvocationIndex;
  float lmax = -1.0 / 0.0;
  for (uint e = tid; e < n_expert; e += WG) {
#ifndef TOPK_PARTS  // else topk_sum_parts() has filled them
    topk_logit[e] = topk_l[l_off + t * l_stride + e];
#endif
    lmax = max(lmax, topk_logit[e]);
  }
  const float mx = topk_wg_max(lmax);  // its barriers also publish topk_logit[]
  float lsum = 0.0;
  for (uint e = tid; e < n_expert; e += WG) lsum += exp(topk_logit[e] - mx);
  const float sum = topk_wg_sum(lsum);
  uint my_rank[TOPK_PER_THREAD];
  for (uint i = 0u; i < TOPK_PER_THREAD; ++i) {
    my_rank[i] = 0xFFFFFFFFu;
    const uint e = tid + i * WG;
    if (e >= n_expert) continue;
    const float v = topk_logit[e];
    // Eight logits read before they are compared: a loop of one shared read and one compare per
    // expert waited out the read each time (128 reads before a gate/up workgroup's first weight
    // load, TOPK_IN).
    uint rank = 0u;
    for (uint o0 = 0u; o0 < n_expert; o0 += 8u) {
      float lo[8];
      [[unroll]] for (uint u = 0u; u < 8u; ++u) lo[u] = topk_logit[min(o0 + u, n_expert - 1u)];
      [[unroll]] for (uint u = 0u; u < 8u; ++u) {
        const uint o = o0 + u;
        rank += o < n_expert && (lo[u] > v || (lo[u] == v && o < e)) ? 1u : 0u;
      }
    }
    if (rank < k) {
      my_rank[i] = rank;
      topk_sel[rank] = e;
      if (write_out && rank >= first) topk_ids[t * (k - first) + rank - first] = int(e);
#ifdef ROUTER_SIGMOID
      topk_wsel[rank] = 1.0 / (1.0 + exp(-v));
#else
      topk_wsel[rank] = exp(v - mx) / sum;
#endif
    }
  }
  barrier();
#ifdef ROUTER_SIGMOID
  for (uint i = 0u; i < TOPK_PER_THREAD; ++i)
    if (write_out && my_rank[i] != 0xFFFFFFFFu && my_rank[i] >= first)
      topk_wts[t * (k - first) + my_rank[i] - first] = topk_wsel[my_rank[i]];
#else
  float wsum = 0.0;
  for (uint r = 0u; r < k; ++r) wsum += topk_wsel[r];
  wsum = max(wsum, 6.103515625e-5);
  for (uint i = 0u; i < TOPK_PER_THREAD; ++i)
    if (write_out && my_rank[i] != 0xFFFFFFFFu && my_rank[i] >= first)
      topk_wts[t * (k - first) + my_rank[i] - first] = topk_wsel[my_rank[i]] / wsum;
#endif
  barrier();  // topk_logit and topk_wsel are written again by the next token
}
#endif
