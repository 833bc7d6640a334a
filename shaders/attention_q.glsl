// Attention over a KV cache with a compressed side (q8_0 or TurboQuant; kv_codec.glsl), the
// semantics of kernels::cpu::backend::attention_compressed: positions p − window + 1 .. p of the
// query's sequence are read from the f16 ring when its tag still holds them; older TurboQuant
// keys are scored against the query rotated once per head (⟨Rq, ỹ⟩ from the codes, no
// dequantized key), TurboQuant values are summed in the rotated domain and rotated back once
// per workgroup; q8_0 rows are dequantized on the fly. Same tiling, online softmax and SPLIT
// partials as attention.glsl (whose COMBINE pass merges them: each split rotates its own
// partial back, which the linear merge preserves).
layout(local_size_x = WG) in;
layout(binding = 0, std430) buffer Part { float part[]; };
layout(binding = 1, std430) readonly buffer Q { float q[]; };
layout(binding = 2, std430) readonly buffer Kc8 { uint8_t kc8[]; };
layout(binding = 2, std430) readonly buffer Kc16 { uint16_t kc16[]; };
layout(binding = 2, std430) readonly buffer Kc32 { float kc32[]; };
layout(binding = 3, std430) readonly buffer Vc8 { uint8_t vc8[]; };
layout(binding = 3, std430) readonly buffer Vc16 { uint16_t vc16[]; };
layout(binding = 3, std430) readonly buffer Vc32 { float vc32[]; };
layout(binding = 4, std430) readonly buffer Pos { int pos[]; };
layout(binding = 5, std430) readonly buffer SeqRow { uint seq_row[]; };
layout(binding = 6, std430) readonly buffer Blocks { uint blocks[]; };
layout(binding = 7, std430) buffer O { float o[]; };
layout(binding = 8, std430) readonly buffer Kring { uint16_t kring[]; };
layout(binding = 9, std430) readonly buffer Vring { uint16_t vring[]; };
layout(binding = 10, std430) readonly buffer Tags { uint tags[]; };
layout(push_constant) uniform Params {
  uint n_head, n_head_kv, D, chunk;
  uint q_off, q_stride, o_off, o_stride;
  uint block_size, max_blocks;
  float scale;
  uint split_len, n_splits;
  uint window, ring_rows;
} p;

const uint PER_THREAD = (KD + WG - 1) / WG;
shared float qs[KD];
shared float qr[KD];
shared float probs[WG];
shared uint slot_of[WG];
shared uint ring_of[WG];  // ring row of a key's value, ~0u: read the compressed row
shared float red[WG / MIN_SUBGROUP];

float wg_max(float v) {
  v = subgroupMax(v);
  barrier();
  if (subgroupElect()) red[gl_SubgroupID] = v;
  barrier();
  float r = red[0];
  for (uint g = 1; g < gl_NumSubgroups; ++g) r = max(r, red[g]);
  return r;
}
float wg_sum(float v) {
  v = subgroupAdd(v);
  barrier();
  if (subgroupElect()) red[gl_SubgroupID] = v;
  barrier();
  float r = 0.0;
  for (uint g = 0; g < gl_NumSubgroups; ++g) r += red[g];
  return r;
}

uint k_u8(uint i) { return uint(kc8[i]); }
uint v_u8(uint i) { return uint(vc8[i]); }

#if KV_HAS_TQ
// Index of element i of the block at byte `blk` of side K (0) or V (1).
uint tq_index(uint side, uint blk, uint s, uint i) {
  const uint bits = tq_bits(side), lp = bits == 3u ? 2u : bits;
  const uint lo_byte = blk + 2u + i * lp / 8u, sh = (i * lp) % 8u;
  uint v = ((side == 0u ? k_u8(lo_byte) : v_u8(lo_byte)) >> sh) & ((1u << lp) - 1u);
  if (bits == 3u) {
    const uint hb = blk + tq_seg_high(side, s) + i / 8u;
    v |= (((side == 0u ? k_u8(hb) : v_u8(hb)) >> (i % 8u)) & 1u) << 2;
  }
  return v;
}
float tq_scale(uint side, uint blk) {
  const uint b = side == 0u ? k_u8(blk) | (k_u8(blk + 1u) << 8) : v_u8(blk) | (v_u8(blk + 1u) << 8);
  return f16_bits_to_f32(b);
}
#endif

// q·k of the key in cache row `row` (slot·n_head_kv + head), from its stored form.
float key_dot(uint row) {
  float d = 0.0;
#if KV_K_KIND == 0
  for (uint c = 0u; c < KD; ++c) d += qs[c] * kc32[row * KD + c];
#elif KV_K_KIND == 1
  for (uint c = 0u; c < KD; ++c) d += qs[c] * f16_bits_to_f32(uint(kc16[row * KD + c]));
#elif KV_K_KIND == 2
  const uint nb = KD / 32u;
  for (uint b = 0u; b < nb; ++b) {
    const uint o = (row * nb + b) * 34u;
    const float sc = f16_bits_to_f32(uint(kc16[o / 2u]));
    for (uint e = 0u; e < 32u; ++e) d += qs[32u * b + e] * (float(int(int8_t(kc8[o + 2u + e]))) * sc);
  }
#else
  const uint rb = row * TQK_ROW_BYTES;
  for (uint s = 0u; s < TQK_SEGMENTS; ++s) {
    const uint blk = rb + TQK_SEG_BYTE_OFFSET[s], off = TQK_SEG_ELEM_OFFSET[s];
    float a = 0.0;
    for (uint i = 0u; i < TQK_SEG_N[s]; ++i) a += qr[off + i] * TQK_CENTROIDS[s * 16u + tq_index(0u, blk, s, i)];
    d += tq_scale(0u, blk) * TQK_SEG_INV_SQRT_N[s] * a;
  }
#endif
  return d;
}

#ifdef COMBINE
void main() {}
#else
void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint hk = h / (p.n_head / p.n_head_kv);
  const uint P = uint(pos[t]), seq = seq_row[t];
  uint start = p.chunk != 0 ? P / p.chunk * p.chunk : 0;
  uint last = P;
  const uint recent_from = p.window != 0u && P + 1u >= p.window ? P + 1u - p.window : 0u;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
  const uint pbase = ((t * p.n_head + h) * p.n_splits + split) * (KD + 2);
  start = max(start, split * p.split_len);
  last = min(P, (split + 1) * p.split_len - 1);
  if (start > last) {
    if (tid == 0) {
      part[pbase + KD] = -1.0 / 0.0;
      part[pbase + KD + 1] = 0.0;
    }
    return;
  }
#endif
  const uint btab = seq * p.max_blocks;
  for (uint i = tid; i < KD; i += WG) qs[i] = q[p.q_off + t * p.q_stride + h * KD + i];
  barrier();
#if KV_K_KIND == 3
  for (uint i = tid; i < KD; i += WG) rot[i] = qs[i];
  barrier();
  tq_rotate_rot(1u, true);
  for (uint i = tid; i < KD; i += WG) qr[i] = rot[i];
  barrier();
#endif
  float m = -1.0 / 0.0, l = 0.0;
  float acc[PER_THREAD], accr[PER_THREAD];
  for (uint k = 0; k < PER_THREAD; ++k) {
    acc[k] = 0.0;
    accr[k] = 0.0;
  }

  for (uint j0 = start; j0 <= last; j0 += WG) {
    const uint j = j0 + tid;
    float s = -1.0 / 0.0;
    uint slot = 0u, vring_row = ~0u;
    if (j <= last) {
      slot = blocks[btab + j / p.block_size] * p.block_size + j % p.block_size;
      bool recent = false;
      uint rr = 0u;
      if (p.window != 0u && j >= recent_from) {
        rr = seq * p.ring_rows + j % p.ring_rows;
        recent = tags[rr] == j;
      }
      float d = 0.0;
      if (KV_K_KIND >= 2 && recent) {
        const uint base = (rr * p.n_head_kv + hk) * KD;
        for (uint c = 0u; c < KD; ++c) d += qs[c] * f16_bits_to_f32(uint(kring[base + c]));
      } else {
        d = key_dot(slot * p.n_head_kv + hk);
      }
      s = d * p.scale;
      if (KV_V_KIND >= 2 && recent) vring_row = rr;
    }
    const float m_new = max(m, wg_max(s));
    const float e = j <= last ? exp(s - m_new) : 0.0;
    const float corr = exp(m - m_new);
    probs[tid] = e;
    slot_of[tid] = slot;
    ring_of[tid] = vring_row;
    l = l * corr + wg_sum(e);
    m = m_new;
    const uint n_keys = min(WG, last + 1 - j0);
    for (uint k = 0; k < PER_THREAD; ++k) {
      const uint d = tid + k * WG;
      if (d >= KD) break;
      float a = acc[k] * corr, ar = accr[k] * corr;
#if KV_V_KIND == 3
      const uint sg = tq_segment_of(d), dl = d - TQV_SEG_ELEM_OFFSET[sg] + 0u;
#endif
      for (uint jj = 0; jj < n_keys; ++jj) {
        const float w = probs[jj];
        const uint row = slot_of[jj] * p.n_head_kv + hk;
        if (ring_of[jj] != ~0u) {
          a += w * f16_bits_to_f32(uint(vring[(ring_of[jj] * p.n_head_kv + hk) * KD + d]));
          continue;
        }
#if KV_V_KIND == 0
        a += w * vc32[row * KD + d];
#elif KV_V_KIND == 1
        a += w * f16_bits_to_f32(uint(vc16[row * KD + d]));
#elif KV_V_KIND == 2
        const uint o = (row * (KD / 32u) + d / 32u) * 34u;
        a += w * (float(int(int8_t(vc8[o + 2u + d % 32u]))) * f16_bits_to_f32(uint(vc16[o / 2u])));
#else
        const uint blk = row * TQV_ROW_BYTES + TQV_SEG_BYTE_OFFSET[sg];
        ar += w * tq_scale(1u, blk) * TQV_SEG_INV_SQRT_N[sg] * TQV_CENTROIDS[sg * 16u + tq_index(1u, blk, sg, dl)];
#endif
      }
      acc[k] = a;
      accr[k] = ar;
    }
    barrier();
  }
#if KV_V_KIND == 3
  for (uint k = 0; k < PER_THREAD; ++k) {
    const uint d = tid + k * WG;
    if (d < KD) rot[d] = accr[k];
  }
  barrier();
  tq_rotate_rot(1u, false);
  for (uint k = 0; k < PER_THREAD; ++k) {
    const uint d = tid + k * WG;
    if (d < KD) acc[k] += rot[d];
  }
#endif
#ifdef SPLIT
  for (uint k = 0; k < PER_THREAD; ++k) {
    const uint d = tid + k * WG;
    if (d < KD) part[pbase + d] = acc[k];
  }
  if (tid == 0) {
    part[pbase + KD] = m;
    part[pbase + KD + 1] = l;
  }
#else
  for (uint k = 0; k < PER_THREAD; ++k) {
    const uint d = tid + k * WG;
    if (d < KD) o[p.o_off + t * p.o_stride + h * KD + d] = acc[k] / l;
  }
#endif
}
#endif
