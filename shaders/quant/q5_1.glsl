// Q5_1 (include/strata/quant/q5_1.hpp): x = q * d + m with q = nibble | bit << 4, packed as in
// Q5_0. 24-byte blocks are 4-byte aligned. `precise`: no FMA, as in q4_1.glsl.
void dequant16(uint blk, uint part, out float v[16]) {
  const float d = w_f16(blk + Q5_1_OFF_D), m = w_f16(blk + Q5_1_OFF_M);
  const uint hi = w32[(blk + Q5_1_OFF_QH) >> 2] >> (16 * part);
  const uint shift = 4 * part;
  for (uint i = 0; i < 16; i += 4) {
    const uint lo = w32[(blk + Q5_1_OFF_QS + i) >> 2] >> shift;
    for (uint b = 0; b < 4; ++b) {
      const uint q = ((lo >> (8 * b)) & 0xFu) | (((hi >> (i + b)) & 1u) << 4);
      precise float y = float(q) * d + m;
      v[i + b] = y;
    }
  }
}
