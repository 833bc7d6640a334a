// f32 activation rows -> int8 blocks of 32 for the integer matvec (mmvq.glsl): per block
// d = max|x| / 127 and codes q = round(x / d) packed four to a uint, plus the sums the weight
// formats factor out (Q4_K's mins, Q6_K's -32 offset): s = (d, d·sum q[0..15], d·sum q[16..31],
// d·sum q). One workgroup per row; each thread owns whole blocks.
//  NORM  the row is RMS-normalised and scaled by a weight first: x · rsqrt(mean(x²) + eps) · w
//        (the decoder's pre-attention / pre-FFN norm folded into the quantization).
//  WRITE_Y  the (normalised) f32 row is written too, for a reader that needs floats (an MoE router).
layout(local_size_x = WG) in;
layout(binding = 0, std430) readonly buffer X4 { vec4 x4[]; };
layout(binding = 1, std430) readonly buffer NormW4 { vec4 norm_w4[]; };
layout(binding = 2, std430) writeonly buffer XQ { uvec4 xq[]; };
layout(binding = 3, std430) writeonly buffer XS { vec4 xs[]; };
#ifdef WRITE_Y
layout(binding = 4, std430) writeonly buffer Y4 { vec4 y4[]; };
#endif
layout(push_constant) uniform Params {
  uint K;                 // row length (multiple of 32)
  uint x_off, x_stride;   // in floats (multiples of 4)
  uint q_off, q_stride;   // in uvec4 (16 codes)
  uint s_off, s_stride;   // in vec4 (one per 32 codes)
  float eps;
  uint y_off, y_stride;   // WRITE_Y, in floats (multiples of 4)
} p;

shared float red[WG / MIN_SUBGROUP];

void store_block(uint row, uint b, vec4 v[8]) {
  const q8_block qb = q8_quantize(v);
  const uint qo = p.q_off + row * p.q_stride + 2 * b;
  xq[qo] = qb.lo;
  xq[qo + 1] = qb.hi;
  xs[p.s_off + row * p.s_stride + b] = qb.s;
}

// 1 / rms of the row from each thread's part of its sum of squares (every thread gets it).
float rms_scale(float ss) {
  ss = subgroupAdd(ss);
  if (subgroupElect()) red[gl_SubgroupID] = ss;
  barrier();
  float total = 0.0;
  for (uint g = 0; g < gl_NumSubgroups; ++g) total += red[g];
  return 1.0 / sqrt(total / float(p.K) + p.eps);
}

void main() {
  const uint row = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  const uint xo = (p.x_off + row * p.x_stride) >> 2;
  const uint n_blocks = p.K / 32;
  float scale = 1.0;
#ifdef NORM
  if (n_blocks <= WG) {
    // A block a thread (decode's rows: 4096 wide, 128 blocks): its x and weights are loaded at
    // once and kept for the quantization. Two passes over the row waited out a memory latency
    // per loop iteration of the sum of squares (a decode step's norm ~5 us).
    const uint b = min(tid, n_blocks - 1);
    vec4 v[8], w[8];
    float ssq = 0.0;
    [[unroll]] for (uint i = 0; i < 8; ++i) {
      v[i] = x4[xo + 8 * b + i];
      w[i] = norm_w4[8 * b + i];
    }
    if (tid < n_blocks)
      [[unroll]] for (uint i = 0; i < 8; ++i) ssq += dot(v[i], v[i]);
    scale = rms_scale(ssq);
    if (tid >= n_blocks) return;
    [[unroll]] for (uint i = 0; i < 8; ++i) {
      v[i] = v[i] * scale * w[i];
#ifdef WRITE_Y
      y4[(p.y_off + row * p.y_stride) / 4 + 8 * b + i] = v[i];
#endif
    }
    store_block(row, b, v);
    return;
  }
  float ss = 0.0;
  for (uint i = tid; i < p.K / 4; i += WG) {
    const vec4 v = x4[xo + i];
    ss += dot(v, v);
  }
  scale = rms_scale(ss);
#endif
  for (uint b = tid; b < n_blocks; b += WG) {
    vec4 v[8];
    for (uint i = 0; i < 8; ++i) {
      v[i] = x4[xo + 8 * b + i] * scale;
#ifdef NORM
      v[i] *= norm_w4[8 * b + i];
#endif
#ifdef WRITE_Y
      y4[(p.y_off + row * p.y_stride) / 4 + 8 * b + i] = v[i];
#endif
    }
    store_block(row, b, v);
  }
}
