// Q8_0 (include/strata/quant/q8_0.hpp): x = d * qs[i]; parts 2b / 2b+1 = elements 0-15 / 16-31
// of block b. Rows of a multiple of 8 blocks are stored in groups on the GPU (common.glsl
// w_field): the 8 scales, then the 8 code arrays, 16-byte aligned.
uint q80_d(uint row_base, uint b) { return w_field(row_base, b, Q8_0_OFF_D, Q8_0_SIZE_D); }
uint q80_qs(uint row_base, uint b) { return w_field(row_base, b, Q8_0_OFF_QS, Q8_0_SIZE_QS); }

void dequant_row16(uint row_base, uint c, out float v[16]) {
  const float d = w_f16(q80_d(row_base, c >> 1));
  const uint q = q80_qs(row_base, c >> 1) + 16 * (c & 1u);
  for (uint i = 0; i < 16; ++i) v[i] = d * float(w_i8(q + i));
}

#ifdef MMVQ
// Integer matvec unit (mmvq.glsl): one block, 32 codes and a 2-byte scale (two 16-byte loads in
// a grouped row; ggml's 34-byte blocks are only 2-byte aligned: w_u128_2).
const uint MMVQ_UNIT = 32;
struct mmvq_w {
  uvec4 q0, q1;
  uint d;
};
mmvq_w mmvq_load(uint row_base, uint u) {
  const uint qs = q80_qs(row_base, u), d = q80_d(row_base, u);
  if (w_grouped) return mmvq_w(w128[qs >> 4], w128[(qs >> 4) + 1], w_u16(d));
  return mmvq_w(w_u128_2(qs), w_u128_2(qs + 16), w_u16(d));
}
// mmvq.glsl's LAB bit 0: every loaded word folded together, so no load is dropped.
uint mmvq_lab(mmvq_w w) { return w.q0.x ^ w.q0.y ^ w.q0.z ^ w.q0.w ^ w.q1.x ^ w.q1.y ^ w.q1.z ^ w.q1.w ^ w.d; }
float mmvq_dot(mmvq_w w, uint u, uint qb, uint sb) {
  const uvec4 a0 = xq[qb + 2 * u], a1 = xq[qb + 2 * u + 1];
  const int s = dot4(w.q0.x, a0.x) + dot4(w.q0.y, a0.y) + dot4(w.q0.z, a0.z) + dot4(w.q0.w, a0.w) +
                dot4(w.q1.x, a1.x) + dot4(w.q1.y, a1.y) + dot4(w.q1.z, a1.z) + dot4(w.q1.w, a1.w);
  return unpackHalf2x16(w.d).x * xs[sb + u].x * float(s);
}
#endif
