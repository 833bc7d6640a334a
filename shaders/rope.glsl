// Rotary position embedding in place: NORM pairs (2i, 2i+1) or NEOX pairs (i, i + n_rot/2),
// angle = freq_scale * pos * base^(-2i/n_rot) / freq_factor[i]. One thread per pair.
layout(local_size_x = WG) in;
layout(binding = 1, std430) buffer X { float x[]; };
layout(binding = 2, std430) readonly buffer Pos { int pos[]; };
layout(binding = 3, std430) readonly buffer FreqFactors { float ff[]; };
layout(push_constant) uniform Params {
  uint n_tok, n_heads, n_rot, head_stride, x_off, x_stride;
  float base, freq_scale;
  uint neox, has_ff;
} p;

void main() {
  const uint half_rot = p.n_rot / 2;
  // More workgroups than the device's x limit spill into z (backend dispatch()).
  const uint g = gl_GlobalInvocationID.x + gl_NumWorkGroups.x * WG * gl_WorkGroupID.z;
  if (g >= p.n_tok * p.n_heads * half_rot) return;
  const uint i = g % half_rot, h = (g / half_rot) % p.n_heads, t = g / (half_rot * p.n_heads);
  const float theta = float(pos[t]) * pow(p.base, -2.0 * float(i) / float(p.n_rot));
  const float f = p.freq_scale * (theta / (p.has_ff != 0 ? ff[i] : 1.0));
  const float c = cos(f), s = sin(f);
  const uint base = p.x_off + t * p.x_stride + h * p.head_stride;
  const uint a = p.neox != 0 ? base + i : base + 2 * i;
  const uint b = p.neox != 0 ? base + i + half_rot : base + 2 * i + 1;
  const float x0 = x[a], x1 = x[b];
  x[a] = x0 * c - x1 * s;
  x[b] = x0 * s + x1 * c;
}
