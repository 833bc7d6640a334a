// Lab reference (vk_matvec_bench variant "rd"): reads a weight buffer as 16-byte words, U loads in
// flight per thread, nothing else; the rate a decode kernel's weight reads can reach at that size
// and that dispatch shape. Thread i of the grid reads words i, i + S, ..., S = the grid's threads.
layout(local_size_x = WG) in;
layout(binding = 0, std430) readonly buffer W { uvec4 w[]; };
layout(binding = 1, std430) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform Params { uint n16; } p;

void main() {
  const uint stride = gl_NumWorkGroups.x * WG;
  uvec4 a = uvec4(0);
  for (uint i = gl_GlobalInvocationID.x; i < p.n16; i += stride * U) {
    uvec4 v[U];
    [[unroll]] for (uint k = 0; k < U; ++k) v[k] = w[min(i + k * stride, p.n16 - 1)];
    [[unroll]] for (uint k = 0; k < U; ++k) a ^= v[k];
  }
  // Never true for random weights, but the compiler cannot know: the loads stay.
  if (a.x == 0x9E3779B9u && a.y == a.z) y[0] = a.w;
}
