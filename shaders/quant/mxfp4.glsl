// MXFP4 (include/strata/quant/mxfp4.hpp): x = values[q] * 2^(e - 128), q an E2M1 code in a
// nibble of qs[16] (part 0: low nibbles = elements 0-15, part 1: high = 16-31). MXFP4_VALUES
// (doubled E2M1 values) is generated from the C++ table; the half scale is built from its bits
// as mxfp4::half_scale does (e = 0, 1 give float subnormals, which a device may flush to zero).
// 17-byte blocks have no alignment: bytes only.
void dequant16(uint blk, uint part, out float v[16]) {
  const uint e = w_u8(blk + MXFP4_OFF_E);
  const float d = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
  const uint q = blk + MXFP4_OFF_QS;
  const uint shift = 4 * part;
  for (uint i = 0; i < 16; ++i) v[i] = MXFP4_VALUES[(w_u8(q + i) >> shift) & 0xFu] * d;
}
