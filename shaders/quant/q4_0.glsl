// Q4_0 (include/strata/quant/q4_0.hpp): x = (q - 8) * d, q a nibble of qs[16]. Part 0 is the
// low nibbles of qs[0..15] (elements 0-15), part 1 the high nibbles (16-31). 18-byte blocks
// are only 2-byte aligned: 32-bit reads go through w_u32_2.
void dequant16(uint blk, uint part, out float v[16]) {
  const float d = w_f16(blk + Q4_0_OFF_D);
  const uint shift = 4 * part;
  for (uint i = 0; i < 16; i += 4) {
    const uint q = w_u32_2(blk + Q4_0_OFF_QS + i) >> shift;
    for (uint b = 0; b < 4; ++b) v[i + b] = float(int((q >> (8 * b)) & 0xFu) - 8) * d;
  }
}

#ifdef MMVQ
// Integer matvec unit (mmvq.glsl): one block, 32 codes. ggml's 18-byte blocks are only 2-byte
// aligned: the block comes from the five aligned words over it, starting 0 or 2 bytes into the
// first (a row of whole super-blocks of 256 is 144 bytes a multiple, so the fifth word of a
// 4-aligned block ends inside the row: it holds the next block's scale). Codes are nibbles in
// 0..15: sum_i (q_i - 8) qx_i = sum_i q_i qx_i - 8 sum_i qx_i, the last sum the block's xs .w.
// (ggml's block: the f16 scale d at byte 0, the 16 code bytes from byte 2.)
const uint MMVQ_UNIT = 32;
struct mmvq_w {
  uvec4 q;  // qs: element i in the low nibble of byte i, element 16 + i in its high nibble
  uint d;
};
mmvq_w mmvq_load(uint row_base, uint u) {
  const uint blk = row_base + u * BLOCK_BYTES, i = blk >> 2;
  const uint a0 = w32[i], a1 = w32[i + 1], a2 = w32[i + 2], a3 = w32[i + 3], a4 = w32[i + 4];
  if ((blk & 2u) != 0u) return mmvq_w(uvec4(a1, a2, a3, a4), a0 >> 16);
  return mmvq_w(uvec4(funnel16(a0, a1, 16u), funnel16(a1, a2, 16u), funnel16(a2, a3, 16u), funnel16(a3, a4, 16u)),
                a0 & 0xFFFFu);
}
// mmvq.glsl's LAB bit 0: every loaded word folded together, so no load is dropped.
uint mmvq_lab(mmvq_w w) { return w.q.x ^ w.q.y ^ w.q.z ^ w.q.w ^ w.d; }
int q40_dot16(uvec4 c, uvec4 a) { return dot4(c.x, a.x) + dot4(c.y, a.y) + dot4(c.z, a.z) + dot4(c.w, a.w); }
float mmvq_dot(mmvq_w w, uint u, uint qb, uint sb) {
  const uint M = 0x0F0F0F0Fu;
  const int s = q40_dot16(w.q & M, xq[qb + 2 * u]) + q40_dot16((w.q >> 4) & M, xq[qb + 2 * u + 1]);
  const vec4 x = xs[sb + u];
  return unpackHalf2x16(w.d).x * (x.x * float(s) - 8.0 * x.w);
}
// Multi-token form (mmvq.glsl MMVQ_MT; see q4_k.glsl): the nibbles masked and the scale unpacked
// once per row, the activations once per token.
#define HAS_MMVQ_PREP 1
struct mmvq_p {
  uvec4 lo, hi;  // elements 0-15, 16-31
  float d;
};
mmvq_p mmvq_prep(mmvq_w w, uint u) {
  const uint M = 0x0F0F0F0Fu;
  return mmvq_p(w.q & M, (w.q >> 4) & M, unpackHalf2x16(w.d).x);
}
struct mmvq_a {
  uvec4 a0, a1;
  vec2 s;  // the block's scale, its code sum times the scale
};
mmvq_a mmvq_act(uint u, uint qb, uint sb) {
  const vec4 x = xs[sb + u];
  return mmvq_a(xq[qb + 2 * u], xq[qb + 2 * u + 1], vec2(x.x, x.w));
}
float mmvq_dot_p(mmvq_p w, mmvq_a a) {
  const int s = q40_dot16(w.lo, a.a0) + q40_dot16(w.hi, a.a1);
  return w.d * (a.s.x * float(s) - 8.0 * a.s.y);
}
#endif
