// Q2_K (include/strata/quant/q2_k.hpp): 16 sub-blocks of 16, x = (d*sc_j)*q - (dmin*m_j) with
// scales[j] = sc_j | m_j << 4. Part p is sub-block j = p; element e = 16p + i has its 2-bit
// code in qs[32(e/128) + e%32] bits 2k..2k+1, k = (e%128)/32. 84-byte blocks are only 2-byte
// aligned. `precise`: dl*q - ml is rounded twice like the C++ reference (no FMA).
void dequant16(uint blk, uint part, out float v[16]) {
  const uint sm = w_u8(blk + Q2_K_OFF_SCALES + part);
  const float dl = w_f16(blk + Q2_K_OFF_D) * float(sm & 0xFu);
  const float ml = w_f16(blk + Q2_K_OFF_DMIN) * float(sm >> 4);
  const uint q = blk + Q2_K_OFF_QS + 32 * (part >> 3) + 16 * (part & 1u);
  const uint shift = 2 * ((part & 7u) >> 1);
  for (uint i = 0; i < 16; i += 4) {
    const uint w = w_u32_2(q + i) >> shift;
    for (uint b = 0; b < 4; ++b) {
      precise float y = dl * float((w >> (8 * b)) & 3u) - ml;
      v[i + b] = y;
    }
  }
}
