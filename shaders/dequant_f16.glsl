// Weight rows of any format -> plain f16 rows, for the tensor-core GEMM (mul_mm_f16.glsl) of a
// prefill-sized batch: the expansion costs one pass over the weights, after which every tile
// the GEMM loads is a straight 16-byte read with no per-element decoding in its K loop.
// Invocation i expands granule i (16 elements, two uvec4 of halves) of rows [row0, row0 + rows).
layout(local_size_x = WG) in;
layout(binding = 1, std430) writeonly buffer Out { uvec4 o[]; };
layout(push_constant) uniform Params {
  uint K;          // row length (multiple of 16)
  uint row_bytes;  // bytes per weight row
  uint row0, rows; // the rows expanded by this dispatch
  uint o_off;      // in uvec4: where row row0 starts in the output (rows are K halves apart)
} p;

void main() {
  w_set_rows(p.row_bytes);
  const uint per_row = p.K / 16;
  const uint g = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x * WG +
                 gl_WorkGroupID.x * WG + gl_LocalInvocationID.x;
  if (g >= p.rows * per_row) return;
  const uint r = g / per_row, c = g % per_row;
  float v[16];
  dequant_row16((p.row0 + r) * p.row_bytes, c, v);
  const uint at = p.o_off + r * (p.K / 8) + 2 * c;
  o[at] = uvec4(packHalf2x16(vec2(v[0], v[1])), packHalf2x16(vec2(v[2], v[3])), packHalf2x16(vec2(v[4], v[5])),
                packHalf2x16(vec2(v[6], v[7])));
  o[at + 1] = uvec4(packHalf2x16(vec2(v[8], v[9])), packHalf2x16(vec2(v[10], v[11])),
                    packHalf2x16(vec2(v[12], v[13])), packHalf2x16(vec2(v[14], v[15])));
}
