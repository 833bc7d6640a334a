// Embedding lookup from a quantized table: out[t] = dequant(W[tokens[t]]).
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer Tokens { int tokens[]; };
layout(binding = 2, std430) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params { uint K, row_bytes, o_off, o_stride; } p;


void main() {
  w_set_rows(p.row_bytes);
  const uint c = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (c >= p.K / 16) return;
  const uint row = uint(tokens[t]);
  float v[16];
  dequant_row16(row * p.row_bytes, c, v);
  const uint base = p.o_off + t * p.o_stride + 16 * c;
  for (uint i = 0; i < 16; ++i) o[base + i] = v[i];
}
