// Mixture-of-experts routing and combination on the GPU, one entry point per MOE_STAGE:
//  MOE_TOPK     one workgroup per token: top-k experts of the router logits and their weights
//               -> ids[t*k + j], wts[t*k + j] (moe_topk.glsl); cols > 0: only ranks cols..k-1,
//               at t*(k - cols) + j - cols (the GPU's share of a CPU block: cpu_experts.cpp).
//  MOE_GATHER   Llama 4 weights the expert input: xin[pair] = x[pair / k] * wts[pair].
//  MOE_COMBINE  out[t] = sum_j f_j * y[t*k + j], f_j = wts (or 1 when the input was weighted);
//               RESIDUAL: out[t] = r[t] + that sum (the decoder's residual add, r may alias out);
//               NORM_TAIL: then the last workgroup runs the next RMS norm of out (norm_tail.glsl);
//               NORM_OUT: the next RMS norm's first half, as mmvq.glsl NORM_OUT writes it (out
//               times the norm's weight as int8 blocks, each 32-column block's sum of out^2), so
//               the next integer matvec reads it with RMS_IN and no norm dispatch runs between.
//  MOE_GROUP    one workgroup: the step's (token, expert) pairs grouped by expert, for the
//               grouped expert matvecs (mmvq.glsl MOE_GROUPED), which then read each expert's
//               weights once per chunk of up to CHUNK pairs instead of once per pair.
//               grp[0] = chunk count; chunk c at grp[4 + 3c ..]: (expert, first, count), its
//               pairs at grp[sorted_off + first ..]. Order within an expert does not matter:
//               every pair's dot products are computed alone, the same way in any chunk.
#ifndef TAIL_COHERENT
#define TAIL_COHERENT
#endif
layout(local_size_x = WG) in;
layout(binding = 1, std430) buffer Ids { int ids[]; };
layout(binding = 2, std430) buffer Wts { float wts[]; };
layout(binding = 3, std430) readonly buffer S { float s[]; };
layout(binding = 4, std430) TAIL_COHERENT writeonly buffer D { float d[]; };
layout(push_constant) uniform Params {
  uint n_expert, k, cols, s_off, s_stride, d_off, d_stride, weighted, r_off, r_stride;
#if defined(NORM_TAIL)
  NORM_TAIL_PC
#elif defined(NORM_OUT)
  uint q_stride, qs_stride;  // the int8 slot's row strides: uvec4 (16 codes) and vec4 (a block)
#endif
} p;
#ifdef NORM_OUT
#if defined(NORM_TAIL) || !defined(RESIDUAL) || WG % 32 != 0
#error "NORM_OUT follows the residual combine, a workgroup owning whole 32-column blocks"
#endif
layout(binding = 6, std430) readonly buffer NormW { float norm_w[]; };
layout(binding = 7, std430) writeonly buffer XQO { uvec4 xqo[]; };
layout(binding = 8, std430) writeonly buffer XSO { vec4 xso[]; };
layout(binding = 9, std430) writeonly buffer SqOut { float sq_out[]; };  // [token][block of 32 columns]
shared float outv[WG], outsq[WG];
#endif
#ifdef RESIDUAL
layout(binding = 5, std430) readonly buffer R { float r[]; };
#endif
#ifdef MOE_GROUP
layout(binding = 5, std430) writeonly buffer G { uint grp[]; };
#endif

#if defined(MOE_TOPK)
void main() { moe_topk(gl_WorkGroupID.x, p.n_expert, p.k, p.s_off, p.s_stride, true, p.cols); }  // moe_topk.glsl; cols: first
#elif defined(MOE_GROUP)
// p.n_expert experts, p.cols pairs (ids[0 .. cols)), CHUNK pairs per chunk at most, sorted
// pairs from grp[p.d_off].
shared uint cnt[256], first[256], fill[256], chunk0[256];
void main() {
  const uint tid = gl_LocalInvocationID.x, E = p.n_expert, pairs = p.cols, sorted_off = p.d_off;
  for (uint e = tid; e < 256; e += WG) {
    cnt[e] = 0;
    fill[e] = 0;
  }
  barrier();
  // Ids clamped to the experts (a broken router's must not index past the tables).
  for (uint i = tid; i < pairs; i += WG) atomicAdd(cnt[min(uint(ids[i]), E - 1u)], 1u);
  barrier();
  if (tid == 0) {
    uint o = 0, c = 0;
    for (uint e = 0; e < E; ++e) {
      first[e] = o;
      chunk0[e] = c;
      o += cnt[e];
      c += (cnt[e] + CHUNK - 1) / CHUNK;
    }
    grp[0] = c;
  }
  barrier();
  for (uint e = tid; e < E; e += WG)
    for (uint j = 0; j * CHUNK < cnt[e]; ++j) {
      const uint c = chunk0[e] + j;
      grp[4 + 3 * c] = e;
      grp[5 + 3 * c] = first[e] + j * CHUNK;
      grp[6 + 3 * c] = min(CHUNK, cnt[e] - j * CHUNK);
    }
  for (uint i = tid; i < pairs; i += WG) {
    const uint e = min(uint(ids[i]), E - 1u);
    grp[sorted_off + first[e] + atomicAdd(fill[e], 1u)] = i;
  }
}
#elif defined(MOE_GATHER)
void main() {
  const uint i = gl_GlobalInvocationID.x, pair = gl_WorkGroupID.y;
  if (i >= p.cols) return;
  d[p.d_off + pair * p.d_stride + i] = s[p.s_off + (pair / p.k) * p.s_stride + i] * wts[pair];
}
#elif defined(MOE_COMBINE)
void main() {
  const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (i < p.cols) {  // no return: NORM_TAIL needs every invocation at the end
    // Eight experts' rows are loaded before their sum (same order of additions): a loop of one
    // load and one add per expert waited out a memory latency per expert.
    float acc = 0.0;
    for (uint j0 = 0; j0 < p.k; j0 += 8) {
      float v[8], f[8];
      [[unroll]] for (uint jj = 0; jj < 8; ++jj) {
        const uint j = min(j0 + jj, p.k - 1);  // past k: loaded, not added
        f[jj] = p.weighted != 0 ? wts[t * p.k + j] : 1.0;
        v[jj] = s[p.s_off + (t * p.k + j) * p.s_stride + i];
      }
      [[unroll]] for (uint jj = 0; jj < 8; ++jj)
        if (j0 + jj < p.k) acc += f[jj] * v[jj];
    }
#ifdef RESIDUAL
    acc = r[p.r_off + t * p.r_stride + i] + acc;
#endif
    d[p.d_off + t * p.d_stride + i] = acc;
#ifdef NORM_OUT
    outv[gl_LocalInvocationID.x] = acc * norm_w[i];
    outsq[gl_LocalInvocationID.x] = acc * acc;
#endif
  }
#ifdef NORM_OUT
  // cols is a multiple of 32 (the host checks): every block of this workgroup is complete.
  barrier();
  const uint b = gl_LocalInvocationID.x, c0 = gl_WorkGroupID.x * WG + 32 * b;
  if (b < WG / 32 && c0 < p.cols) {
    float sq = 0.0;
    for (uint j = 0; j < 32; ++j) sq += outsq[32 * b + j];
    const uint blk = c0 / 32;
    sq_out[t * (p.cols / 32) + blk] = sq;
    vec4 v[8];
    for (uint j = 0; j < 8; ++j)
      v[j] = vec4(outv[32 * b + 4 * j], outv[32 * b + 4 * j + 1], outv[32 * b + 4 * j + 2], outv[32 * b + 4 * j + 3]);
    const q8_block qb = q8_quantize(v);
    xqo[t * p.q_stride + blk * 2] = qb.lo;
    xqo[t * p.q_stride + blk * 2 + 1] = qb.hi;
    xso[t * p.qs_stride + blk] = qb.s;
  }
#endif
#ifdef NORM_TAIL
  NORM_TAIL_CALL();
#endif
}
#endif
