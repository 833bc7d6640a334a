// Llama 4 NoPE-layer attention temperature: q[t] *= log(floor((pos + 1) / 8192) + 1) * 0.1 + 1.
layout(local_size_x = WG) in;
layout(binding = 1, std430) buffer Q { float q[]; };
layout(binding = 2, std430) readonly buffer Pos { int pos[]; };
layout(push_constant) uniform Params { uint n_tok, cols, q_off, q_stride; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (i >= p.cols) return;
  const float f = log(floor((float(pos[t]) + 1.0) / 8192.0) + 1.0) * 0.1 + 1.0;
  q[p.q_off + t * p.q_stride + i] *= f;
}
