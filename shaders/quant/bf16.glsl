// BF16 rows in granules of 16 elements: the upper half of an f32.
void dequant16(uint blk, uint part, out float v[16]) {
  for (uint i = 0; i < 16; ++i) v[i] = w_bf16(blk + 2 * i);
}
