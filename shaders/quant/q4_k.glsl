// Q4_K (include/strata/quant/q4_k.hpp): 8 sub-blocks of 32, x = d*sc_j*q - dmin*m_j with
// 6-bit sc/m packed in 12 bytes. Part p covers elements 16p..16p+15 of sub-block j = p/2.
// `precise`: d1*q - m1 is rounded twice like the C++ reference (no FMA), so get_rows is bit-exact.
void dequant16(uint blk, uint part, out float v[16]) {
  const uint j = part >> 1;
  const uint s = blk + Q4_K_OFF_SCALES;
  uint sc, m;
  if (j < 4) {
    sc = w_u8(s + j) & 63u;
    m = w_u8(s + j + 4) & 63u;
  } else {
    sc = (w_u8(s + j + 4) & 0xFu) | ((w_u8(s + j - 4) >> 6) << 4);
    m = (w_u8(s + j + 4) >> 4) | ((w_u8(s + j) >> 6) << 4);
  }
  const float d1 = w_f16(blk + Q4_K_OFF_D) * float(sc);
  const float m1 = w_f16(blk + Q4_K_OFF_DMIN) * float(m);
  // Element e = 32j + 16(part&1) + i lives in qs[32(j/2) + e%32], low nibble for even j.
  const uint q = blk + Q4_K_OFF_QS + 32 * (j >> 1) + 16 * (part & 1);
  const uint shift = 4 * (j & 1);
  for (uint i = 0; i < 16; i += 4) {
    const uint w = w32[(q + i) >> 2] >> shift;
    for (uint b = 0; b < 4; ++b) {
      precise float y = d1 * float((w >> (8 * b)) & 0xFu) - m1;
      v[i + b] = y;
    }
  }
}
