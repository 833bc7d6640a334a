// Row copy as a compute shader (vkCmdCopyBuffer is slow on this class of GPU): dst[r] =
// src[idx[r]] with INDEXED (the rows that produce logits), else dst[r] = src[r]; ADD: dst[r] +=
// src[r] (the CPU's share of a block's experts onto the GPU's: cpu_experts.cpp).
// TO_F16: dst holds f16 rows (offsets and stride in uvec4 of 8 halves); invocation i converts
// floats 8i..8i+7 of the row (the tensor-core GEMM's activations: half the bytes per tile).
// TO_F16 + INDEXED: row r comes from source row idx[idx_off + r] / div (an MoE step's pairs in
// expert order, moe.glsl MOE_GROUP's table: pair / k is its token).
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer S { float s[]; };
#ifdef TO_F16
layout(binding = 2, std430) writeonly buffer D { uvec4 d[]; };
#elif defined(ADD)
layout(binding = 2, std430) buffer D { float d[]; };
#else
layout(binding = 2, std430) writeonly buffer D { float d[]; };
#endif
#ifdef INDEXED
layout(binding = 3, std430) readonly buffer Idx { uint idx[]; };
#endif
layout(push_constant) uniform Params { uint cols, s_off, s_stride, d_off, d_stride, idx_off, div; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
#ifdef TO_F16
  if (8 * i >= p.cols) return;
#ifdef INDEXED
  const uint sr = idx[p.idx_off + r] / p.div;
#else
  const uint sr = r;
#endif
  const uint a = p.s_off + sr * p.s_stride + 8 * i;
  d[p.d_off + r * p.d_stride + i] = uvec4(packHalf2x16(vec2(s[a], s[a + 1])), packHalf2x16(vec2(s[a + 2], s[a + 3])),
                                          packHalf2x16(vec2(s[a + 4], s[a + 5])), packHalf2x16(vec2(s[a + 6], s[a + 7])));
#else
  if (i >= p.cols) return;
#ifdef INDEXED
  const uint sr = idx[r];
#else
  const uint sr = r;
#endif
#ifdef ADD
  d[p.d_off + r * p.d_stride + i] += s[p.s_off + sr * p.s_stride + i];
#else
  d[p.d_off + r * p.d_stride + i] = s[p.s_off + sr * p.s_stride + i];
#endif
#endif
}
