// F16 rows in granules of 16 elements.
void dequant16(uint blk, uint part, out float v[16]) {
  for (uint i = 0; i < 16; i += 2) {
    const vec2 h = unpackHalf2x16(w_u32_2(blk + 2 * i));
    v[i] = h.x;
    v[i + 1] = h.y;
  }
}
