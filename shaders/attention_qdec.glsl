// Decode attention over a KV cache with a compressed side (q8_0 or TurboQuant; kv_codec.glsl),
// one workgroup per (KV head, token[, split]) as attention_dec.glsl: the G = GQA_G query heads
// that share a KV head are scored together, so each code row is read and decoded once per group.
// Semantics of kernels::cpu attention_compressed (and attention_q.glsl): positions within the
// full-precision window read the f16 ring when its tag holds them, older ones the codes.
// TurboQuant keys are scored against the G queries rotated once (⟨Rq, ỹ⟩), values summed in the
// rotated domain and rotated back once per head at the end; centroids come from shared memory.
// Two forms: LANES (lanes split each row; attention_qdec_lanes.glsl), else a thread a key (attention_qdec_keys.glsl): thread i scores key i of
// a tile of WG keys, its code row read with 32-bit loads (rows start at even bytes: aligned words,
// funnel-shifted), indices and q8_0 bytes decoded at compile-time bit positions.
// Values: key streams of LPK lanes (one warp = 32 / LPK streams) split the tile's keys; each lane
// owns 4 dims of every chunk of 4·LPK dims, so a stream reads a value row's codes in one
// coalesced access; f16 ring values go to a second, plain accumulator.
// SPLIT: workgroup z covers keys [z * split_len, (z + 1) * split_len) and writes unnormalised
// partials (acc, m, l) in attention.glsl's layout (each split rotates its own partial back, which
// the linear merge preserves), merged by attention.glsl's COMBINE pass.
// RING_SPLIT (with SPLIT and KV_RING): the last split, z = n_splits - 1, sums the window's keys
// the ring holds (f16 rows against the plain query, plain value sums, no rotation); the code
// splits skip those keys, so they need neither the plain query nor a second value accumulator,
// and no code split waits on the window's loads.
// Requires TQ_ROT_N >= GQA_G (the rotation and the final sums share `rot`).
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = WG) in;
#ifndef TAIL_COHERENT
#define TAIL_COHERENT
#endif
layout(binding = 0, std430) TAIL_COHERENT buffer Part { float part[]; };
layout(binding = 1, std430) readonly buffer Q { float q[]; };
layout(binding = 2, std430) readonly buffer Kw { uint kw[]; };
layout(binding = 2, std430) readonly buffer Kf { vec4 kf[]; };
layout(binding = 2, std430) readonly buffer Kh { f16vec4 kh[]; };
layout(binding = 2, std430) readonly buffer K8 { uint8_t k8[]; };
layout(binding = 2, std430) readonly buffer K16 { uint16_t k16[]; };
layout(binding = 3, std430) readonly buffer Vf { vec4 vf[]; };
layout(binding = 3, std430) readonly buffer Vh { f16vec4 vh[]; };
layout(binding = 3, std430) readonly buffer V8 { uint8_t v8[]; };
layout(binding = 3, std430) readonly buffer V16 { uint16_t v16[]; };
layout(binding = 4, std430) readonly buffer Pos { int pos[]; };
layout(binding = 5, std430) readonly buffer SeqRow { uint seq_row[]; };
layout(binding = 6, std430) readonly buffer Blocks { uint blocks[]; };
layout(binding = 7, std430) buffer O { float o[]; };
layout(binding = 8, std430) readonly buffer Kring { f16vec4 kring[]; };
layout(binding = 9, std430) readonly buffer Vring { f16vec4 vring[]; };
layout(binding = 10, std430) readonly buffer Tags { uint tags[]; };
#ifdef QROT_IN  // the queries rotated by attn_prep (Q_ROT) at this binding: no rotation here
layout(binding = QROT_IN, std430) readonly buffer QRot { vec4 qrot[]; };
#endif
layout(push_constant) uniform Params {
  uint n_head, n_head_kv, D, chunk;
  uint q_off, q_stride, o_off, o_stride;
  uint block_size, max_blocks;
  float scale;
  uint split_len, n_splits;
  uint window, ring_rows;
} p;

// QDEC_SKIP (lab only, STRATA_VK_QDEC_SKIP; wrong results): leaves parts out to time them:
// 1 the queries' rotation, 2 the values' rotation back (ROT_LATER: COMBINE's, attention.glsl LAB_NO_ROT), 4 the key scores, 8 the value sums,
// 16 the centroid tables, 32 the split merge's tail, 64 everything (the dispatch's floor),
// 128 the queries' load, 256 the value sums of the tile reaching the window; LANES form with
// TurboQuant sides: 512 / 1024 / 2048 (lab_dims below).
#ifndef QDEC_SKIP
#define QDEC_SKIP 0
#endif
#if defined(RING_SPLIT) && !(defined(SPLIT) && defined(KV_RING))
#error "attention_qdec: RING_SPLIT needs SPLIT and KV_RING"
#endif
// ROT_LATER (SPLIT, TurboQuant values): the code splits' partials stay in the rotated domain and
// attention.glsl's COMBINE rotates their merged sum back once; every split's partial must then be
// in one domain, so a window's keys need a split of their own.
#if defined(ROT_LATER) && (!defined(SPLIT) || KV_V_KIND != 3 || defined(SPLIT_COMBINE) || (defined(KV_RING) && !defined(RING_SPLIT)))
#error "attention_qdec: ROT_LATER needs SPLIT, TurboQuant values, the COMBINE dispatch and no window or RING_SPLIT"
#endif
const uint D = KD, G = GQA_G;
#if KV_K_KIND == 3
shared float kcent[TQK_SEGMENTS * 16u];
#endif
#if KV_V_KIND == 3
shared float vcent[TQV_SEGMENTS * 16u];
#endif

#if KV_K_KIND == 2
Q8_DIMS(k_q8, k16)
#elif KV_K_KIND == 3
TQ_DIMS(k_tq, k_tq_of, KV_K_TQ, TQK_, kcent, k8, k16)
#endif
#if KV_V_KIND == 2
Q8_DIMS(v_q8, v16)
#elif KV_V_KIND == 3
TQ_DIMS(v_tq, v_tq_of, KV_V_TQ, TQV_, vcent, v8, v16)
#endif
rdims k_dims_of(uint d) {
#if KV_K_KIND == 3
  return k_tq_of(d);
#else
  return q8_dims_of(d);  // f32 / f16 rows use only r.d
#endif
}
rdims v_dims_of(uint d) {
#if KV_V_KIND == 3
  return v_tq_of(d);
#else
  return q8_dims_of(d);
#endif
}
#if (QDEC_SKIP & 3584) != 0 && KV_K_KIND == 3 && KV_V_KIND == 3
// Lab (QDEC_SKIP 512 / 1024 / 2048, LANES form, TurboQuant on both sides; wrong results): a code
// row's bytes loaded as the decode loads them but not decoded (512), decoded from bytes made of
// the row number without loading (1024), or one 32-bit word a lane from within the row, the load
// of a coalesced row (2048). They split the rows' cost into their loads and their decode.
layout(binding = 2, std430) readonly buffer KwLab { uint kw_lab[]; };
layout(binding = 3, std430) readonly buffer VwLab { uint vw_lab[]; };
vec4 lab_dims(uint row, rdims r, bool key) {
  const uint rb = key ? KV_K_ROW_BYTES : KV_V_ROW_BYTES, b = row * rb;
#if (QDEC_SKIP & 512) != 0
  const uint sc = key ? uint(k16[(b + r.blk) / 2u]) : uint(v16[(b + r.blk) / 2u]);
  const uint lo = key ? uint(k8[b + r.low]) : uint(v8[b + r.low]);
  const uint hi = key ? uint(k8[b + r.high]) : uint(v8[b + r.high]);
  return vec4(float(lo), float(hi), float(sc), 0.0);
#elif (QDEC_SKIP & 2048) != 0
  const uint w = b / 4u + (r.d / 4u) % (rb / 4u);
  return vec4(float(key ? kw_lab[w] : vw_lab[w]));
#else
  const uint x = row * 2654435761u + r.d;
  const float sc = unpackHalf2x16(x >> 16).x * r.inv_sqrt_n;
  const uint lo = (x >> r.shift) & 255u, hi = (x >> 8u) >> r.shift;
  vec4 c;
  [[unroll]] for (uint e = 0u; e < 4u; ++e) {
    const uint code = bitfieldExtract(lo, int(2u * e), 2) | (bitfieldExtract(hi, int(e), 1) << 2);
    c[e] = key ? kcent[r.cbase + code] : vcent[r.cbase + code];
  }
  return c * sc;
#endif
}
#define K_DIMS_LAB(row, r) lab_dims(row, r, true)
#define V_DIMS_LAB(row, r) lab_dims(row, r, false)
#else
#define K_DIMS_LAB(row, r) k_dims(row, r)
#define V_DIMS_LAB(row, r) v_dims(row, r)
#endif
// Dims r.d..r.d+3 of stored K / V row `row` (slot·n_head_kv + head); TurboQuant in the rotated domain.
vec4 k_dims(uint row, rdims r) {
  const uint b = row * KV_K_ROW_BYTES;
#if KV_K_KIND == 0
  return kf[(b + 4u * r.d) / 16u];
#elif KV_K_KIND == 1
  return vec4(kh[(b + 2u * r.d) / 8u]);
#elif KV_K_KIND == 2
  return k_q8(b, r);
#else
  return k_tq(b, r);
#endif
}
vec4 v_dims(uint row, rdims r) {
  const uint b = row * KV_V_ROW_BYTES;
#if KV_V_KIND == 0
  return vf[(b + 4u * r.d) / 16u];
#elif KV_V_KIND == 1
  return vec4(vh[(b + 2u * r.d) / 8u]);
#elif KV_V_KIND == 2
  return v_q8(b, r);
#else
  return v_tq(b, r);
#endif
}

// The centroid tables into shared memory (visible after the caller's next barrier).
void load_centroids() {
  const uint tid = gl_LocalInvocationID.x;
#if KV_K_KIND == 3
  for (uint i = tid; i < TQK_SEGMENTS * 16u; i += WG) kcent[i] = TQK_CENTROIDS[i];
#endif
#if KV_V_KIND == 3
  for (uint i = tid; i < TQV_SEGMENTS * 16u; i += WG) vcent[i] = TQV_CENTROIDS[i];
#endif
}

// The keys [start, last] workgroup (KV head, token t[, split]) sums: the token's causal (or
// chunked) range, cut to the split. False for a split with none of them (uniform per workgroup),
// after writing its empty partial (m = -inf, l = 0) for the merge.
bool key_range(uint t, uint h0, out uint start, out uint last) {
  const uint P = uint(pos[t]);
  start = p.chunk != 0u ? P / p.chunk * p.chunk : 0u;
  last = P;
#ifdef SPLIT
  const uint split = gl_WorkGroupID.z;
#ifdef RING_SPLIT
  if (split == p.n_splits - 1u) {  // the window's split
    start = max(start, P + 1u >= p.window ? P + 1u - p.window : 0u);
  } else
#endif
  {
    start = max(start, split * p.split_len);
    last = min(P, (split + 1u) * p.split_len - 1u);
  }
  if (start > last) {
    if (gl_LocalInvocationID.x < G) {
      const uint pb = ((t * p.n_head + h0 + gl_LocalInvocationID.x) * p.n_splits + split) * (D + 2u);
      part[pb + D] = -1.0 / 0.0;
      part[pb + D + 1u] = 0.0;
    }
    return false;
  }
#endif
  return true;
}

#ifdef QDEC_IDOT
// QDEC_IDOT (TurboQuant keys of 2 or 3 bits whose segments are whole 32-dim blocks; runtime
// kernel_requests.cpp idot_keys): the codes' keys scored with 4-wide int8 dot products. The
// scaled (rotated) queries as int8 a 32-dim block with a float step (qi8, qstep; round to nearest
// even of x·127/max|x|), the centroids as int8 a segment with a step (max|c|/127), four dims' codes
// (a low-plane byte, with 3 bits a high-plane nibble) one lookup in kc8: for a low byte, the four
// centroids with high bit 0 (.x) and 1 (.y), picked per byte by the nibble. The two roundings are
// this form's only difference from the float one (tests/vulkan/kv_decode_test.cpp bounds it).
#if KV_K_KIND != 3 || (KV_K_TQ != 2 && KV_K_TQ != 3) || !defined(NEED_DOT4) || KV_D % 32 != 0
#error "attention_qdec QDEC_IDOT: TurboQuant keys of 2 or 3 bits, NEED_DOT4, head_dim a multiple of 32"
#endif
shared uvec2 kc8[TQK_SEGMENTS][256];
shared float kstep[TQK_SEGMENTS];
// kc8 and kstep (visible after the caller's next barrier).
void load_idot_tables() {
  const uint tid = gl_LocalInvocationID.x;
  for (uint i = tid; i < TQK_SEGMENTS * 256u; i += WG) {
    const uint sg = i / 256u, lo = i % 256u;
    float cmax = 0.0;
    for (uint c = 0u; c < (1u << KV_K_TQ); ++c) cmax = max(cmax, abs(TQK_CENTROIDS[sg * 16u + c]));
    const float inv = cmax > 0.0 ? 127.0 / cmax : 0.0;
    uint w0 = 0u, w1 = 0u;
    for (uint e = 0u; e < 4u; ++e) {
      const uint code = (lo >> (2u * e)) & 3u;
      w0 |= (uint(int(roundEven(TQK_CENTROIDS[sg * 16u + code] * inv))) & 255u) << (8u * e);
      if (KV_K_TQ == 3) w1 |= (uint(int(roundEven(TQK_CENTROIDS[sg * 16u + (code | 4u)] * inv))) & 255u) << (8u * e);
    }
    kc8[sg][lo] = uvec2(w0, w1);
    if (lo == 0u) kstep[sg] = cmax / 127.0;
  }
}
// A query block's four values x·inv rounded to nearest even as int8, packed (both forms' query quantization).
uint query_int8x4(vec4 x, float inv) {
  const ivec4 r = clamp(ivec4(roundEven(x * inv)), ivec4(-127), ivec4(127));
  return (uint(r.x) & 255u) | ((uint(r.y) & 255u) << 8) | ((uint(r.z) & 255u) << 16) | (uint(r.w) << 24);
}
float max_abs4(vec4 x) {
  x = abs(x);
  return max(max(x.x, x.y), max(x.z, x.w));
}
// The int8 centroids of four dims of segment sg from their low-plane byte and (3 bits) high-plane nibble.
uint idot_word(uint sg, uint lo, uint hi) {
  const uvec2 t = kc8[sg][lo];
#if KV_K_TQ == 3
  const uint m = ((hi * 0x00204081u) & 0x01010101u) * 255u;  // bit k of the nibble to bit 8k (k + 7k), then a byte of ones
  return (t.x & ~m) | (t.y & m);
#else
  return t.x;
#endif
}
#endif
#ifdef QDEC_VFOLD
// QDEC_VFOLD (TurboQuant values in one segment; runtime kernel_requests.cpp): a key's value scale s/√n
// goes into its weights (thread-a-key: by the scoring thread; LANES: by the lane holding the (key, head)
// pair), so the value sums decode centroids only, two dims' a lookup.
#if KV_V_KIND != 3
#error "attention_qdec QDEC_VFOLD: TurboQuant values in one segment"
#endif
const float vfold_needs_one_segment[TQV_SEGMENTS == 1u ? 1 : -1] = float[](0.0);  // a compile error otherwise
// Two dims' centroids a lookup: index = both dims' low-plane bits, then (3 bits) their two high bits.
const uint VP_LOW = 2u * TQV_LOW_BITS, VP_N = 1u << (2u * KV_V_TQ);
shared vec2 vpair[VP_N];
void load_value_pairs() {  // visible after the caller's next barrier
  for (uint i = gl_LocalInvocationID.x; i < VP_N; i += WG) {
    const uint l = i & ((1u << VP_LOW) - 1u), h = i >> VP_LOW, lm = (1u << TQV_LOW_BITS) - 1u;
    vpair[i] = vec2(TQV_CENTROIDS[(l & lm) | ((h & 1u) << TQV_LOW_BITS)], TQV_CENTROIDS[(l >> TQV_LOW_BITS) | ((h >> 1u) << TQV_LOW_BITS)]);
  }
}
// The value row's scale s/√n (its one segment's), folded into its key's weights.
float v_row_scale(uint row) {
  return unpackHalf2x16(uint(v16[(row * KV_V_ROW_BYTES + TQV_SEG_BYTE_OFFSET[0]) / 2u])).x * TQV_SEG_INV_SQRT_N[0];
}
// Four dims' centroids from their low-plane bits `lo` and (3 bits) high-plane bits `hi`, shifted to the dims.
vec4 v_pairs(uint lo, uint hi) {
  vec4 c;
  [[unroll]] for (uint e = 0u; e < 2u; ++e) {
    uint i = bitfieldExtract(lo, int(e * VP_LOW), int(VP_LOW));
    if (KV_V_TQ == 3) i = bitfieldInsert(i, bitfieldExtract(hi, int(2u * e), 2), int(VP_LOW), 2);
    const vec2 pr = vpair[i];
    c[2u * e] = pr.x;
    c[2u * e + 1u] = pr.y;
  }
  return c;
}
// The codes of four dims of value row `row`: (low-plane bits, high-plane bits), as v_pairs takes them.
uvec2 v_codes(uint row, rdims r) {
  const uint b = row * KV_V_ROW_BYTES;
  uint lo = KV_V_TQ == 4 ? uint(v16[(b + r.low) / 2u]) : uint(v8[b + r.low]);
  if (KV_V_TQ < 2) lo >>= r.shift;
  const uint hi = KV_V_TQ == 3 ? uint(v8[b + r.high]) >> r.shift : 0u;
  return uvec2(lo, hi);
}
vec4 v_centroids(uint row, rdims r) {
  const uvec2 c = v_codes(row, r);
  return v_pairs(c.x, c.y);
}
#define V_CODES(row, r) v_centroids(row, r)
#else
#define V_CODES(row, r) v_dims(row, r)
#endif
