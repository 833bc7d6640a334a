// Q5_0 (include/strata/quant/q5_0.hpp): x = (q - 16) * d with q = nibble | bit << 4; element
// j's nibble is qs[j % 16] (high nibble for j >= 16), its fifth bit is bit j of the u32 qh.
// 22-byte blocks are only 2-byte aligned: 32-bit reads go through w_u32_2.
void dequant16(uint blk, uint part, out float v[16]) {
  const float d = w_f16(blk + Q5_0_OFF_D);
  const uint hi = w_u32_2(blk + Q5_0_OFF_QH) >> (16 * part);
  const uint shift = 4 * part;
  for (uint i = 0; i < 16; i += 4) {
    const uint lo = w_u32_2(blk + Q5_0_OFF_QS + i) >> shift;
    for (uint b = 0; b < 4; ++b) {
      const uint q = ((lo >> (8 * b)) & 0xFu) | (((hi >> (i + b)) & 1u) << 4);
      v[i + b] = float(int(q) - 16) * d;
    }
  }
}
