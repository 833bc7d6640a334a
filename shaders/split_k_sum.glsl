// The split-K GEMM's partial products added up (mul_mm_f16.glsl SPLIT_K): y[t][n] = sum over
// s < splits, in order, of part[s][t][n] (partials part_stride floats apart, rows N floats long),
// so the result does not depend on which workgroup finished first.
layout(local_size_x = WG) in;
layout(binding = 0, std430) readonly buffer Part { float part[]; };
layout(binding = 1, std430) writeonly buffer Y { float y[]; };
#ifdef RESIDUAL  // y = r + sum (elementwise.glsl OP_ADD's order); r may be y itself
layout(binding = 2, std430) readonly buffer R { float res[]; };
#endif
layout(push_constant) uniform Params {
  uint N, n_tok, splits, part_stride;
  uint y_off, y_stride;
  uint r_off, r_stride;  // RESIDUAL
} p;

void main() {
  const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
  if (i >= p.N * p.n_tok) return;
  float s = part[i];
  for (uint z = 1; z < p.splits; ++z) s += part[z * p.part_stride + i];
#ifdef RESIDUAL
  s = res[p.r_off + (i / p.N) * p.r_stride + i % p.N] + s;
#endif
  y[p.y_off + (i / p.N) * p.y_stride + i % p.N] = s;
}
