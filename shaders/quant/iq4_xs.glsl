// IQ4_XS (include/strata/quant/iq4_xs.hpp): 8 sub-blocks of 32, x = (d*(ls_j - 32))*values[q].
// Part p covers elements 16p..16p+15 of sub-block j = p/2: indices in qs[16j + i], low nibble
// for even p. ls_j: nibble j%2 of scales_l[j/2] | bits 2j..2j+1 of scales_h << 4. IQ4_XS_VALUES
// is generated from the C++ grid (IQ4_NL's). 136-byte blocks are 8-byte aligned.
void dequant16(uint blk, uint part, out float v[16]) {
  const uint j = part >> 1;
  const uint lo4 = (w_u8(blk + IQ4_XS_OFF_SCALES_L + (j >> 1)) >> (4 * (j & 1u))) & 0xFu;
  const uint hi2 = (w_u16(blk + IQ4_XS_OFF_SCALES_H) >> (2 * j)) & 3u;
  const float dl = w_f16(blk + IQ4_XS_OFF_D) * float(int(lo4 | (hi2 << 4)) - 32);
  const uint q = blk + IQ4_XS_OFF_QS + 16 * j;
  const uint shift = 4 * (part & 1u);
  for (uint i = 0; i < 16; i += 4) {
    const uint w = w32[(q + i) >> 2] >> shift;
    for (uint b = 0; b < 4; ++b) v[i + b] = dl * IQ4_XS_VALUES[(w >> (8 * b)) & 0xFu];
  }
}

#ifdef MMVQ
// Integer matvec unit (mmvq.glsl): sub-blocks 2p, 2p+1 of block u/4 (p = u%4), 64 elements:
// their 32 qs bytes (8-byte aligned in the 136-byte blocks: four 8-byte loads) and the block's
// first 8 bytes (d, scales_h, scales_l: one load). Each index goes through IQ4_NL's grid to its
// int8 value, then the signed products with the activation codes:
// sum_i d (ls - 32) values[q_i] x_i = d (ls - 32) dx sum_i values[q_i] qx_i.
// The grid lookup: a 256-entry table in shared memory (filled by mmvq_init) whose entry
// n0 | n1 << 4 holds the int8 values of indices n0 and n1 in its two low bytes, so two indices
// cost one load: a word's four low (or high) nibbles become four int8 values in two.
const uint MMVQ_UNIT = 64;
#define HAS_MMVQ_INIT 1
shared uint iq4_lut[256];
void mmvq_init() {
  for (uint e = gl_LocalInvocationID.x; e < 256u; e += WG)
    iq4_lut[e] = (uint(int(IQ4_XS_VALUES[e & 15u])) & 0xFFu) | ((uint(int(IQ4_XS_VALUES[e >> 4])) & 0xFFu) << 8);
  barrier();
}
// The grid values of the nibbles at bits 0-3 of each byte of m (the others 0), packed as bytes.
uint iq4_grid4(uint m) {
  const uint t = m | (m >> 4);  // byte 0: n0 | n1 << 4, byte 2: n2 | n3 << 4
  return iq4_lut[t & 0xFFu] | (iq4_lut[(t >> 16) & 0xFFu] << 16);
}
// A sub-block's 16 qs bytes as the grid values of elements 0-15 (low nibbles) and 16-31 (high).
void iq4_codes(uvec2 a, uvec2 b, out uvec4 lo, out uvec4 hi) {
  const uint M = 0x0F0F0F0Fu;
  const uvec4 q = uvec4(a, b);
  lo = uvec4(iq4_grid4(q.x & M), iq4_grid4(q.y & M), iq4_grid4(q.z & M), iq4_grid4(q.w & M));
  hi = uvec4(iq4_grid4((q.x >> 4) & M), iq4_grid4((q.y >> 4) & M), iq4_grid4((q.z >> 4) & M), iq4_grid4((q.w >> 4) & M));
}
struct mmvq_w {
  uvec2 hdr;             // d | scales_h << 16, scales_l
  uvec2 q0, q1, q2, q3;  // qs of sub-block 2p (q0, q1), 2p+1 (q2, q3)
};
mmvq_w mmvq_load(uint row_base, uint u) {
  const uint blk = (row_base + (u >> 2) * BLOCK_BYTES) >> 3;
  const uint q = blk + IQ4_XS_OFF_QS / 8 + 4 * (u & 3u);
  return mmvq_w(w64[blk], w64[q], w64[q + 1], w64[q + 2], w64[q + 3]);
}
// mmvq.glsl's LAB bit 0: every loaded word folded together, so no load is dropped.
uint mmvq_lab(mmvq_w w) {
  const uvec2 x = w.hdr ^ w.q0 ^ w.q1 ^ w.q2 ^ w.q3;
  return x.x ^ x.y;
}
// d (ls - 32) of sub-blocks 2p and 2p+1: ls = nibble of scales_l[p] | two bits of scales_h << 4.
vec2 iq4_scales(uvec2 hdr, uint p) {
  const uint sl = hdr.y >> (8 * p), sh = hdr.x >> (16 + 4 * p);
  const int ls0 = int((sl & 0xFu) | ((sh & 3u) << 4)) - 32, ls1 = int(((sl >> 4) & 0xFu) | (((sh >> 2) & 3u) << 4)) - 32;
  return unpackHalf2x16(hdr.x).x * vec2(ls0, ls1);
}
int iq4_dot16(uvec4 c, uvec4 a) { return dot4(c.x, a.x) + dot4(c.y, a.y) + dot4(c.z, a.z) + dot4(c.w, a.w); }
float mmvq_dot(mmvq_w w, uint u, uint qb, uint sb) {
  const uint b = u >> 2, p = u & 3u;
  const uint xi = qb + 16 * b + 4 * p;  // sub-block 2p's codes 0-15, 16-31, then 2p+1's
  uvec4 c0, c1, c2, c3;
  iq4_codes(w.q0, w.q1, c0, c1);
  iq4_codes(w.q2, w.q3, c2, c3);
  const int s0 = iq4_dot16(c0, xq[xi]) + iq4_dot16(c1, xq[xi + 1]);
  const int s1 = iq4_dot16(c2, xq[xi + 2]) + iq4_dot16(c3, xq[xi + 3]);
  const vec2 f = iq4_scales(w.hdr, p);
  return f.x * (xs[sb + 8 * b + 2 * p].x * float(s0)) + f.y * (xs[sb + 8 * b + 2 * p + 1].x * float(s1));
}
// Multi-token form (mmvq.glsl MMVQ_MT; see q4_k.glsl): the indices looked up in the grid and the
// scales unpacked once per row, the activations loaded once per token.
#define HAS_MMVQ_PREP 1
struct mmvq_p {
  uvec4 c0, c1, c2, c3;  // grid values: sub-block 2p's elements 0-15, 16-31, then 2p+1's
  vec2 f;                // d (ls - 32) of 2p, 2p+1
};
mmvq_p mmvq_prep(mmvq_w w, uint u) {
  mmvq_p r;
  iq4_codes(w.q0, w.q1, r.c0, r.c1);
  iq4_codes(w.q2, w.q3, r.c2, r.c3);
  r.f = iq4_scales(w.hdr, u & 3u);
  return r;
}
struct mmvq_a {
  uvec4 a0, a1, a2, a3;
  vec2 s;  // the two 32-blocks' scales
};
mmvq_a mmvq_act(uint u, uint qb, uint sb) {
  const uint b = u >> 2, p = u & 3u;
  const uint xi = qb + 16 * b + 4 * p;
  return mmvq_a(xq[xi], xq[xi + 1], xq[xi + 2], xq[xi + 3], vec2(xs[sb + 8 * b + 2 * p].x, xs[sb + 8 * b + 2 * p + 1].x));
}
float mmvq_dot_p(mmvq_p w, mmvq_a a) {
  const int s0 = iq4_dot16(w.c0, a.a0) + iq4_dot16(w.c1, a.a1);
  const int s1 = iq4_dot16(w.c2, a.a2) + iq4_dot16(w.c3, a.a3);
  return w.f.x * (a.s.x * float(s0)) + w.f.y * (a.s.y * float(s1));
}
#endif
