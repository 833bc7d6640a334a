// Which element of a 16 x 16 f32 cooperative matrix each lane holds (the layout is the driver's,
// VK_NV_cooperative_matrix does not name it): one warp loads a matrix whose element (r, c) is
// 16 r + c and writes, per lane, what its elements hold; out[256] = elements per lane.
// runtime/vulkan/mma_layout.cpp reads it once at start-up for mul_mmq.glsl's epilogue.
layout(local_size_x = 32) in;
layout(binding = 0, std430) writeonly buffer Out { uint o[]; };
shared float lmap[256];
void main() {
  const uint lane = gl_LocalInvocationID.x;
  for (uint i = lane; i < 256; i += 32) lmap[i] = float(i);
  barrier();
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> m;
  coopMatLoadNV(m, lmap, 0, 16, false);
  const uint n = uint(m.length());
  for (uint e = 0; e < 8; ++e) o[lane * 8 + e] = e < n ? uint(m[e]) : 0xFFFFFFFFu;
  if (lane == 0) o[256] = n;
}
