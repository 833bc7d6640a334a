// Q4_K (include/strata/quant/q4_k.hpp): 8 sub-blocks of 32, x = d*sc_j*q - dmin*m_j with
// 6-bit sc/m packed in 12 bytes. Part p covers elements 16p..16p+15 of sub-block j = p/2.
// `precise`: d1*q - m1 is rounded twice like the C++ reference (no FMA), so get_rows is bit-exact.
void dequant16(uint blk, uint part, out float v[16]) {
  const uint j = part >> 1;
  const uint s = blk + Q4_K_OFF_SCALES;
  uint sc, m;
  if (j < 4) {
    sc = w_u8(s + j) & 63u;
    m = w_u8(s + j + 4) & 63u;
  } else {
    sc = (w_u8(s + j + 4) & 0xFu) | ((w_u8(s + j - 4) >> 6) << 4);
    m = (w_u8(s + j + 4) >> 4) | ((w_u8(s + j) >> 6) << 4);
  }
  const float d1 = w_f16(blk + Q4_K_OFF_D) * float(sc);
  const float m1 = w_f16(blk + Q4_K_OFF_DMIN) * float(m);
  // Element e = 32j + 16(part&1) + i lives in qs[32(j/2) + e%32], low nibble for even j.
  const uint q = blk + Q4_K_OFF_QS + 32 * (j >> 1) + 16 * (part & 1);
  const uint shift = 4 * (j & 1);
  for (uint i = 0; i < 16; i += 4) {
    const uint w = w32[(q + i) >> 2] >> shift;
    for (uint b = 0; b < 4; ++b) {
      precise float y = d1 * float((w >> (8 * b)) & 0xFu) - m1;
      v[i + b] = y;
    }
  }
}

// Decode fast path: a 64-element unit u of a row (sub-blocks 2(u%4) and 2(u%4)+1 of block u/4)
// from two 16-byte loads of qs (144-byte blocks keep qs 16-byte aligned) and three words of
// scales; its elements are contiguous. dot64 factors the scales out of the sums,
// sum_i (d_j q_i - m_j) x_i = d_j sum_i q_i x_i - m_j sum_i x_i, so each element costs one
// exact int->float (magic-number OR + subtract, full rate unlike I2F) and one FMA.
#define HAS_UNIT64 1
const uint UNIT64_RUNS = 1;
const uint UNIT64_GROUPS = 2;  // x sums the caller provides: elements 0-31, 32-63
uint unit64_run_start(uint u, uint k) { return 64 * u; }
float q4k_nib(uint w, uint shift) { return uintBitsToFloat(((w >> shift) & 0xFu) | 0x4B000000u) - 8388608.0; }
float dot64(uint row_base, uint u, float xv[64], float xs[4]) {
  const uint blk = row_base + (u >> 2) * BLOCK_BYTES, pair = u & 3u;
  const vec2 dm = unpackHalf2x16(w32[(blk + Q4_K_OFF_D) >> 2]);  // d, dmin (adjacent halves)
  const uint s0 = w32[(blk + Q4_K_OFF_SCALES) >> 2], s1 = w32[(blk + Q4_K_OFF_SCALES + 4) >> 2],
             s2 = w32[(blk + Q4_K_OFF_SCALES + 8) >> 2];
  uint sc[2], mn[2];
  for (uint h = 0; h < 2; ++h) {
    const uint j = 2 * pair + h;
    // bytes j, j+4, j-4 of the 12 scale bytes (see detail/k_scale_min.hpp)
    const uint bj = j < 4 ? (s0 >> (8 * j)) & 0xFFu : (s1 >> (8 * (j - 4))) & 0xFFu;
    const uint bj4 = j < 4 ? (s1 >> (8 * j)) & 0xFFu : (s2 >> (8 * (j - 4))) & 0xFFu;
    if (j < 4) {
      sc[h] = bj & 63u;
      mn[h] = bj4 & 63u;
    } else {
      const uint bjm4 = (s0 >> (8 * (j - 4))) & 0xFFu;
      sc[h] = (bj4 & 0xFu) | ((bjm4 >> 6) << 4);
      mn[h] = (bj4 >> 4) | ((bj >> 6) << 4);
    }
  }
  const uint q = (blk + Q4_K_OFF_QS + 32 * pair) >> 4;
  float lo = 0.0, hi = 0.0;
  for (uint h = 0; h < 2; ++h) {
    const uvec4 w = w128[q + h];
    for (uint c = 0; c < 4; ++c)
      for (uint b = 0; b < 4; ++b) {
        const uint i = 16 * h + 4 * c + b;
        lo += q4k_nib(w[c], 8 * b) * xv[i];
        hi += q4k_nib(w[c], 8 * b + 4) * xv[32 + i];
      }
  }
  return (dm.x * float(sc[0])) * lo - (dm.y * float(mn[0])) * xs[0] + (dm.x * float(sc[1])) * hi -
         (dm.y * float(mn[1])) * xs[1];
}

#if defined(MMVQ) || defined(MM_SMALL) || defined(MMQ) || defined(MM_REG)
// The 64-element unit of the integer matvec, mul_mm_small, mul_mm_reg and mul_mmq: pair j = u%4 of block u/4 = 32
// bytes of qs holding sub-block 2j in the low nibbles and 2j+1 in the high ones; the 16-byte
// block header (d, dmin, 12 scale bytes) is one aligned load (144-byte blocks keep every field
// 16-byte aligned), so a unit is three 16-byte loads.
struct q4k_unit {
  uvec4 hdr, q0, q1;
};
q4k_unit q4k_unit_load(uint row_base, uint u) {
  const uint blk = (row_base + (u >> 2) * BLOCK_BYTES) >> 4;
  const uint q = blk + 1 + 2 * (u & 3u);  // qs starts 16 bytes into the block
  return q4k_unit(w128[blk], w128[q], w128[q + 1]);
}
// 6-bit scales and mins of sub-blocks 2j (low byte) and 2j+1 (next byte) (detail/k_scale_min.hpp):
// bytes 2j', 2j'+1 of each 4-byte group, j' = j & 1; the upper two pairs borrow their top bits
// from bytes 0-7.
void q4k_unit_scales(uvec4 hdr, uint j, out uint sc, out uint mn) {
  const uint sh = 16 * (j & 1u);
  if (j < 2) {
    sc = (hdr.y >> sh) & 0x3F3Fu;
    mn = (hdr.z >> sh) & 0x3F3Fu;
  } else {
    const uint h = hdr.w >> sh;
    sc = (h & 0x0F0Fu) | (((hdr.y >> sh) >> 2) & 0x3030u);
    mn = ((h >> 4) & 0x0F0Fu) | (((hdr.z >> sh) >> 2) & 0x3030u);
  }
}
#endif

#ifdef MMVQ
// Integer matvec unit (mmvq.glsl), per sub-block:
// sum_i (d sc q_i - dmin m) x_i = d sc dx sum_i q_i qx_i - dmin m (dx sum_i qx_i).
const uint MMVQ_UNIT = 64;
#define mmvq_w q4k_unit
mmvq_w mmvq_load(uint row_base, uint u) { return q4k_unit_load(row_base, u); }
// mmvq.glsl's LAB bit 0: every loaded word folded together, so no load is dropped.
uint mmvq_lab(mmvq_w w) { return w.hdr.x ^ w.hdr.y ^ w.hdr.z ^ w.hdr.w ^ w.q0.x ^ w.q0.y ^ w.q0.z ^ w.q0.w ^ w.q1.x ^ w.q1.y ^ w.q1.z ^ w.q1.w; }
float mmvq_dot(mmvq_w w, uint u, uint qb, uint sb) {
  const uint j = u & 3u, b = u >> 2;
  const uint xi = qb + 16 * b + 4 * j;
  const uvec4 a0 = xq[xi], a1 = xq[xi + 1], a2 = xq[xi + 2], a3 = xq[xi + 3];
  const vec4 s_lo = xs[sb + 8 * b + 2 * j], s_hi = xs[sb + 8 * b + 2 * j + 1];
  const uint M = 0x0F0F0F0Fu;
  int lo = dot4(w.q0.x & M, a0.x) + dot4(w.q0.y & M, a0.y) + dot4(w.q0.z & M, a0.z) + dot4(w.q0.w & M, a0.w) +
           dot4(w.q1.x & M, a1.x) + dot4(w.q1.y & M, a1.y) + dot4(w.q1.z & M, a1.z) + dot4(w.q1.w & M, a1.w);
  int hi = dot4((w.q0.x >> 4) & M, a2.x) + dot4((w.q0.y >> 4) & M, a2.y) + dot4((w.q0.z >> 4) & M, a2.z) +
           dot4((w.q0.w >> 4) & M, a2.w) + dot4((w.q1.x >> 4) & M, a3.x) + dot4((w.q1.y >> 4) & M, a3.y) +
           dot4((w.q1.z >> 4) & M, a3.z) + dot4((w.q1.w >> 4) & M, a3.w);
  uint sc, mn;
  q4k_unit_scales(w.hdr, j, sc, mn);
  const vec2 dm = unpackHalf2x16(w.hdr.x);
  return dm.x * (float(sc & 0xFFu) * s_lo.x * float(lo) + float((sc >> 8) & 0xFFu) * s_hi.x * float(hi)) -
         dm.y * (float(mn & 0xFFu) * s_lo.w + float((mn >> 8) & 0xFFu) * s_hi.w);
}
// Multi-token form (mmvq.glsl MMVQ_MT, steps of 2-8 tokens): a row's unit is unpacked once, its
// nibbles masked and its scales folded (mmvq_prep), a token's activations are loaded once for
// every row (mmvq_act), and each (row, token) pair costs only its 16 dot products and the scale
// terms (mmvq_dot_p). Same sums as mmvq_dot, the scale products associated differently.
#define HAS_MMVQ_PREP 1
struct mmvq_p {
  uvec4 lo0, lo1, hi0, hi1;  // sub-block 2j's codes (low nibbles), 2j+1's (high nibbles)
  vec4 f;                    // d sc_2j, d sc_2j+1, dmin m_2j, dmin m_2j+1
};
mmvq_p mmvq_prep(mmvq_w w, uint u) {
  const uint M = 0x0F0F0F0Fu;
  uint sc, mn;
  q4k_unit_scales(w.hdr, u & 3u, sc, mn);
  const vec2 dm = unpackHalf2x16(w.hdr.x);
  return mmvq_p(w.q0 & M, w.q1 & M, (w.q0 >> 4) & M, (w.q1 >> 4) & M,
                vec4(dm.x * float(sc & 0xFFu), dm.x * float((sc >> 8) & 0xFFu), dm.y * float(mn & 0xFFu),
                     dm.y * float((mn >> 8) & 0xFFu)));
}
struct mmvq_a {
  uvec4 a0, a1, a2, a3;
  vec4 s;  // the two 32-blocks' scales, then their code sums
};
mmvq_a mmvq_act(uint u, uint qb, uint sb) {
  const uint j = u & 3u, b = u >> 2;
  const uint xi = qb + 16 * b + 4 * j;
  const vec4 s_lo = xs[sb + 8 * b + 2 * j], s_hi = xs[sb + 8 * b + 2 * j + 1];
  return mmvq_a(xq[xi], xq[xi + 1], xq[xi + 2], xq[xi + 3], vec4(s_lo.x, s_hi.x, s_lo.w, s_hi.w));
}
float mmvq_dot_p(mmvq_p w, mmvq_a a) {
  const int lo = dot4(w.lo0.x, a.a0.x) + dot4(w.lo0.y, a.a0.y) + dot4(w.lo0.z, a.a0.z) + dot4(w.lo0.w, a.a0.w) +
                 dot4(w.lo1.x, a.a1.x) + dot4(w.lo1.y, a.a1.y) + dot4(w.lo1.z, a.a1.z) + dot4(w.lo1.w, a.a1.w);
  const int hi = dot4(w.hi0.x, a.a2.x) + dot4(w.hi0.y, a.a2.y) + dot4(w.hi0.z, a.a2.z) + dot4(w.hi0.w, a.a2.w) +
                 dot4(w.hi1.x, a.a3.x) + dot4(w.hi1.y, a.a3.y) + dot4(w.hi1.z, a.a3.z) + dot4(w.hi1.w, a.a3.w);
  return w.f.x * a.s.x * float(lo) + w.f.y * a.s.y * float(hi) - (w.f.z * a.s.z + w.f.w * a.s.w);
}
#endif

#if (defined(MM_SMALL) && defined(MMS_H2)) || defined(MM_REG)
// Q4_K's expansion in f16x2 arithmetic (mul_mm_small MMS_H2, mul_mm_reg): a nibble OR 0x6400 is
// the half 1024 + q; fma(1024 + q, sc, -1024 sc) = q sc exactly (at most 945); then
// fma(q sc, d, -m) rounds once. Only m = dmin * m_j is rounded to f16 first, so a weight is within
// ~2 f16 rounding steps of dequant16's (exact, then rounded once), in ~2.5 instructions an element
// against ~5.5 for mms_pair.
struct mms_h2_scales {
  f16vec2 sc, sc_off, d, m;  // sc, -1024 sc, d, -dmin m_j
};
// The nibbles at bits 0 and 16 of x as the f16 pair (1024 + q0, 1024 + q1).
uint h2_nibbles(uint x) { return (x & 0x000F000Fu) | 0x64006400u; }
uint mms_h2_pair(uint p, mms_h2_scales k) {
  return packFloat2x16(fma(fma(unpackFloat2x16(p), k.sc, k.sc_off), k.d, k.m));
}
#endif

#ifdef MM_SMALL
// mul_mm_small.glsl's unit: the 64 elements of pair j = u%4 of block u/4 of a row (sub-blocks
// 2j, 2j+1), as three aligned 16-byte loads (block header, 32 bytes of qs) that the kernel issues
// one unit ahead, then expanded in registers: elements 8c .. 8c+7 as f16 in h[c], rounded as
// dequant16 rounds them (d*sc*q - dmin*m in f32 without FMA, then to f16).
#define HAS_MMS_UNIT 1
#define mms_raw q4k_unit
mms_raw mms_load(uint row_base, uint u) { return q4k_unit_load(row_base, u); }
uint mms_pair(uint w, uint shift, float d, float m) {
  precise float a = d * q4k_nib(w, shift) - m;
  precise float b = d * q4k_nib(w, shift + 8) - m;
  return packHalf2x16(vec2(a, b));
}
#ifdef MMS_H2
mms_h2_scales mms_h2_make(float d, uint sc, float m) {
  const float16_t s = float16_t(sc);
  return mms_h2_scales(f16vec2(s), f16vec2(-1024.0hf * s), f16vec2(float16_t(d)), f16vec2(-float16_t(m)));
}
// The four nibbles at bits nib, nib+8, nib+16, nib+24 of w as two f16 pairs (elements 0-1, 2-3).
void mms_quad(uint w, uint nib, mms_h2_scales k, out uint p01, out uint p23) {
  const uint x = w >> nib;
  const uint lo = h2_nibbles(x);       // elements 0 and 2
  const uint hi = h2_nibbles(x >> 8);  // elements 1 and 3
  p01 = mms_h2_pair((lo & 0xFFFFu) | (hi << 16), k);
  p23 = mms_h2_pair((lo >> 16) | (hi & 0xFFFF0000u), k);
}
#endif
// Part p of the unit for a pair of threads (mul_mm_f16 QW2): elements 16p .. 16p+15 of each half,
// from the block header and the 16 qs bytes they share (two 16-byte loads instead of three).
struct mms_raw2 {
  uvec4 hdr, q;
};
mms_raw2 mms_load2(uint row_base, uint u, uint part) {
  const uint blk = (row_base + (u >> 2) * BLOCK_BYTES) >> 4;
  return mms_raw2(w128[blk], w128[blk + 1 + 2 * (u & 3u) + part]);
}
void mms_expand2(mms_raw2 r, uint u, uint hf, out uvec4 h[2]) {
  uint sc, mn;
  q4k_unit_scales(r.hdr, u & 3u, sc, mn);
  const vec2 dm = unpackHalf2x16(r.hdr.x);
  const uint sh = 8 * hf, nib = 4 * hf;
#ifdef MMS_H2
  const mms_h2_scales k = mms_h2_make(dm.x, (sc >> sh) & 0xFFu, dm.y * float((mn >> sh) & 0xFFu));
  mms_quad(r.q.x, nib, k, h[0].x, h[0].y);
  mms_quad(r.q.y, nib, k, h[0].z, h[0].w);
  mms_quad(r.q.z, nib, k, h[1].x, h[1].y);
  mms_quad(r.q.w, nib, k, h[1].z, h[1].w);
#else
  const float d = dm.x * float((sc >> sh) & 0xFFu), m = dm.y * float((mn >> sh) & 0xFFu);
  h[0] = uvec4(mms_pair(r.q.x, nib, d, m), mms_pair(r.q.x, nib + 16, d, m), mms_pair(r.q.y, nib, d, m), mms_pair(r.q.y, nib + 16, d, m));
  h[1] = uvec4(mms_pair(r.q.z, nib, d, m), mms_pair(r.q.z, nib + 16, d, m), mms_pair(r.q.w, nib, d, m), mms_pair(r.q.w, nib + 16, d, m));
#endif
}
// Half hf of the unit (elements 32hf .. 32hf+31 = sub-block 2j+hf): element i of sub-block 2j is
// the low nibble of qs byte i, of 2j+1 the high nibble.
void mms_expand_half(mms_raw r, uint u, uint hf, out uvec4 h[4]) {
  uint sc, mn;
  q4k_unit_scales(r.hdr, u & 3u, sc, mn);
  const vec2 dm = unpackHalf2x16(r.hdr.x);
  const uint sh = 8 * hf, nib = 4 * hf;
  const uint qw[8] = uint[8](r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w);
#ifdef MMS_H2
  const mms_h2_scales k = mms_h2_make(dm.x, (sc >> sh) & 0xFFu, dm.y * float((mn >> sh) & 0xFFu));
  [[unroll]] for (uint c = 0; c < 4; ++c) {
    mms_quad(qw[2 * c], nib, k, h[c].x, h[c].y);
    mms_quad(qw[2 * c + 1], nib, k, h[c].z, h[c].w);
  }
#else
  const float d = dm.x * float((sc >> sh) & 0xFFu), m = dm.y * float((mn >> sh) & 0xFFu);
  [[unroll]] for (uint c = 0; c < 4; ++c)
    h[c] = uvec4(mms_pair(qw[2 * c], nib, d, m), mms_pair(qw[2 * c], nib + 16, d, m), mms_pair(qw[2 * c + 1], nib, d, m),
                 mms_pair(qw[2 * c + 1], nib + 16, d, m));
#endif
}
#endif

#ifdef MM_REG
// mul_mm_reg.glsl's unit: the 64 elements of pair j = u%4 of block u/4 of a row (sub-block 2j in
// the low nibbles of its 32 qs bytes, 2j+1 in the high ones). A lane takes bytes 8t .. 8t+7 (both
// nibbles: 16 elements) of each of its rows; its quad's scales come from one lane a row.
#define HAS_MMR_UNIT 1
#define mmr_raw uvec2
mmr_raw mmr_load(uint row_base, uint u, uint t) {
  return w64[((row_base + (u >> 2) * BLOCK_BYTES) >> 3) + 2 + 4 * (u & 3u) + t];
}
// (sc_2j, sc_2j+1), -(dmin m_2j, dmin m_2j+1) and (d, d) as f16 pairs.
uvec3 mmr_scales(uint row_base, uint u) {
  const uvec4 hdr = w128[(row_base + (u >> 2) * BLOCK_BYTES) >> 4];
  uint sc, mn;
  q4k_unit_scales(hdr, u & 3u, sc, mn);
  const vec2 dm = unpackHalf2x16(hdr.x);
  return uvec3(packFloat2x16(f16vec2(float16_t(sc & 0xFFu), float16_t((sc >> 8) & 0xFFu))),
               packFloat2x16(-f16vec2(vec2(dm.y * float(mn & 0xFFu), dm.y * float((mn >> 8) & 0xFFu)))),
               packFloat2x16(f16vec2(float16_t(dm.x))));
}
// The lane's 16 elements as f16 pairs e[2 s + p] (s = 0..3, p = 0, 1): the elements at bytes
// 4 (s%2) + p and 4 (s%2) + p + 2 of its 8, nibble s/2, expanded as mul_mm_small's MMS_H2.
void mmr_unit(mmr_raw c, uvec3 k, uint u, uint t, out uint e[8]) {
  const f16vec2 sc = unpackFloat2x16(k.x), m = unpackFloat2x16(k.y), d = unpackFloat2x16(k.z);
  [[unroll]] for (uint s = 0; s < 4; ++s) {
    const uint w = (s & 1u) != 0 ? c.y : c.x, hf = s >> 1;
    const mms_h2_scales k2 = mms_h2_scales(f16vec2(sc[hf]), f16vec2(-1024.0hf * sc[hf]), d, f16vec2(m[hf]));
    [[unroll]] for (uint pp = 0; pp < 2; ++pp) e[2 * s + pp] = mms_h2_pair(h2_nibbles(w >> (4 * hf + 8 * pp)), k2);
  }
}
#endif

#ifdef MMQ
// mul_mmq.glsl's unit (int8 tensor-core products): the 64 elements of pair j = u%4 of block u/4
// as the int8 codes of sub-block 2j (c[0], c[1]: 32 bytes, low nibbles) and 2j+1 (c[2], c[3]:
// high nibbles), and f = (d sc_2j, d sc_2j+1, dmin m_2j, dmin m_2j+1): a sub-block's sum is
// f.x dx sum_i q_i qx_i - f.z (dx sum_i qx_i), as the integer matvec factors it.
#define HAS_MMQ_UNIT 1
#define mmq_raw q4k_unit
mmq_raw mmq_load(uint row_base, uint u) { return q4k_unit_load(row_base, u); }
mmq_raw mmq_zero() { return q4k_unit(uvec4(0), uvec4(0), uvec4(0)); }
void mmq_unpack(mmq_raw r, uint u, out uvec4 c[4], out vec4 f) {
  const uint M = 0x0F0F0F0Fu;
  c[0] = r.q0 & M;
  c[1] = r.q1 & M;
  c[2] = (r.q0 >> 4) & M;
  c[3] = (r.q1 >> 4) & M;
  uint sc, mn;
  q4k_unit_scales(r.hdr, u & 3u, sc, mn);
  const vec2 dm = unpackHalf2x16(r.hdr.x);
  f = vec4(dm.x * float(sc & 0xFFu), dm.x * float((sc >> 8) & 0xFFu), dm.y * float(mn & 0xFFu),
           dm.y * float((mn >> 8) & 0xFFu));
}
#endif
