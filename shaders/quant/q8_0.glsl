// Q8_0 (include/strata/quant/q8_0.hpp): x = d * qs[i]; part 0/1 = elements 0-15 / 16-31.
void dequant16(uint blk, uint part, out float v[16]) {
  const float d = w_f16(blk + Q8_0_OFF_D);
  const uint q = blk + Q8_0_OFF_QS + 16 * part;
  for (uint i = 0; i < 16; ++i) v[i] = d * float(w_i8(q + i));
}

#ifdef MMVQ
// Integer matvec unit (mmvq.glsl): one block, 32 codes after a 2-byte scale (34-byte blocks are
// only 2-byte aligned: w_u128_2).
const uint MMVQ_UNIT = 32;
struct mmvq_w {
  uvec4 q0, q1;
  uint d;
};
mmvq_w mmvq_load(uint row_base, uint u) {
  const uint blk = row_base + u * BLOCK_BYTES;
  return mmvq_w(w_u128_2(blk + Q8_0_OFF_QS), w_u128_2(blk + Q8_0_OFF_QS + 16), w_u16(blk + Q8_0_OFF_D));
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
