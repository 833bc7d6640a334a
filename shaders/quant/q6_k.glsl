// Q6_K (include/strata/quant/q6_k.hpp): 16 sub-blocks of 16, x = d*sc_j*(lo + 16*hi - 32).
// Element e = 128h + 32k + l: lo in ql[64h + 32(k&1) + l] (high nibble for k >= 2),
// hi in qh[32h + l] bits 2k..2k+1. Rows of a multiple of 8 blocks are stored in groups on the
// GPU (common.glsl w_field): ql, qh and scales are then 16-byte aligned.
uint q6k_ql(uint row_base, uint b) { return w_field(row_base, b, Q6_K_OFF_QL, Q6_K_SIZE_QL); }
uint q6k_qh(uint row_base, uint b) { return w_field(row_base, b, Q6_K_OFF_QH, Q6_K_SIZE_QH); }
uint q6k_sc(uint row_base, uint b) { return w_field(row_base, b, Q6_K_OFF_SCALES, Q6_K_SIZE_SCALES); }
uint q6k_d(uint row_base, uint b) { return w_field(row_base, b, Q6_K_OFF_D, Q6_K_SIZE_D); }

// Part c of a row is sub-block j = c % 16 of block c / 16.
void dequant_row16(uint row_base, uint c, out float v[16]) {
  const uint b = c >> 4, part = c & 15u;
  const uint e0 = 16 * part;
  const uint h = e0 >> 7, k = (e0 & 127u) >> 5, l0 = e0 & 31u;
  const float d = w_f16(q6k_d(row_base, b)) * float(w_i8(q6k_sc(row_base, b) + part));
  const uint ql = q6k_ql(row_base, b) + 64 * h + 32 * (k & 1u) + l0;
  const uint qh = q6k_qh(row_base, b) + 32 * h + l0;
  const uint lo_shift = k < 2 ? 0u : 4u, hi_shift = 2 * k;
  for (uint i = 0; i < 16; i += 4) {
    const uint lo = w_u32_f(ql + i) >> lo_shift;
    const uint hi = w_u32_f(qh + i) >> hi_shift;
    for (uint j = 0; j < 4; ++j) {
      const int q = int(((lo >> (8 * j)) & 0xFu) | (((hi >> (8 * j)) & 3u) << 4)) - 32;
      v[i + j] = d * float(q);
    }
  }
}

// Decode fast path: unit u of a row is block u/4, half h = (u%4)/2, lanes l in
// [16(u%2), 16(u%2)+16) of all four quarters k: xv[16k + i] is element 128h + 32k + 16(u%2) + i.
// It reads 16 bytes of ql from each of its two 32-byte halves, 16 of qh and 4 scales; Q6_K
// blocks (210 bytes) are only 2-byte aligned, hence 16-bit loads. As in Q4_K, scales and the
// -32 offset are factored out: d sc_k (sum q x - 32 sum x).
#define HAS_UNIT64 1
const uint UNIT64_RUNS = 4;
const uint UNIT64_GROUPS = 4;  // x sums per quarter k
uint unit64_run_start(uint u, uint k) { return 256 * (u >> 2) + 128 * ((u >> 1) & 1u) + 32 * k + 16 * (u & 1u); }
float q6k_code(uint v) { return uintBitsToFloat(v | 0x4B000000u) - 8388608.0; }
float dot64(uint row_base, uint u, float xv[64], float xs[4]) {
  const uint b = u >> 2, h = (u >> 1) & 1u, lh = 16 * (u & 1u);
  const uint ql = q6k_ql(row_base, b) + 64 * h + lh, qh = q6k_qh(row_base, b) + 32 * h + lh;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint i = 0; i < 16; i += 4) {
    const uint lo01 = w_u32_f(ql + i), lo23 = w_u32_f(ql + 32 + i), hi = w_u32_f(qh + i);
    for (uint b = 0; b < 4; ++b) {
      const uint a = (lo01 >> (8 * b)) & 0xFFu, c = (lo23 >> (8 * b)) & 0xFFu, e = (hi >> (8 * b)) & 0xFFu;
      acc[0] += q6k_code((a & 0xFu) | ((e & 3u) << 4)) * xv[i + b];
      acc[1] += q6k_code((c & 0xFu) | (((e >> 2) & 3u) << 4)) * xv[16 + i + b];
      acc[2] += q6k_code((a >> 4) | (((e >> 4) & 3u) << 4)) * xv[32 + i + b];
      acc[3] += q6k_code((c >> 4) | (((e >> 6) & 3u) << 4)) * xv[48 + i + b];
    }
  }
  const float d = w_f16(q6k_d(row_base, b));
  const uint sc = q6k_sc(row_base, b) + 8 * h + (u & 1u);
  float r = 0.0;
  for (uint k = 0; k < 4; ++k) r += (d * float(w_i8(sc + 2 * k))) * (acc[k] - 32.0 * xs[k]);
  return r;
}

#ifdef MMVQ
// Integer matvec unit (mmvq.glsl): the 64 elements of dot64's unit u (block u/4, half h, lanes
// l in [16(u%2), 16(u%2)+16) of the four quarters k): 16 bytes of ql from each 32-byte half,
// 16 of qh, the quarter scales sc[8h + u%2 + 2k] and d. In a grouped row these are three 16-byte
// loads and one 8-byte load; ggml's 210-byte blocks are only 2-byte aligned, so there the ranges
// come from aligned words (w_u128_2). Codes are lo | hi << 4 in 0..63: the -32 is applied
// through the activation sums, sum (q - 32) qx = sum q qx - 32 sum qx.
const uint MMVQ_UNIT = 64;
struct mmvq_w {
  uvec4 l01, l23, hh;
  uvec2 sc;
  uint d;
};
mmvq_w mmvq_load(uint row_base, uint u) {
  const uint b = u >> 2, h = (u >> 1) & 1u, lh = 16 * (u & 1u);
  const uint ql = q6k_ql(row_base, b) + 64 * h + lh, qh = q6k_qh(row_base, b) + 32 * h + lh;
  const uint sc = q6k_sc(row_base, b) + 8 * h, d = q6k_d(row_base, b);
  if (w_grouped) return mmvq_w(w128[ql >> 4], w128[(ql + 32) >> 4], w128[qh >> 4], uvec2(w32[sc >> 2], w32[(sc >> 2) + 1]), w_u16(d));
  return mmvq_w(w_u128_2(ql), w_u128_2(ql + 32), w_u128_2(qh), w_u64_2(sc), w_u16(d));
}
// mmvq.glsl's LAB bit 0: every loaded word folded together, so no load is dropped.
uint mmvq_lab(mmvq_w w) { return w.l01.x ^ w.l01.y ^ w.l01.z ^ w.l01.w ^ w.l23.x ^ w.l23.y ^ w.l23.z ^ w.l23.w ^ w.hh.x ^ w.hh.y ^ w.hh.z ^ w.hh.w ^ w.sc.x ^ w.sc.y ^ w.d; }
float mmvq_dot(mmvq_w w, uint u, uint qb, uint sb) {
  const uint b = u >> 2, h = (u >> 1) & 1u, lh = u & 1u;
  // Quarter k holds elements 128h + 32k + 16lh + i: half lh of 32-block 8b + 4h + k.
  const uint blk32 = 8 * b + 4 * h;
  const uint xi = qb + 2 * blk32 + lh;
  const uint M = 0x0F0F0F0Fu, M2 = 0x03030303u;
  ivec4 acc = ivec4(0);
  for (uint c = 0; c < 4; ++c) {
    const uint a = w.l01[c], e = w.l23[c], hb = w.hh[c];
    acc.x += dot4((a & M) | ((hb & M2) << 4), xq[xi][c]);
    acc.y += dot4((e & M) | (((hb >> 2) & M2) << 4), xq[xi + 2][c]);
    acc.z += dot4(((a >> 4) & M) | (((hb >> 4) & M2) << 4), xq[xi + 4][c]);
    acc.w += dot4(((e >> 4) & M) | (((hb >> 6) & M2) << 4), xq[xi + 6][c]);
  }
  float r = 0.0;
  for (uint k = 0; k < 4; ++k) {
    const vec4 s = xs[sb + blk32 + k];
    const uint sbyte = (w.sc[k >> 1] >> (16 * (k & 1u) + 8 * lh)) & 0xFFu;  // sc[2k + lh]
    const float part = s.x * float(acc[k]) - 32.0 * (lh == 0u ? s.y : s.z);
    r += float(int(sbyte << 24) >> 24) * part;
  }
  return unpackHalf2x16(w.d).x * r;
}
// Multi-token form (mmvq.glsl MMVQ_MT; see q4_k.glsl): the 6-bit codes assembled and the
// quarter scales times d once per row, the activations once per token.
#define HAS_MMVQ_PREP 1
struct mmvq_p {
  uvec4 c0, c1, c2, c3;  // quarters k = 0..3, 16 codes each
  vec4 f;                // d sc[2k + lh]
};
mmvq_p mmvq_prep(mmvq_w w, uint u) {
  const uint lh = u & 1u;
  const uint M = 0x0F0F0F0Fu, M2 = 0x03030303u;
  mmvq_p r;
  r.c0 = (w.l01 & M) | ((w.hh & M2) << 4);
  r.c1 = (w.l23 & M) | (((w.hh >> 2) & M2) << 4);
  r.c2 = ((w.l01 >> 4) & M) | (((w.hh >> 4) & M2) << 4);
  r.c3 = ((w.l23 >> 4) & M) | (((w.hh >> 6) & M2) << 4);
  const float d = unpackHalf2x16(w.d).x;
  [[unroll]] for (uint k = 0; k < 4; ++k) {
    const uint sbyte = (w.sc[k >> 1] >> (16 * (k & 1u) + 8 * lh)) & 0xFFu;
    r.f[k] = d * float(int(sbyte << 24) >> 24);
  }
  return r;
}
struct mmvq_a {
  uvec4 a0, a1, a2, a3;  // quarters k = 0..3
  vec4 s, m;             // the quarters' scales and 32 x their half's code sums
};
mmvq_a mmvq_act(uint u, uint qb, uint sb) {
  const uint b = u >> 2, h = (u >> 1) & 1u, lh = u & 1u;
  const uint blk32 = 8 * b + 4 * h;
  const uint xi = qb + 2 * blk32 + lh;
  mmvq_a a;
  a.a0 = xq[xi];
  a.a1 = xq[xi + 2];
  a.a2 = xq[xi + 4];
  a.a3 = xq[xi + 6];
  [[unroll]] for (uint k = 0; k < 4; ++k) {
    const vec4 s = xs[sb + blk32 + k];
    a.s[k] = s.x;
    a.m[k] = 32.0 * (lh == 0u ? s.y : s.z);
  }
  return a;
}
float mmvq_dot_p(mmvq_p w, mmvq_a a) {
  ivec4 acc = ivec4(0);
  [[unroll]] for (uint c = 0; c < 4; ++c) {
    acc.x += dot4(w.c0[c], a.a0[c]);
    acc.y += dot4(w.c1[c], a.a1[c]);
    acc.z += dot4(w.c2[c], a.a2[c]);
    acc.w += dot4(w.c3[c], a.a3[c]);
  }
  return dot(w.f, a.s * vec4(acc) - a.m);
}
#endif

#ifdef MM_REG
// mul_mm_reg.glsl's unit: elements 64q .. 64q+63 of block u/4 (q = u%4, h = q/2): element i has
// its low 4 bits in ql[64h + i] (the high nibble for odd q), its high 2 in qh[32h + i%32] bits
// 4(q&1) + 2(i/32), its scale in sc[4q + i/16]. A lane takes elements 8t .. 8t+7 and 32+8t ..
// 32+8t+7 of each of its rows: 16 ql bytes, the 8 qh bytes they share, scales 4q + t/2 and
// 4q + 2 + t/2; its quad's d sc come from one lane a row.
#define HAS_MMR_UNIT 1
struct mmr_raw {
  uvec2 l0, l1, h;
};
mmr_raw mmr_load(uint row_base, uint u, uint t) {
  const uint b = u >> 2, hh = (u >> 1) & 1u;
  const uint ql = q6k_ql(row_base, b) + 64 * hh + 8 * t, qh = q6k_qh(row_base, b) + 32 * hh + 8 * t;
  return mmr_raw(w_u64_f(ql), w_u64_f(ql + 32), w_u64_f(qh));
}
// d sc_4q+i, i = 0..3, as the f16 pairs (0, 1), (2, 3).
uvec3 mmr_scales(uint row_base, uint u) {
  const uint b = u >> 2;
  const uint sc = w_u32_f(q6k_sc(row_base, b) + 4 * (u & 3u));
  const float d = w_f16(q6k_d(row_base, b));
  return uvec3(packHalf2x16(vec2(d * float(int(sc << 24) >> 24), d * float(int(sc << 16) >> 24))),
               packHalf2x16(vec2(d * float(int(sc << 8) >> 24), d * float(int(sc) >> 24))), 0u);
}
// The lane's 16 elements as f16 pairs e[2 s + p]: elements 32 (s/2) + 8t + 4 (s%2) + p + {0, 2}.
// A code OR 0x6400 is the half 1024 + q, minus 1056 exactly q - 32, times d sc (rounded to f16
// once before): within ~2 f16 rounding steps of dequant16's d sc (q - 32) rounded once.
void mmr_unit(mmr_raw c, uvec3 k, uint u, uint t, out uint e[8]) {
  const uint ns = 4 * (u & 1u);
  const f16vec2 s01 = unpackFloat2x16(k.x), s23 = unpackFloat2x16(k.y);
  const float16_t s_lo = (t & 2u) != 0 ? s01.y : s01.x, s_hi = (t & 2u) != 0 ? s23.y : s23.x;
  [[unroll]] for (uint s = 0; s < 4; ++s) {
    const uint hf = s >> 1;
    const uvec2 l = hf != 0 ? c.l1 : c.l0;
    const uint lw = (s & 1u) != 0 ? l.y : l.x, hw = (s & 1u) != 0 ? c.h.y : c.h.x;
    const f16vec2 sc = f16vec2(hf != 0 ? s_hi : s_lo);
    [[unroll]] for (uint pp = 0; pp < 2; ++pp) {
      const uint lo = (lw >> (8 * pp + ns)) & 0x000F000Fu;
      const uint hi = ((hw >> (8 * pp + ns + 2 * hf)) & 0x00030003u) << 4;
      const f16vec2 q = unpackFloat2x16(lo | hi | 0x64006400u) - f16vec2(1056.0hf);
      e[2 * s + pp] = packFloat2x16(q * sc);
    }
  }
}
#endif

#if defined(MM_SMALL) || defined(MMQ)
// mul_mm_small.glsl's unit: the 64 contiguous elements 64q .. 64q+63 of block u/4 (q = u%4),
// i.e. quarters k0 = 2(q&1) and k0+1 of half h = q/2: 64 bytes of ql (low nibbles for even q,
// high for odd), the 32 qh bytes they share and 4 scales; loaded ahead (16-byte loads in a
// grouped row, else 16-bit-aligned words), expanded as dequant_row16 rounds them (d*sc in f32,
// times q - 32).
#define HAS_MMS_UNIT 1
struct mms_raw {
  uvec4 l0, l1, l2, l3, h0, h1;
  uint sc, d;
};
mms_raw mms_load(uint row_base, uint u) {
  const uint b = u >> 2, q = u & 3u, h = q >> 1;
  const uint ql = q6k_ql(row_base, b) + 64 * h, qh = q6k_qh(row_base, b) + 32 * h;
  return mms_raw(w_u128_f(ql), w_u128_f(ql + 16), w_u128_f(ql + 32), w_u128_f(ql + 48), w_u128_f(qh),
                 w_u128_f(qh + 16), w_u32_f(q6k_sc(row_base, b) + 4 * q), w_u16(q6k_d(row_base, b)));
}
float mms_q6(uint lw, uint hw, uint b, uint ns, uint hs, float s) {
  return s * float(int(((lw >> (8 * b + ns)) & 0xFu) | (((hw >> (8 * b + hs)) & 3u) << 4)) - 32);
}
uint mms_q6_pair(uint lw, uint hw, uint b, uint ns, uint hs, float s) {
  return packHalf2x16(vec2(mms_q6(lw, hw, b, ns, hs, s), mms_q6(lw, hw, b + 1, ns, hs, s)));
}
// Part p of the unit for a pair of threads (mul_mm_f16 QW2): elements 16p .. 16p+15 of each half
// (sub-blocks 4q+2hf+p): 16 ql bytes per half, the 16 qh bytes they share, the two scales (byte
// hf of sc), d.
struct mms_raw2 {
  uvec4 la, lb, h;
  uint sc, d;
};
mms_raw2 mms_load2(uint row_base, uint u, uint part) {
  const uint b = u >> 2, q = u & 3u, hh = q >> 1;
  const uint ql = q6k_ql(row_base, b) + 64 * hh + 16 * part, qh = q6k_qh(row_base, b) + 32 * hh + 16 * part;
  const uint sc4 = w_u32_f(q6k_sc(row_base, b) + 4 * q) >> (8 * part);  // bytes p and 2 + p
  return mms_raw2(w_u128_f(ql), w_u128_f(ql + 32), w_u128_f(qh), (sc4 & 0xFFu) | ((sc4 >> 8) & 0xFF00u), w_u16(q6k_d(row_base, b)));
}
void mms_expand2(mms_raw2 r, uint u, uint hf, out uvec4 h[2]) {
  const uint q = u & 3u, ns = 4 * (q & 1u), hs = 4 * (q & 1u) + 2 * hf;
  const float s = unpackHalf2x16(r.d).x * float(int(r.sc << (24 - 8 * hf)) >> 24);
  const uvec4 l = hf == 0 ? r.la : r.lb;
  h[0] = uvec4(mms_q6_pair(l.x, r.h.x, 0, ns, hs, s), mms_q6_pair(l.x, r.h.x, 2, ns, hs, s),
               mms_q6_pair(l.y, r.h.y, 0, ns, hs, s), mms_q6_pair(l.y, r.h.y, 2, ns, hs, s));
  h[1] = uvec4(mms_q6_pair(l.z, r.h.z, 0, ns, hs, s), mms_q6_pair(l.z, r.h.z, 2, ns, hs, s),
               mms_q6_pair(l.w, r.h.w, 0, ns, hs, s), mms_q6_pair(l.w, r.h.w, 2, ns, hs, s));
}
// Half hf of the unit: quarter k0 + hf (elements 32hf .. 32hf+31), sub-blocks 4q+2hf, 4q+2hf+1.
void mms_expand_half(mms_raw r, uint u, uint hf, out uvec4 h[4]) {
  const uint q = u & 3u, ns = 4 * (q & 1u), hs = 4 * (q & 1u) + 2 * hf;  // nibble and qh bit shifts
  const float d = unpackHalf2x16(r.d).x;
  const uint sc = r.sc >> (16 * hf);
  const float s0 = d * float(int(sc << 24) >> 24), s1 = d * float(int(sc << 16) >> 24);
  const uint l[8] = hf == 0 ? uint[8](r.l0.x, r.l0.y, r.l0.z, r.l0.w, r.l1.x, r.l1.y, r.l1.z, r.l1.w)
                            : uint[8](r.l2.x, r.l2.y, r.l2.z, r.l2.w, r.l3.x, r.l3.y, r.l3.z, r.l3.w);
  const uint hq[8] = uint[8](r.h0.x, r.h0.y, r.h0.z, r.h0.w, r.h1.x, r.h1.y, r.h1.z, r.h1.w);
  [[unroll]] for (uint c = 0; c < 4; ++c) {  // elements 8c .. 8c+7 of the quarter: words 2c, 2c+1
    const float s = c < 2 ? s0 : s1;
    h[c] = uvec4(mms_q6_pair(l[2 * c], hq[2 * c], 0, ns, hs, s), mms_q6_pair(l[2 * c], hq[2 * c], 2, ns, hs, s),
                 mms_q6_pair(l[2 * c + 1], hq[2 * c + 1], 0, ns, hs, s), mms_q6_pair(l[2 * c + 1], hq[2 * c + 1], 2, ns, hs, s));
  }
}
#endif

#ifdef MMQ
// mul_mmq.glsl's unit (int8 tensor cores): mul_mm_small's 64 contiguous elements as signed int8
// codes q - 32 (c[i]: elements 16i .. 16i+15) and f = d sc of each 16-element sub-block. A scale
// covers 16 elements, half an int8 product's K of 32: MMQ_G16 makes the kernel multiply each half
// separately (its token codes beside 16 zeros).
#define HAS_MMQ_UNIT 1
#define MMQ_G16 1
#define mmq_raw mms_raw
mmq_raw mmq_load(uint row_base, uint u) { return mms_load(row_base, u); }
mmq_raw mmq_zero() { return mms_raw(uvec4(0), uvec4(0), uvec4(0), uvec4(0), uvec4(0), uvec4(0), 0u, 0u); }
// Codes lo | hi << 4 (0..63) minus 32 per byte: flipping bit 5 gives the 6-bit two's complement,
// whose sign bit 5 is then copied into bits 6 and 7.
uvec4 q6k_codes(uvec4 l, uvec4 hq, uint ns, uint hs) {
  const uvec4 t = (((l >> ns) & 0x0F0F0F0Fu) | (((hq >> hs) & 0x03030303u) << 4)) ^ 0x20202020u;
  return t | ((t & 0x20202020u) * 6u);
}
void mmq_unpack(mmq_raw r, uint u, out uvec4 c[4], out vec4 f) {
  const uint ns = 4 * (u & 1u);  // quarters k0 = 2(q&1), k0+1: the nibble and qh bit shifts (mms_expand_half)
  c[0] = q6k_codes(r.l0, r.h0, ns, ns);
  c[1] = q6k_codes(r.l1, r.h1, ns, ns);
  c[2] = q6k_codes(r.l2, r.h0, ns, ns + 2);
  c[3] = q6k_codes(r.l3, r.h1, ns, ns + 2);
  f = unpackHalf2x16(r.d).x * vec4(float(int(r.sc << 24) >> 24), float(int(r.sc << 16) >> 24), float(int(r.sc << 8) >> 24),
                                   float(int(r.sc) >> 24));
}
#endif
