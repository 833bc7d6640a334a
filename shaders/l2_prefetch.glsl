// Lab (STRATA_VK_L2_PREFETCH=1): reads a weight range so that its lines sit in L2 when a later
// level's matvec reads them; recorded beside an earlier level, it waits for nothing and nothing
// waits for it. One 16-byte load per 32-byte sector (L2's fill granularity).
layout(local_size_x = WG) in;
layout(binding = 0, std430) readonly buffer Src { uvec4 src[]; };
layout(binding = 1, std430) writeonly buffer Sink { uint sink[]; };
layout(push_constant) uniform Params { uint n_sectors; } p;

void main() {
  uvec4 acc = uvec4(0u);
  for (uint i = gl_GlobalInvocationID.x; i < p.n_sectors; i += gl_NumWorkGroups.x * WG) acc ^= src[2u * i];
  if (acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u && acc.z == 0x85ebca6bu) sink[0] = acc.w;  // keeps the loads
}
