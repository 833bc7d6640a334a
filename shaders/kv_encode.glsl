// Appending head vectors to a cache with a compressed side, shared by kv_store_q.glsl and
// attn_prep.glsl's compressed-cache form (included after kv_codec.glsl when a request defines
// KV_ENCODE): the cache, ring and step buffers at the bindings both use, the encoding of
// kernels::cpu::kv_codec::encode (TurboQuant: 3-round randomized Hadamard, per-segment norm,
// nearest Lloyd-Max cell, norm-corrected fp16 scale, bit planes of turboquant/block.hpp; q8_0:
// ggml's reference rounding), and with KV_RING the f16 copy to the full-precision window's ring
// (row seq·ring_rows + pos mod ring_rows, tagged with pos). The including shader defines
// src_at(side, i): element i of the step's K (side 0) or V (side 1) values.
layout(binding = 5, std430) writeonly buffer Kc8 { uint8_t kc8[]; };
layout(binding = 5, std430) writeonly buffer Kc16 { uint16_t kc16[]; };
layout(binding = 5, std430) writeonly buffer Kc32 { float kc32[]; };
layout(binding = 6, std430) writeonly buffer Vc8 { uint8_t vc8[]; };
layout(binding = 6, std430) writeonly buffer Vc16 { uint16_t vc16[]; };
layout(binding = 6, std430) writeonly buffer Vc32 { float vc32[]; };
layout(binding = 7, std430) readonly buffer Slots { uint slots[]; };
layout(binding = 8, std430) readonly buffer Pos { int pos[]; };
layout(binding = 10, std430) writeonly buffer Kring { uint16_t kring[]; };
layout(binding = 11, std430) writeonly buffer Vring { uint16_t vring[]; };
layout(binding = 12, std430) writeonly buffer Tags { uint tags[]; };
layout(binding = 13, std430) readonly buffer SeqRow { uint seq_row[]; };

float src_at(uint side, uint i);

void put_u8(uint side, uint i, uint v) {
  if (side == 0u) kc8[i] = uint8_t(v);
  else vc8[i] = uint8_t(v);
}
void put_u16(uint side, uint i, uint v) {
  if (side == 0u) kc16[i] = uint16_t(v);
  else vc16[i] = uint16_t(v);
}
void put_f32(uint side, uint i, float v) {
  if (side == 0u) kc32[i] = v;
  else vc32[i] = v;
}

#if KV_HAS_TQ
// (hi, lo) += a·b without rounding error beyond the float-float format (the CPU sums in double).
void ff_add_sq(inout float hi, inout float lo, float a, float b) {
  precise float prod = a * b;
  precise float perr = fma(a, b, -prod);
  precise float t = hi + prod;
  precise float bb = t - hi;
  precise float e = (hi - (t - bb)) + (prod - bb);
  hi = t;
  lo += e + perr;
}
// Float-float a + b (two-sum of the high parts, the low parts added, renormalized).
vec2 ff_add(vec2 a, vec2 b) {
  precise float s = a.x + b.x;
  precise float bb = s - a.x;
  precise float e = ((a.x - (s - bb)) + (b.x - bb)) + (a.y + b.y);
  precise float hi = s + e;
  precise float lo = e - (hi - s);
  return vec2(hi, lo);
}
// float(sqrt(hi + lo)), one Newton correction of the float root.
float ff_sqrt(float hi, float lo) {
  if (hi <= 0.0) return 0.0;
  const float s0 = sqrt(hi);
  precise float r = fma(-s0, s0, hi) + lo;
  return s0 + r / (2.0 * s0);
}

// The TurboQuant encoder in registers (tq_encode_pair below): K and V at once, each held by
// TQ_TPV threads, 4 elements a thread (kv_codec.glsl's register layout: threads [0, TQ_TPV) K,
// [TQ_TPV, 2·TQ_TPV) V, the rest idle). The rotation and the segment sums exchange through
// subgroup shuffles (no barriers on a 32-wide subgroup), the cells are found against the
// boundaries as compile-time constants, and the planes are written from the registers. Every
// thread of the workgroup must call tq_encode_pair (the exchanges may have barriers).

// Float-float sums of a segment, combined lower thread first so every thread of it gets the
// same bits.
vec2 tq_seg_sum(vec2 v, uint i, uint n) {
  [[unroll]] for (uint d = 1u; d < TQ_TPV; d *= 2u) {
    const vec2 o = tq_xor(vec4(v, 0.0, 0.0), d).xy;
    if (4u * d < n) v = (i & d) != 0u ? ff_add(o, v) : ff_add(v, o);
  }
  return v;
}
// Cell of z (the number of boundaries below it) and its centroid, segment sg of `side`.
uint tq_cell(uint side, uint sg, float z) {
  uint k = 0u;
  [[unroll]] for (uint s = 0u; s < TQK_SEGMENTS; ++s)
    if (s == sg) {
      if (side == 0u) {
        [[unroll]] for (uint b = 0u; b < (1u << TQK_BITS) - 1u; ++b) k += z > TQK_BOUNDARIES[s * 16u + b] ? 1u : 0u;
      } else {
        [[unroll]] for (uint b = 0u; b < (1u << TQV_BITS) - 1u; ++b) k += z > TQV_BOUNDARIES[s * 16u + b] ? 1u : 0u;
      }
    }
  return k;
}
float tq_cent(uint side, uint sg, uint k) {
  float c = 0.0;
  [[unroll]] for (uint s = 0u; s < TQK_SEGMENTS; ++s)
    if (s == sg) {
      if (side == 0u) {
        [[unroll]] for (uint b = 0u; b < (1u << TQK_BITS); ++b) c = k == b ? TQK_CENTROIDS[s * 16u + b] : c;
      } else {
        [[unroll]] for (uint b = 0u; b < (1u << TQV_BITS); ++b) c = k == b ? TQV_CENTROIDS[s * 16u + b] : c;
      }
    }
  return c;
}
uint tq_seg_byte_at(uint side, uint sg) {
  uint r = 0u;
  [[unroll]] for (uint s = 0u; s < TQK_SEGMENTS; ++s)
    if (s == sg) r = side == 0u ? TQK_SEG_BYTE_OFFSET[s] : TQV_SEG_BYTE_OFFSET[s];
  return r;
}
uint tq_seg_high_at(uint side, uint sg) {
  uint r = 0u;
  [[unroll]] for (uint s = 0u; s < TQK_SEGMENTS; ++s)
    if (s == sg) r = side == 0u ? TQK_SEG_HIGH_OFFSET[s] : TQV_SEG_HIGH_OFFSET[s];
  return r;
}
// This thread's side (0 K, 1 V, else none) and whether it holds elements of a TurboQuant side.
uint tq_side_of() { return gl_LocalInvocationID.x / TQ_TPV; }
bool tq_holds() {
  const uint side = tq_side_of();
  return ((side == 0u && KV_K_KIND == 3) || (side == 1u && KV_V_KIND == 3)) && 4u * (gl_LocalInvocationID.x % TQ_TPV) < KD;
}
// The V elements this thread encodes (zero elsewhere), for a caller that loads them early.
vec4 tq_v_prefetch(uint vsrc) {
  const uint e0 = 4u * (gl_LocalInvocationID.x % TQ_TPV), i = vsrc + e0;
  return tq_side_of() == 1u && tq_holds() ? vec4(src_at(1u, i), src_at(1u, i + 1u), src_at(1u, i + 2u), src_at(1u, i + 3u))
                                          : vec4(0.0);
}
// Encodes the TurboQuant sides of row `row` (V from vx: tq_v_prefetch(vsrc)) and, where
// ring_base != ~0u, copies them to the ring as f16.
void tq_encode_pair(uint ksrc, vec4 vx, uint row, uint ring_base) {
  const uint tid = gl_LocalInvocationID.x, side = tq_side_of(), i = tid % TQ_TPV, e0 = 4u * i;
  const bool act = tq_holds();
  vec4 x = vx;
  if (act && side == 0u) x = vec4(src_at(0u, ksrc + e0), src_at(0u, ksrc + e0 + 1u), src_at(0u, ksrc + e0 + 2u), src_at(0u, ksrc + e0 + 3u));
  const vec4 x0 = x;
  x = tq_rotate_forward4(x, e0);
  const uint n = tq_seg_n_at(e0), sg = tq_segment_of(e0);
  float hi = 0.0, lo = 0.0;
  [[unroll]] for (uint e = 0u; e < 4u; ++e) ff_add_sq(hi, lo, x[e], x[e]);
  const vec2 nn = tq_seg_sum(vec2(hi, lo), i, n);
  const float norm = ff_sqrt(nn.x, nn.y);
  const float to_z = norm > 0.0 ? sqrt(float(n)) / norm : 0.0;
  uvec4 code;
  hi = 0.0;
  lo = 0.0;
  [[unroll]] for (uint e = 0u; e < 4u; ++e) {
    code[e] = tq_cell(side, sg, x[e] * to_z);
    const float c = tq_cent(side, sg, code[e]);
    ff_add_sq(hi, lo, c, c);
  }
  const vec2 ccs = tq_seg_sum(vec2(hi, lo), i, n);
  const uint bits = side == 0u ? TQK_BITS : TQV_BITS, lp = bits == 3u ? 2u : bits, mask = (1u << lp) - 1u;
  uint low = 0u, high = 0u;
  [[unroll]] for (uint e = 0u; e < 4u; ++e) {
    low |= (code[e] & mask) << (e * lp);
    high |= ((code[e] >> 2) & 1u) << e;
  }
  // 4-bit fields (1-bit low plane, the 3-bit formats' high plane) pair with the next thread's.
  const uint low_next = tq_xor_u(low, 1u), high_next = tq_xor_u(high, 1u);
  if (!act) return;
  const uint blk = row * (side == 0u ? TQK_ROW_BYTES : TQV_ROW_BYTES) + tq_seg_byte_at(side, sg);
  const uint dl = e0 % n;  // element of the segment (segments sit at multiples of their size)
  if (dl == 0u) {
    const float cc = ccs.x + ccs.y;
    float sc = norm;
    if (cc > 0.0) sc = norm * sqrt(float(n) / cc);
    const uint h = f32_to_f16_bits(min(sc, 65504.0));
    put_u8(side, blk, h & 0xFFu);
    put_u8(side, blk + 1u, h >> 8);
  }
  if (lp == 1u) {
    if ((i & 1u) == 0u) put_u8(side, blk + 2u + dl / 8u, low | (low_next << 4));
  } else {
    for (uint b = 0u; b < lp / 2u; ++b) put_u8(side, blk + 2u + dl * lp / 8u + b, (low >> (8u * b)) & 0xFFu);
  }
  if (bits == 3u && (i & 1u) == 0u) put_u8(side, blk + tq_seg_high_at(side, sg) + dl / 8u, high | (high_next << 4));
  if (ring_base != ~0u)
    [[unroll]] for (uint e = 0u; e < 4u; ++e) {
      const uint h = f32_to_f16_bits(x0[e]);
      if (side == 0u) kring[ring_base + e0 + e] = uint16_t(h);
      else vring[ring_base + e0 + e] = uint16_t(h);
    }
}
#endif

// ggml's quantize_row_q8_0_ref (quant::q8_0::quantize): d = amax/127, q = round-away(x·(1/d)).
void q8_encode(uint side, uint src, uint row) {
  const uint nb = KD / 32u;
  for (uint b = gl_LocalInvocationID.x; b < nb; b += WG) {
    const uint x0 = src + 32u * b, o = (row * nb + b) * 34u;
    float amax = 0.0;
    for (uint e = 0u; e < 32u; ++e) {
      const float a = abs(src_at(side, x0 + e));
      amax = amax > a ? amax : a;
    }
    const float d = amax / 127.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    put_u16(side, o / 2u, f32_to_f16_bits(d));
    for (uint e = 0u; e < 32u; ++e) {
      const float x = src_at(side, x0 + e) * id;
      float r = trunc(x);
      if (abs(x - r) >= 0.5) r += sign(x);
      put_u8(side, o + 2u + e, uint(int(r)) & 0xFFu);
    }
  }
}

void encode(uint side, uint kind, uint src, uint row) {
  if (kind == 0u) {
    for (uint i = gl_LocalInvocationID.x; i < KD; i += WG) put_f32(side, row * KD + i, src_at(side, src + i));
  } else if (kind == 1u) {
    for (uint i = gl_LocalInvocationID.x; i < KD; i += WG) put_u16(side, row * KD + i, f32_to_f16_bits(src_at(side, src + i)));
  } else if (kind == 2u) {
    q8_encode(side, src, row);
  }  // TurboQuant sides: tq_encode_pair
}

// Where KV head `head` of step token t goes: its cache row and (KV_RING) its ring row, whose
// tag is the position. Loaded by kv_dest_of, which a caller may issue early.
struct kv_dest {
  uint row, ring, ring_base, pos;  // ring_base: the ring row's first element
};
kv_dest kv_dest_of(uint head, uint t, uint n_head_kv, uint ring_rows) {
  kv_dest d;
  d.row = slots[t] * n_head_kv + head;
  d.pos = uint(pos[t]);
#ifdef KV_RING
  d.ring = seq_row[t] * ring_rows + d.pos % ring_rows;
  d.ring_base = (d.ring * n_head_kv + head) * KD;
#else
  d.ring = 0u;
  d.ring_base = ~0u;
#endif
  return d;
}
// Appends KV head `head` (K values from src_at(0, ksrc + i), V from src_at(1, vsrc + i)) at
// dst, and to the window's ring; vx: the TurboQuant encoder's V elements (tq_v_prefetch(vsrc),
// which a caller may load early). KV_PART splits the append in two dispatches (attn_prep.glsl):
// 1 what this step's attention reads (the ring rows, their tags, f32/f16 sides), 2 the
// compressed sides' codes, which it does not read (fusion.cpp record_attn_prep: a step's
// positions stay in the ring), so they can be written beside it; 3 (default) both.
#ifndef KV_PART
#define KV_PART 3
#endif
void kv_append_to(kv_dest dst, uint head, uint ksrc, uint vsrc, vec4 vx) {
  const uint row = dst.row, base = dst.ring_base;
#if KV_HAS_TQ && (KV_PART & 2) != 0
  tq_encode_pair(ksrc, vx, row, KV_PART == 3 ? base : ~0u);  // its sides' ring rows too (part 3)
#endif
  const bool k_left = KV_K_KIND != 3, v_left = KV_V_KIND != 3;
  const bool k_here = (KV_K_KIND < 2 ? KV_PART & 1 : KV_PART & 2) != 0, v_here = (KV_V_KIND < 2 ? KV_PART & 1 : KV_PART & 2) != 0;
  if (k_left && k_here) encode(0u, KV_K_KIND, ksrc, row);
  if (v_left && v_here) encode(1u, KV_V_KIND, vsrc, row);
#if defined(KV_RING) && (KV_PART & 1) != 0
  for (uint i = gl_LocalInvocationID.x; i < KD; i += WG) {
    if (KV_K_KIND >= 2 && (k_left || KV_PART == 1)) kring[base + i] = uint16_t(f32_to_f16_bits(src_at(0u, ksrc + i)));
    if (KV_V_KIND >= 2 && (v_left || KV_PART == 1)) vring[base + i] = uint16_t(f32_to_f16_bits(src_at(1u, vsrc + i)));
  }
  if (head == 0u && gl_LocalInvocationID.x == 0u) tags[dst.ring] = dst.pos;
#endif
}
void kv_append(uint head, uint t, uint ksrc, uint vsrc, uint n_head_kv, uint ring_rows) {
  const kv_dest dst = kv_dest_of(head, t, n_head_kv, ring_rows);
#if KV_HAS_TQ
  kv_append_to(dst, head, ksrc, vsrc, tq_v_prefetch(vsrc));
#else
  kv_append_to(dst, head, ksrc, vsrc, vec4(0.0));
#endif
}
