// Row copy as a compute shader (vkCmdCopyBuffer is slow on this class of GPU): dst[r] =
// src[idx[r]] with INDEXED (the rows that produce logits), else dst[r] = src[r].
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer S { float s[]; };
layout(binding = 2, std430) writeonly buffer D { float d[]; };
#ifdef INDEXED
layout(binding = 3, std430) readonly buffer Idx { uint idx[]; };
#endif
layout(push_constant) uniform Params { uint cols, s_off, s_stride, d_off, d_stride; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
  if (i >= p.cols) return;
#ifdef INDEXED
  const uint sr = idx[r];
#else
  const uint sr = r;
#endif
  d[p.d_off + r * p.d_stride + i] = s[p.s_off + sr * p.s_stride + i];
}
