// Q8_0 (include/strata/quant/q8_0.hpp): x = d * qs[i]; part 0/1 = elements 0-15 / 16-31.
void dequant16(uint blk, uint part, out float v[16]) {
  const float d = w_f16(blk + Q8_0_OFF_D);
  const uint q = blk + Q8_0_OFF_QS + 16 * part;
  for (uint i = 0; i < 16; ++i) v[i] = d * float(w_i8(q + i));
}
