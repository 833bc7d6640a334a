// Q4_1 (include/strata/quant/q4_1.hpp): x = q * d + m, q a nibble of qs[16] (part 0: low
// nibbles = elements 0-15, part 1: high nibbles = 16-31). 20-byte blocks are 4-byte aligned.
// `precise` forbids fusing q*d + m into an FMA: the C++ reference rounds the product first,
// and embeddings (get_rows) must match it bit for bit.
void dequant16(uint blk, uint part, out float v[16]) {
  const float d = w_f16(blk + Q4_1_OFF_D), m = w_f16(blk + Q4_1_OFF_M);
  const uint shift = 4 * part;
  for (uint i = 0; i < 16; i += 4) {
    const uint q = w32[(blk + Q4_1_OFF_QS + i) >> 2] >> shift;
    for (uint b = 0; b < 4; ++b) {
      precise float y = float((q >> (8 * b)) & 0xFu) * d + m;
      v[i + b] = y;
    }
  }
}
