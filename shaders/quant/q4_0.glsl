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
