// Appends the batch's K and V rows to the cache at their slots (f16 or f32 per KV_K_F32 /
// KV_V_F32). One thread per element of a (token, row) pair.
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer Ksrc { float ks[]; };
layout(binding = 2, std430) readonly buffer Vsrc { float vs[]; };
#ifdef KV_K_F32
layout(binding = 3, std430) writeonly buffer Kc { float kc[]; };
#else
layout(binding = 3, std430) writeonly buffer Kc { float16_t kc[]; };
#endif
#ifdef KV_V_F32
layout(binding = 4, std430) writeonly buffer Vc { float vc[]; };
#else
layout(binding = 4, std430) writeonly buffer Vc { float16_t vc[]; };
#endif
layout(binding = 5, std430) readonly buffer Slots { uint slots[]; };
layout(push_constant) uniform Params { uint n_tok, row, k_off, k_stride, v_off, v_stride; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (i >= p.row) return;
  const uint dst = slots[t] * p.row + i;
#ifdef KV_K_F32
  kc[dst] = ks[p.k_off + t * p.k_stride + i];
#else
  kc[dst] = float16_t(ks[p.k_off + t * p.k_stride + i]);
#endif
#ifdef KV_V_F32
  vc[dst] = vs[p.v_off + t * p.v_stride + i];
#else
  vc[dst] = float16_t(vs[p.v_off + t * p.v_stride + i]);
#endif
}
