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
