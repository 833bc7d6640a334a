// Greedy decoding on the GPU: the index of each row's largest logit (lowest index among ties),
// so a greedy step reads back 4 bytes per row instead of the whole vocabulary.
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer S { float s[]; };
layout(binding = 2, std430) writeonly buffer Ids { int ids[]; };
layout(push_constant) uniform Params { uint cols, s_off, s_stride; } p;

shared float best_v[WG];
shared uint best_i[WG];

void main() {
  const uint r = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  float bv = -1.0 / 0.0;
  uint bi = 0xFFFFFFFFu;
  for (uint i = tid; i < p.cols; i += WG) {
    const float v = s[p.s_off + r * p.s_stride + i];
    if (v > bv || bi == 0xFFFFFFFFu) {  // strided ascending scan: the first max seen is the lowest index
      bv = v;
      bi = i;
    }
  }
  best_v[tid] = bv;
  best_i[tid] = bi;
  barrier();
  for (uint stride = WG / 2; stride > 0; stride /= 2) {
    if (tid < stride) {
      const float ov = best_v[tid + stride];
      const uint oi = best_i[tid + stride];
      if (oi != 0xFFFFFFFFu && (ov > best_v[tid] || (ov == best_v[tid] && oi < best_i[tid]) || best_i[tid] == 0xFFFFFFFFu)) {
        best_v[tid] = ov;
        best_i[tid] = oi;
      }
    }
    barrier();
  }
  if (tid == 0) ids[r] = int(best_i[0]);
}
