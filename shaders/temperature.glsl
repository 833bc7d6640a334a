// Position-dependent row scale (Llama 4's NoPE-layer attention temperature: scale 0.1, floor_base
// 8192): q[t] *= log(floor((pos + 1) / floor_base) + 1) * scale + 1.
layout(local_size_x = WG) in;
layout(binding = 1, std430) buffer Q { float q[]; };
layout(binding = 2, std430) readonly buffer Pos { int pos[]; };
layout(push_constant) uniform Params { uint n_tok, cols, q_off, q_stride; float scale, floor_base; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (i >= p.cols) return;
  const float f = log(floor((float(pos[t]) + 1.0) / p.floor_base) + 1.0) * p.scale + 1.0;
  q[p.q_off + t * p.q_stride + i] *= f;
}
