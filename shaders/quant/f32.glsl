// F32 rows in granules of 16 elements (QK = 16 for plain types).
void dequant16(uint blk, uint part, out float v[16]) {
  for (uint i = 0; i < 16; ++i) v[i] = w_f32(blk + 4 * i);
}
