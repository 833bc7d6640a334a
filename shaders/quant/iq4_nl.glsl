// IQ4_NL (include/strata/quant/iq4_nl.hpp): x = d * values[q], q a nibble of qs[16] (part 0:
// low nibbles = elements 0-15, part 1: high nibbles = 16-31). IQ4_NL_VALUES is generated from
// the C++ grid. 18-byte blocks are only 2-byte aligned.
void dequant16(uint blk, uint part, out float v[16]) {
  const float d = w_f16(blk + IQ4_NL_OFF_D);
  const uint shift = 4 * part;
  for (uint i = 0; i < 16; i += 4) {
    const uint q = w_u32_2(blk + IQ4_NL_OFF_QS + i) >> shift;
    for (uint b = 0; b < 4; ++b) v[i + b] = d * IQ4_NL_VALUES[(q >> (8 * b)) & 0xFu];
  }
}
