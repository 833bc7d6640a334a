// Which element of a cooperative matrix each lane holds (the layout is the driver's,
// VK_NV_cooperative_matrix does not name it). runtime/vulkan/mma_layout.cpp reads it once at
// start-up.
// Default: one warp loads a 16 x 16 f32 matrix whose element (r, c) is 16 r + c and writes, per
// lane, what its elements hold; out[256] = elements per lane (mul_mmq.glsl's epilogue).
// F16_AB: the f16 operands of a 16x8x16 product as mul_mm_reg.glsl builds them in registers, an
// A of 16 x 16 (element (r, c) = 16 r + c) and a B of 16 x 8 (element (k, n) = 8 k + n), used in a
// product as there: out[12 lane + e] = A's element e (e < 8), out[12 lane + 8 + e] = B's element e
// (e < 4); out[384] = A's elements per lane | B's << 8; out[385 + lane] the product (kept live).
layout(local_size_x = 32) in;
layout(binding = 0, std430) writeonly buffer Out { uint o[]; };
#ifdef F16_AB
shared uvec4 la[32];  // A: 16 rows of 16 halves, 2 uvec4 a row
shared uvec4 lb[16];  // B: 16 rows of 8 halves
void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint r = lane / 2, c0 = 8 * (lane % 2);
  uint a[4], b[4];
  for (uint i = 0; i < 4; ++i) {
    a[i] = packFloat2x16(f16vec2(float16_t(16 * r + c0 + 2 * i), float16_t(16 * r + c0 + 2 * i + 1)));
    b[i] = packFloat2x16(f16vec2(float16_t(8 * (lane % 16) + 2 * i), float16_t(8 * (lane % 16) + 2 * i + 1)));
  }
  la[lane] = uvec4(a[0], a[1], a[2], a[3]);
  if (lane < 16) lb[lane] = uvec4(b[0], b[1], b[2], b[3]);
  barrier();
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> ma;
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 8> mb;
  coopMatLoadNV(ma, la, 0, 2, false);
  coopMatLoadNV(mb, lb, 0, 1, false);
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 8> mc = fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>(0.0);
  mc = coopMatMulAddNV(ma, mb, mc);
  const uint na = uint(ma.length()), nb = uint(mb.length());
  for (uint e = 0; e < 8; ++e) o[lane * 12 + e] = e < na ? uint(ma[e]) : 0xFFFFFFFFu;
  for (uint e = 0; e < 4; ++e) o[lane * 12 + 8 + e] = e < nb ? uint(mb[e]) : 0xFFFFFFFFu;
  o[385 + lane] = floatBitsToUint(mc[0]);
  if (lane == 0) o[384] = na | (nb << 8);
}
#else
shared float lmap[256];
void main() {
  const uint lane = gl_LocalInvocationID.x;
  for (uint i = lane; i < 256; i += 32) lmap[i] = float(i);
  barrier();
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> m;
  coopMatLoadNV(m, lmap, 0, 16, false);
  const uint n = uint(m.length());
  for (uint e = 0; e < 8; ++e) o[lane * 8 + e] = e < n ? uint(m[e]) : 0xFFFFFFFFu;
  if (lane == 0) o[256] = n;
}
#endif
