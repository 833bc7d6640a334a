// Appends the batch's K and V rows to a cache with a compressed side (q8_0 or TurboQuant;
// kv_codec.glsl has the kinds): one workgroup per (KV head, token) encodes that head vector of
// K and of V in its side's format at the token's slot, as kernels::cpu::kv_codec::encode does
// (TurboQuant: 3-round randomized Hadamard, per-segment norm, nearest Lloyd-Max cell, norm-
// corrected fp16 scale, bit planes of turboquant/block.hpp), and, with KV_RING, copies the
// compressed sides to the f16 ring of the full-precision window (row seq·ring_rows + pos mod
// ring_rows, tagged with pos).
layout(local_size_x = WG) in;
layout(binding = 0, std430) writeonly buffer Kc8 { uint8_t kc8[]; };
layout(binding = 0, std430) writeonly buffer Kc16 { uint16_t kc16[]; };
layout(binding = 0, std430) writeonly buffer Kc32 { float kc32[]; };
layout(binding = 1, std430) readonly buffer Ksrc { float ks[]; };
layout(binding = 2, std430) readonly buffer Vsrc { float vs[]; };
layout(binding = 3, std430) writeonly buffer Vc8 { uint8_t vc8[]; };
layout(binding = 3, std430) writeonly buffer Vc16 { uint16_t vc16[]; };
layout(binding = 3, std430) writeonly buffer Vc32 { float vc32[]; };
layout(binding = 4, std430) readonly buffer Slots { uint slots[]; };
layout(binding = 5, std430) writeonly buffer Kring { uint16_t kring[]; };
layout(binding = 6, std430) writeonly buffer Vring { uint16_t vring[]; };
layout(binding = 7, std430) writeonly buffer Tags { uint tags[]; };
layout(binding = 8, std430) readonly buffer Pos { int pos[]; };
layout(binding = 9, std430) readonly buffer SeqRow { uint seq_row[]; };
layout(push_constant) uniform Params { uint n_tok, n_head_kv, k_off, k_stride, v_off, v_stride, ring_rows; } p;

float src_at(uint side, uint i) { return side == 0u ? ks[i] : vs[i]; }
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
shared uint idx_s[KD];
shared float seg_norm, seg_to_z;

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
// float(sqrt(hi + lo)), one Newton correction of the float root.
float ff_sqrt(float hi, float lo) {
  if (hi <= 0.0) return 0.0;
  const float s0 = sqrt(hi);
  precise float r = fma(-s0, s0, hi) + lo;
  return s0 + r / (2.0 * s0);
}

void tq_encode(uint side, uint src, uint row) {
  const uint tid = gl_LocalInvocationID.x, bits = tq_bits(side);
  const uint rb = row * tq_row_bytes(side);
  for (uint i = tid; i < KD; i += WG) rot[i] = src_at(side, src + i);
  barrier();
  tq_rotate_forward();
  const uint lp = bits == 3u ? 2u : bits, mask = (1u << lp) - 1u, per_byte = 8u / lp;
  for (uint s = 0u; s < TQK_SEGMENTS; ++s) {
    const uint n = TQK_SEG_N[s], off = TQK_SEG_ELEM_OFFSET[s], blk = rb + tq_seg_byte(side, s);
    if (tid == 0u) {
      float hi = 0.0, lo = 0.0;
      for (uint i = 0u; i < n; ++i) ff_add_sq(hi, lo, rot[off + i], rot[off + i]);
      const float norm = ff_sqrt(hi, lo);
      seg_norm = norm;
      seg_to_z = norm > 0.0 ? sqrt(float(n)) / norm : 0.0;
    }
    barrier();
    const float to_z = seg_to_z;
    const uint nb = (1u << bits) - 1u;
    for (uint i = tid; i < n; i += WG) {
      const float z = rot[off + i] * to_z;
      uint k = 0u;
      for (uint b = 0u; b < nb; ++b) k += z > tq_boundary(side, s, b) ? 1u : 0u;
      idx_s[off + i] = k;
    }
    barrier();
    if (tid == 0u) {
      float hi = 0.0, lo = 0.0;
      for (uint i = 0u; i < n; ++i) {
        const float c = tq_centroid(side, s, idx_s[off + i]);
        ff_add_sq(hi, lo, c, c);
      }
      const float cc = hi + lo;
      float sc = seg_norm;
      if (cc > 0.0) sc = seg_norm * sqrt(float(n) / cc);
      const uint h = f32_to_f16_bits(min(sc, 65504.0));
      put_u8(side, blk, h & 0xFFu);
      put_u8(side, blk + 1u, h >> 8);
    }
    for (uint b = tid; b < n * lp / 8u; b += WG) {
      uint v = 0u;
      for (uint e = 0u; e < per_byte; ++e) v |= (idx_s[off + b * per_byte + e] & mask) << (e * lp);
      put_u8(side, blk + 2u + b, v);
    }
    if (bits == 3u)
      for (uint g = tid; g < n / 8u; g += WG) {
        uint v = 0u;
        for (uint e = 0u; e < 8u; ++e) v |= ((idx_s[off + 8u * g + e] >> 2) & 1u) << e;
        put_u8(side, blk + tq_seg_high(side, s) + g, v);
      }
    barrier();
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
  } else {
#if KV_HAS_TQ
    tq_encode(side, src, row);
#endif
  }
}

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint row = slots[t] * p.n_head_kv + h;
  const uint ksrc = p.k_off + t * p.k_stride + h * KD, vsrc = p.v_off + t * p.v_stride + h * KD;
  encode(0u, KV_K_KIND, ksrc, row);
  encode(1u, KV_V_KIND, vsrc, row);
#ifdef KV_RING
  const uint P = uint(pos[t]);
  const uint r = seq_row[t] * p.ring_rows + P % p.ring_rows;
  const uint base = (r * p.n_head_kv + h) * KD;
  for (uint i = tid; i < KD; i += WG) {
    if (KV_K_KIND >= 2) kring[base + i] = uint16_t(f32_to_f16_bits(ks[ksrc + i]));
    if (KV_V_KIND >= 2) vring[base + i] = uint16_t(f32_to_f16_bits(vs[vsrc + i]));
  }
  if (h == 0u && tid == 0u) tags[r] = P;
#endif
}
