// Quantized matrix x activations for small token counts (decode and short batches):
// y[t][n] = sum_k W[n][k] * x[t][k]. A workgroup owns NR weight rows and NT tokens and reads
// each weight block once for all NT tokens; threads stride over the row in 16-element parts.
// Fused variants (each saves a dispatch and a barrier per use):
//  NORM_INPUT    x is RMS-normalised on the fly: x' = (x * rsqrt(mean(x^2) + eps)) * w_norm
//  SWIGLU        two weights (gate at 0, up at up_off bytes further in the same binding):
//                y = silu(gate . x) * (up . x)
//  ADD_RESIDUAL  y = r + W . x (r may alias y)
//  MOE_IDS       workgroup y is a (token, expert slot) pair; the weight is that expert's slab
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer X { float x[]; };
layout(binding = 2, std430) buffer Y { float y[]; };
#ifdef MOE_IDS
layout(binding = 3, std430) readonly buffer Ids { int ids[]; };
#endif
#ifdef NORM_INPUT
layout(binding = 4, std430) readonly buffer NormW { float norm_w[]; };
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
} p;

#ifdef SWIGLU
const uint NW = 2;
#else
const uint NW = 1;
#endif
const uint PARTS = QK / 16;
shared float partial[NW * NR * NT][WG / MIN_SUBGROUP];
#ifdef NORM_INPUT
shared float norm_scale[NT];
#endif

void main() {
  const uint row0 = (gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.z) * NR;
  if (row0 >= p.N) return;  // uniform per workgroup
#ifdef MOE_IDS
  const uint pair = gl_WorkGroupID.y;
  const uint t0 = pair;
  const uint wbase = uint(ids[p.ids_off + pair]) * p.expert_bytes;
  const uint xrow0 = pair / p.in_div;
  const uint nt = 1;
#else
  const uint t0 = gl_WorkGroupID.y * NT;
  const uint wbase = 0;
  const uint xrow0 = t0;
  const uint nt = min(NT, p.n_tok - t0);
#endif

#ifdef NORM_INPUT
  for (uint t = 0; t < NT; ++t) {
    float ss = 0.0;
    if (t < nt) {
      const uint xo = p.x_off + (xrow0 + t) * p.x_stride;
      for (uint k = gl_LocalInvocationID.x; k < p.K; k += WG) ss += x[xo + k] * x[xo + k];
    }
    ss = subgroupAdd(ss);
    if (subgroupElect()) partial[t][gl_SubgroupID] = ss;
  }
  barrier();
  if (gl_LocalInvocationID.x < NT) {
    float s = 0.0;
    for (uint g = 0; g < gl_NumSubgroups; ++g) s += partial[gl_LocalInvocationID.x][g];
    norm_scale[gl_LocalInvocationID.x] = 1.0 / sqrt(s / float(p.K) + p.eps);
  }
  barrier();
#endif

  float acc[NW * NR][NT];
  for (uint r = 0; r < NW * NR; ++r)
    for (uint t = 0; t < NT; ++t) acc[r][t] = 0.0;

  const uint n_parts = p.K / 16;
  for (uint c = gl_LocalInvocationID.x; c < n_parts; c += WG) {
    const uint blk_off = (c / PARTS) * BLOCK_BYTES, part = c % PARTS;
    float xv[NT][16];
    for (uint t = 0; t < NT; ++t) {
      if (t < nt) {
        const uint xo = p.x_off + (xrow0 + t) * p.x_stride + 16 * c;
        for (uint i = 0; i < 16; ++i) {
#ifdef NORM_INPUT
          xv[t][i] = (x[xo + i] * norm_scale[t]) * norm_w[16 * c + i];
#else
          xv[t][i] = x[xo + i];
#endif
        }
      }
    }
    for (uint r = 0; r < NR; ++r) {
      const uint row = min(row0 + r, p.N - 1);
      for (uint w = 0; w < NW; ++w) {
        float v[16];
        dequant16(wbase + w * p.up_off + row * p.row_bytes + blk_off, part, v);
        for (uint t = 0; t < NT; ++t) {
          float s = 0.0;
          for (uint i = 0; i < 16; ++i) s += v[i] * xv[t][i];
          acc[r * NW + w][t] += s;
        }
      }
    }
  }
#ifdef NORM_INPUT
  barrier();  // partial is reused below
#endif
  for (uint r = 0; r < NW * NR; ++r)
    for (uint t = 0; t < NT; ++t) {
      const float s = subgroupAdd(acc[r][t]);
      if (subgroupElect()) partial[r * NT + t][gl_SubgroupID] = s;
    }
  barrier();
  const uint i = gl_LocalInvocationID.x;
  if (i < NR * NT) {
    const uint ri = i / NT, t = i % NT;
    float s[NW];
    for (uint w = 0; w < NW; ++w) {
      s[w] = 0.0;
      for (uint g = 0; g < gl_NumSubgroups; ++g) s[w] += partial[(ri * NW + w) * NT + t][g];
    }
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
}
