// Quantized matrix x activations for small token counts (decode and short batches):
// y[t][n] = sum_k W[n][k] * x[t][k]. A workgroup owns NR weight rows and NT tokens and reads
// each weight block once for all NT tokens; threads stride over the row in 16-element parts.
// With MOE_IDS, workgroup y is an (token, expert slot) pair and the weight is that expert's slab.
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer X { float x[]; };
layout(binding = 2, std430) writeonly buffer Y { float y[]; };
#ifdef MOE_IDS
layout(binding = 3, std430) readonly buffer Ids { int ids[]; };
#endif
layout(push_constant) uniform Params {
  uint K, N, n_tok, row_bytes;
  uint x_off, x_stride, y_off, y_stride;
  uint expert_bytes, in_div, ids_off;
} p;

const uint PARTS = QK / 16;
shared float partial[NR * NT][WG / MIN_SUBGROUP];

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
  float acc[NR][NT];
  for (uint r = 0; r < NR; ++r)
    for (uint t = 0; t < NT; ++t) acc[r][t] = 0.0;

  const uint n_parts = p.K / 16;
  for (uint c = gl_LocalInvocationID.x; c < n_parts; c += WG) {
    const uint blk_off = (c / PARTS) * BLOCK_BYTES, part = c % PARTS;
    float xv[NT][16];
    for (uint t = 0; t < NT; ++t) {
      if (t < nt) {
        const uint xo = p.x_off + (xrow0 + t) * p.x_stride + 16 * c;
        for (uint i = 0; i < 16; ++i) xv[t][i] = x[xo + i];
      }
    }
    for (uint r = 0; r < NR; ++r) {
      const uint row = min(row0 + r, p.N - 1);
      float v[16];
      dequant16(wbase + row * p.row_bytes + blk_off, part, v);
      for (uint t = 0; t < NT; ++t) {
        float s = 0.0;
        for (uint i = 0; i < 16; ++i) s += v[i] * xv[t][i];
        acc[r][t] += s;
      }
    }
  }
  for (uint r = 0; r < NR; ++r)
    for (uint t = 0; t < NT; ++t) {
      const float s = subgroupAdd(acc[r][t]);
      if (subgroupElect()) partial[r * NT + t][gl_SubgroupID] = s;
    }
  barrier();
  const uint i = gl_LocalInvocationID.x;
  if (i < NR * NT) {
    const uint r = i / NT, t = i % NT;
    float s = 0.0;
    for (uint g = 0; g < gl_NumSubgroups; ++g) s += partial[i][g];
    if (row0 + r < p.N && t < nt) y[p.y_off + (t0 + t) * p.y_stride + row0 + r] = s;
  }
}
