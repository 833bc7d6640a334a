// Row-wise elementwise ops over strided row views: OP_ADD out = a + b; OP_SWIGLU
// out = silu(a) * b (out may alias a). One thread per element.
// F16_OUT (even cols): one thread per element pair, which also writes the pair as f16 into oh
// (rows h_stride halves apart from h_off): the tensor-core matmul's input, no copy dispatch after.
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer A { float a[]; };
layout(binding = 2, std430) readonly buffer B { float b[]; };
layout(binding = 3, std430) writeonly buffer O { float o[]; };
#ifdef F16_OUT
layout(binding = 4, std430) writeonly buffer OH { uint oh[]; };
#endif
layout(push_constant) uniform Params { uint cols, a_off, a_stride, b_off, b_stride, o_off, o_stride, h_off, h_stride; } p;

float op(float x, float y) {
#if defined(OP_ADD)
  return x + y;
#elif defined(OP_SWIGLU)
  return x / (1.0 + exp(-x)) * y;
#endif
}

void main() {
  const uint i = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z;
#ifdef F16_OUT
  if (2 * i >= p.cols) return;
  const uint ai = p.a_off + r * p.a_stride + 2 * i, bi = p.b_off + r * p.b_stride + 2 * i;
  const vec2 v = vec2(op(a[ai], b[bi]), op(a[ai + 1], b[bi + 1]));
  o[p.o_off + r * p.o_stride + 2 * i] = v.x;
  o[p.o_off + r * p.o_stride + 2 * i + 1] = v.y;
  oh[(p.h_off + r * p.h_stride) / 2 + i] = packHalf2x16(v);
#else
  if (i >= p.cols) return;
  o[p.o_off + r * p.o_stride + i] = op(a[p.a_off + r * p.a_stride + i], b[p.b_off + r * p.b_stride + i]);
#endif
}
