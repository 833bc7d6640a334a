// Q3_K (include/strata/quant/q3_k.hpp): 16 sub-blocks of 16, x = (d*(s_j - 32))*q with a signed
// code q = lo + 4*hi - 4 in [-4, 3]. Part p is sub-block j = p; element e = 16p + i has lo in
// qs[32(e/128) + e%32] bits 2k..2k+1 (k = (e%128)/32) and hi in hmask[e%32] bit e/32. The 6-bit
// s_j: low nibble of scales[j % 8] (high nibble for j >= 8), bits 4-5 in scales[8 + j%4] bits
// 2(j/4).. . 110-byte blocks are only 2-byte aligned.
void dequant16(uint blk, uint part, out float v[16]) {
  const uint s = blk + Q3_K_OFF_SCALES;
  const uint lo4 = (w_u8(s + (part & 7u)) >> (4 * (part >> 3))) & 0xFu;
  const uint hi2 = (w_u8(s + 8 + (part & 3u)) >> (2 * (part >> 2))) & 3u;
  const float dl = w_f16(blk + Q3_K_OFF_D) * float(int(lo4 | (hi2 << 4)) - 32);
  const uint l0 = 16 * (part & 1u);
  const uint q = blk + Q3_K_OFF_QS + 32 * (part >> 3) + l0;
  const uint h = blk + Q3_K_OFF_HMASK + l0;
  const uint shift = 2 * ((part & 7u) >> 1), hbit = part >> 1;  // e/32 = p/2
  for (uint i = 0; i < 16; i += 4) {
    const uint lo = w_u32_2(q + i) >> shift;
    const uint hi = w_u32_2(h + i) >> hbit;
    for (uint b = 0; b < 4; ++b) {
      const int c = int((lo >> (8 * b)) & 3u) - (((hi >> (8 * b)) & 1u) != 0 ? 0 : 4);
      v[i + b] = dl * float(c);
    }
  }
}
