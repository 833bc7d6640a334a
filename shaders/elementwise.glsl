// Row-wise elementwise ops over strided row views: OP_ADD out = a + b; OP_SWIGLU
// out = silu(a) * b (out may alias a). One thread per element.
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer A { float a[]; };
layout(binding = 2, std430) readonly buffer B { float b[]; };
layout(binding = 3, std430) writeonly buffer O { float o[]; };
layout(push_constant) uniform Params { uint cols, a_off, a_stride, b_off, b_stride, o_off, o_stride; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z;
  if (i >= p.cols) return;
  const float x = a[p.a_off + r * p.a_stride + i], y = b[p.b_off + r * p.b_stride + i];
#if defined(OP_ADD)
  o[p.o_off + r * p.o_stride + i] = x + y;
#elif defined(OP_SWIGLU)
  o[p.o_off + r * p.o_stride + i] = x / (1.0 + exp(-x)) * y;
#endif
}
