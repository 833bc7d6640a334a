// Quantized matrix x activations for small token counts (decode and short batches):
// y[t][n] = sum_k W[n][k] * x[t][k]. A workgroup owns NR weight rows and NT tokens and reads
// each weight block once for all NT tokens; its threads stride over the row in units (64
// elements where the format has a dequant64 fast path and NT <= 2, else 16), so each thread
// loads its slice of x once for all NR rows.
// Fused variants (each saves a dispatch and a barrier per use):
//  NORM_INPUT    x is RMS-normalised: W.((x * s) * w_norm) = s * W.(x * w_norm), with
//                s = rsqrt(mean(x^2) + eps) from the x slices the threads load anyway
//  SWIGLU        two weights (gate at 0, up at up_off bytes further in the same binding):
//                y = silu(gate . x) * (up . x)
//  ADD_RESIDUAL  y = r + W . x (r may alias y)
//  MOE_IDS       workgroup y is a (token, expert slot) pair; the weight is that expert's slab
//  TOPK_TAIL     y holds an MoE router's logits: the last workgroup routes every token
//                (moe_topk.glsl); the grid must not spill into z (every workgroup has rows)
#ifndef TAIL_COHERENT
#define TAIL_COHERENT
#endif
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer X4 { vec4 x4[]; };
layout(binding = 2, std430) TAIL_COHERENT buffer Y { float y[]; };
#ifdef MOE_IDS
layout(binding = 3, std430) readonly buffer Ids { int ids[]; };
#endif
#ifdef NORM_INPUT
layout(binding = 4, std430) readonly buffer NormW { float norm_w[]; };
layout(binding = 4, std430) readonly buffer NormW4 { vec4 norm_w4[]; };
#endif
#ifdef ADD_RESIDUAL
layout(binding = 5, std430) readonly buffer R { float r[]; };
#endif
layout(push_constant) uniform Params {
  uint K, N, n_tok, row_bytes;
  uint x_off, x_stride, y_off, y_stride;
  uint expert_bytes, in_div, ids_off, up_off;
  uint r_off, r_stride;
  float eps;
#ifdef TOPK_TAIL
  uint topk_n_expert, topk_k;
#endif
} p;

#ifdef SWIGLU
const uint NW = 2;
#else
const uint NW = 1;
#endif
#if defined(HAS_UNIT64) && NT <= 2
#define MV_UNIT 64
const uint UNIT_RUNS = UNIT64_RUNS;
uint unit_run_start(uint u, uint k) { return unit64_run_start(u, k); }
#else
#define MV_UNIT 16
const uint UNIT_RUNS = 1;
uint unit_run_start(uint u, uint k) { return 16 * u; }
#endif
const uint UNIT = MV_UNIT;
const uint RUN = UNIT / UNIT_RUNS;
#ifdef NORM_INPUT
const uint NSS = NT;
#else
const uint NSS = 0;
#endif
shared float partial[NW * NR * NT + NSS][WG / MIN_SUBGROUP];

// Dot of one weight-row unit with one token's x slice (xs: the slice's group sums, for
// formats whose dot64 factors scales and offsets out).
float dot_unit(uint row_base, uint u, float xv[UNIT], float xs[4]) {
#if MV_UNIT == 64
  return dot64(row_base, u, xv, xs);
#else
  float v[16];
  dequant_row16(row_base, u, v);
  float s = 0.0;
  for (uint i = 0; i < 16; ++i) s += v[i] * xv[i];
  return s;
#endif
}

void main() {
  w_set_rows(p.row_bytes);
  const uint row0 = (gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.z) * NR;
#ifndef TOPK_TAIL
  if (row0 >= p.N) return;  // uniform per workgroup
#endif
#ifdef MOE_IDS
  const uint pair = gl_WorkGroupID.y;
  const uint t0 = pair;
  const uint wbase = min(uint(ids[p.ids_off + pair]), w_last_expert(p.expert_bytes)) * p.expert_bytes;
  const uint xrow0 = pair / p.in_div;
  const uint nt = 1;
#else
  const uint t0 = gl_WorkGroupID.y * NT;
  const uint wbase = 0;
  const uint xrow0 = t0;
  const uint nt = min(NT, p.n_tok - t0);
#endif

  float acc[NW * NR][NT];
  for (uint r = 0; r < NW * NR; ++r)
    for (uint t = 0; t < NT; ++t) acc[r][t] = 0.0;
  float ss[NT];
  for (uint t = 0; t < NT; ++t) ss[t] = 0.0;

  const uint n_units = p.K / UNIT;
  for (uint u = gl_LocalInvocationID.x; u < n_units; u += WG) {
    float xv[NT][UNIT];
    for (uint t = 0; t < NT; ++t) {
      if (t < nt) {
        const uint xo = p.x_off + (xrow0 + t) * p.x_stride;
        for (uint k = 0; k < UNIT_RUNS; ++k) {
          const uint e0 = unit_run_start(u, k);
          for (uint i = 0; i < RUN; i += 4) {
            const vec4 xx = x4[(xo + e0 + i) >> 2];
#ifdef NORM_INPUT
            ss[t] += dot(xx, xx);
            const vec4 xw = xx * norm_w4[(e0 + i) >> 2];
#else
            const vec4 xw = xx;
#endif
            xv[t][k * RUN + i] = xw.x;
            xv[t][k * RUN + i + 1] = xw.y;
            xv[t][k * RUN + i + 2] = xw.z;
            xv[t][k * RUN + i + 3] = xw.w;
          }
        }
      } else {
        for (uint i = 0; i < UNIT; ++i) xv[t][i] = 0.0;
      }
    }
    float xs[NT][4];
    for (uint t = 0; t < NT; ++t) {
      for (uint g = 0; g < 4; ++g) xs[t][g] = 0.0;
#if MV_UNIT == 64
      for (uint g = 0; g < UNIT64_GROUPS; ++g)
        for (uint i = 0; i < UNIT / UNIT64_GROUPS; ++i) xs[t][g] += xv[t][g * (UNIT / UNIT64_GROUPS) + i];
#endif
    }
    for (uint r = 0; r < NR; ++r) {
      const uint row = min(row0 + r, p.N - 1);
      for (uint w = 0; w < NW; ++w)
        for (uint t = 0; t < NT; ++t) acc[r * NW + w][t] += dot_unit(wbase + w * p.up_off + row * p.row_bytes, u, xv[t], xs[t]);
    }
  }
  for (uint r = 0; r < NW * NR; ++r)
    for (uint t = 0; t < NT; ++t) {
      const float s = subgroupAdd(acc[r][t]);
      if (subgroupElect()) partial[r * NT + t][gl_SubgroupID] = s;
    }
#ifdef NORM_INPUT
  for (uint t = 0; t < NT; ++t) {
    const float s = subgroupAdd(ss[t]);
    if (subgroupElect()) partial[NW * NR * NT + t][gl_SubgroupID] = s;
  }
#endif
  barrier();
  const uint i = gl_LocalInvocationID.x;
  if (i < NR * NT) {
    const uint ri = i / NT, t = i % NT;
    float s[NW];
    for (uint w = 0; w < NW; ++w) {
      s[w] = 0.0;
      for (uint g = 0; g < gl_NumSubgroups; ++g) s[w] += partial[(ri * NW + w) * NT + t][g];
    }
#ifdef NORM_INPUT
    float sq = 0.0;
    for (uint g = 0; g < gl_NumSubgroups; ++g) sq += partial[NW * NR * NT + t][g];
    const float scale = 1.0 / sqrt(sq / float(p.K) + p.eps);
    for (uint w = 0; w < NW; ++w) s[w] *= scale;
#endif
    if (row0 + ri < p.N && t < nt) {
#ifdef SWIGLU
      const float v = s[0] / (1.0 + exp(-s[0])) * s[1];
#else
      const float v = s[0];
#endif
#ifdef ADD_RESIDUAL
      y[p.y_off + (t0 + t) * p.y_stride + row0 + ri] = r[p.r_off + (t0 + t) * p.r_stride + row0 + ri] + v;
#else
      y[p.y_off + (t0 + t) * p.y_stride + row0 + ri] = v;
#endif
    }
  }
#ifdef TOPK_TAIL
  if (last_workgroup())
    for (uint t = 0u; t < p.n_tok; ++t) moe_topk(t, p.topk_n_expert, p.topk_k, p.y_off, p.y_stride, true, 0u);
#endif
}
