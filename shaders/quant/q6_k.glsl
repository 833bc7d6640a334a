// Q6_K (include/strata/quant/q6_k.hpp): 16 sub-blocks of 16, x = d*sc_j*(lo + 16*hi - 32).
// Element e = 128h + 32k + l: lo in ql[64h + 32(k&1) + l] (high nibble for k >= 2),
// hi in qh[32h + l] bits 2k..2k+1. Part p is sub-block j = p.
void dequant16(uint blk, uint part, out float v[16]) {
  const uint e0 = 16 * part;
  const uint h = e0 >> 7, k = (e0 & 127u) >> 5, l0 = e0 & 31u;
  const float d = w_f16(blk + Q6_K_OFF_D) * float(w_i8(blk + Q6_K_OFF_SCALES + part));
  const uint ql = blk + Q6_K_OFF_QL + 64 * h + 32 * (k & 1u) + l0;
  const uint qh = blk + Q6_K_OFF_QH + 32 * h + l0;
  const uint lo_shift = k < 2 ? 0u : 4u, hi_shift = 2 * k;
  for (uint i = 0; i < 16; i += 4) {
    const uint lo = w_u32_2(ql + i) >> lo_shift;
    const uint hi = w_u32_2(qh + i) >> hi_shift;
    for (uint b = 0; b < 4; ++b) {
      const int q = int(((lo >> (8 * b)) & 0xFu) | (((hi >> (8 * b)) & 3u) << 4)) - 32;
      v[i + b] = d * float(q);
    }
  }
}
