// Q5_K (include/strata/quant/q5_k.hpp): 8 sub-blocks of 32, x = (d*sc_j)*q - (dmin*m_j), with
// 6-bit sc/m packed in 12 bytes as in Q4_K and q = nibble | bit << 4. Part p covers elements
// 16p..16p+15 of sub-block j = p/2: nibbles in qs[32(j/2) + 16(p&1) + i] (high nibble for odd
// j), fifth bits in qh[16(p&1) + i] bit j. 176-byte blocks are 4-byte aligned.
// `precise`: no FMA, as in q4_1.glsl.
void dequant16(uint blk, uint part, out float v[16]) {
  const uint j = part >> 1;
  const uint s = blk + Q5_K_OFF_SCALES;
  uint sc, m;
  if (j < 4) {
    sc = w_u8(s + j) & 63u;
    m = w_u8(s + j + 4) & 63u;
  } else {
    sc = (w_u8(s + j + 4) & 0xFu) | ((w_u8(s + j - 4) >> 6) << 4);
    m = (w_u8(s + j + 4) >> 4) | ((w_u8(s + j) >> 6) << 4);
  }
  const float d1 = w_f16(blk + Q5_K_OFF_D) * float(sc);
  const float m1 = w_f16(blk + Q5_K_OFF_DMIN) * float(m);
  const uint q = blk + Q5_K_OFF_QS + 32 * (j >> 1) + 16 * (part & 1u);
  const uint h = blk + Q5_K_OFF_QH + 16 * (part & 1u);
  const uint shift = 4 * (j & 1u);
  for (uint i = 0; i < 16; i += 4) {
    const uint lo = w32[(q + i) >> 2] >> shift;
    const uint hi = w32[(h + i) >> 2] >> j;
    for (uint b = 0; b < 4; ++b) {
      const uint c = ((lo >> (8 * b)) & 0xFu) | (((hi >> (8 * b)) & 1u) << 4);
      precise float y = d1 * float(c) - m1;
      v[i + b] = y;
    }
  }
}

#ifdef MMVQ
// Integer matvec unit (mmvq.glsl): 64 elements of block u/4 taken as Q6_K's unit takes them,
// bytes [16h, 16h+16) (h = u%2) of the four sub-blocks 4q .. 4q+3 (q = (u/2)%2), so each of its
// fields is one 16-byte load (176-byte blocks keep every field 16-byte aligned): the block header
// (d, dmin, the 12 scale bytes), the qs bytes of sub-blocks 4q, 4q+1 (low / high nibbles) and of
// 4q+2, 4q+3, and the qh bytes (their fifth bits are bits 4q .. 4q+3). Per sub-block, as Q4_K:
// sum_i (d sc q_i - dmin m) x_i = d sc dx sum_i q_i qx_i - dmin m (dx sum_i qx_i), the last sum
// the activation block's half sum (xs .y for bytes 0-15, .z for 16-31).
const uint MMVQ_UNIT = 64;
struct mmvq_w {
  uvec4 hdr, q01, q23, qh;
};
mmvq_w mmvq_load(uint row_base, uint u) {
  const uint blk = (row_base + (u >> 2) * BLOCK_BYTES) >> 4, h = u & 1u;
  const uint qs = blk + Q5_K_OFF_QS / 16 + 4 * ((u >> 1) & 1u) + h;
  return mmvq_w(w128[blk], w128[qs], w128[qs + 2], w128[blk + Q5_K_OFF_QH / 16 + h]);
}
// mmvq.glsl's LAB bit 0: every loaded word folded together, so no load is dropped.
uint mmvq_lab(mmvq_w w) {
  const uvec4 x = w.hdr ^ w.q01 ^ w.q23 ^ w.qh;
  return x.x ^ x.y ^ x.z ^ x.w;
}
// 6-bit scales (sc) and mins (mn) of sub-blocks 4q .. 4q+3, a byte each (detail/k_scale_min.hpp):
// sub-blocks 4-7 take their low four bits from scale bytes 8-11, their top two from bytes 0-7.
void q5k_unit_scales(uvec4 hdr, uint q, out uint sc, out uint mn) {
  if (q == 0u) {
    sc = hdr.y & 0x3F3F3F3Fu;
    mn = hdr.z & 0x3F3F3F3Fu;
  } else {
    sc = (hdr.w & 0x0F0F0F0Fu) | ((hdr.y >> 2) & 0x30303030u);
    mn = ((hdr.w >> 4) & 0x0F0F0F0Fu) | ((hdr.z >> 2) & 0x30303030u);
  }
}
// The 5-bit codes of sub-blocks 4q + k, 16 each: nibbles | fifth bits << 4.
void q5k_unit_codes(mmvq_w w, uint q, out uvec4 c0, out uvec4 c1, out uvec4 c2, out uvec4 c3) {
  const uint M = 0x0F0F0F0Fu, B = 0x01010101u;
  const uvec4 hb = w.qh >> (4 * q);
  c0 = (w.q01 & M) | ((hb & B) << 4);
  c1 = ((w.q01 >> 4) & M) | (((hb >> 1) & B) << 4);
  c2 = (w.q23 & M) | (((hb >> 2) & B) << 4);
  c3 = ((w.q23 >> 4) & M) | (((hb >> 3) & B) << 4);
}
int q5k_dot16(uvec4 c, uvec4 a) { return dot4(c.x, a.x) + dot4(c.y, a.y) + dot4(c.z, a.z) + dot4(c.w, a.w); }
float mmvq_dot(mmvq_w w, uint u, uint qb, uint sb) {
  const uint b = u >> 2, q = (u >> 1) & 1u, h = u & 1u;
  const uint blk32 = 8 * b + 4 * q;  // the activation block of sub-block 4q
  const uint xi = qb + 2 * blk32 + h;
  uvec4 c0, c1, c2, c3;
  q5k_unit_codes(w, q, c0, c1, c2, c3);
  const ivec4 acc = ivec4(q5k_dot16(c0, xq[xi]), q5k_dot16(c1, xq[xi + 2]), q5k_dot16(c2, xq[xi + 4]),
                          q5k_dot16(c3, xq[xi + 6]));
  uint sc, mn;
  q5k_unit_scales(w.hdr, q, sc, mn);
  float r = 0.0, m = 0.0;
  [[unroll]] for (uint k = 0; k < 4; ++k) {
    const vec4 s = xs[sb + blk32 + k];
    r += float((sc >> (8 * k)) & 0xFFu) * (s.x * float(acc[k]));
    m += float((mn >> (8 * k)) & 0xFFu) * (h == 0u ? s.y : s.z);
  }
  const vec2 dm = unpackHalf2x16(w.hdr.x);
  return dm.x * r - dm.y * m;
}
// Multi-token form (mmvq.glsl MMVQ_MT; see q4_k.glsl): the codes assembled and the scales and
// mins times d / dmin once per row, the activations once per token.
#define HAS_MMVQ_PREP 1
struct mmvq_p {
  uvec4 c0, c1, c2, c3;  // sub-blocks 4q + k, 16 codes each
  vec4 f, g;             // d sc_k, dmin m_k
};
mmvq_p mmvq_prep(mmvq_w w, uint u) {
  const uint q = (u >> 1) & 1u;
  mmvq_p r;
  q5k_unit_codes(w, q, r.c0, r.c1, r.c2, r.c3);
  uint sc, mn;
  q5k_unit_scales(w.hdr, q, sc, mn);
  const vec2 dm = unpackHalf2x16(w.hdr.x);
  [[unroll]] for (uint k = 0; k < 4; ++k) {
    r.f[k] = dm.x * float((sc >> (8 * k)) & 0xFFu);
    r.g[k] = dm.y * float((mn >> (8 * k)) & 0xFFu);
  }
  return r;
}
struct mmvq_a {
  uvec4 a0, a1, a2, a3;  // sub-blocks 4q + k
  vec4 s, m;             // their blocks' scales and half sums
};
mmvq_a mmvq_act(uint u, uint qb, uint sb) {
  const uint b = u >> 2, q = (u >> 1) & 1u, h = u & 1u;
  const uint blk32 = 8 * b + 4 * q;
  const uint xi = qb + 2 * blk32 + h;
  mmvq_a a;
  a.a0 = xq[xi];
  a.a1 = xq[xi + 2];
  a.a2 = xq[xi + 4];
  a.a3 = xq[xi + 6];
  [[unroll]] for (uint k = 0; k < 4; ++k) {
    const vec4 s = xs[sb + blk32 + k];
    a.s[k] = s.x;
    a.m[k] = h == 0u ? s.y : s.z;
  }
  return a;
}
float mmvq_dot_p(mmvq_p w, mmvq_a a) {
  const ivec4 acc = ivec4(q5k_dot16(w.c0, a.a0), q5k_dot16(w.c1, a.a1), q5k_dot16(w.c2, a.a2), q5k_dot16(w.c3, a.a3));
  return dot(w.f, a.s * vec4(acc)) - dot(w.g, a.m);
}
#endif
