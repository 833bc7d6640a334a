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
