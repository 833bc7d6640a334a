// The decoder's next RMS norm, run as the tail of the dispatch that writes its input (a residual
// matvec, the MoE combine): in a decode step the norm's own dispatch and the barrier before it
// cost more than its work, so the last workgroup of the producing dispatch (last_workgroup.glsl)
// does it instead: it reads all rows back, normalises them (x · rsqrt(mean(x²) + eps) · w) and
// writes them both as f32 and as the int8 blocks of quantize_q8.glsl (same formulas).
// The including shader declares the rows it writes TAIL_COHERENT, appends NORM_TAIL_PC to its
// push constants and ends main() with NORM_TAIL_CALL() in every invocation (no earlier return).
// Bindings from NORM_TAIL (the first free one): +0 the counter, +1 the rows to normalise (the
// producer's output again), +2 norm weight, +3 int8 codes, +4 block scales and sums, +5 the
// normalised f32 rows.
// TAIL_F16 (mul_mm_reg RESIDUAL, 5-16-token steps): +3 the normalised rows as f16 instead (rows
// tail_q_stride halves apart: the f16 copy the tensor-core matmuls read; +4 unused), the rows
// spread over the warps (a warp or more a row) rather than one after another.
#define NORM_TAIL_PC uint tail_x_off, tail_x_stride, tail_cols, tail_rows, tail_y_off, tail_y_stride, tail_q_stride, tail_s_stride; float tail_eps;
#define NORM_TAIL_CALL() norm_tail(p.tail_x_off, p.tail_x_stride, p.tail_cols, p.tail_rows, p.tail_y_off, p.tail_y_stride, \
                                   p.tail_q_stride, p.tail_s_stride, p.tail_eps)

layout(binding = NORM_TAIL + 1, std430) coherent readonly buffer TailX { vec4 tail_x[]; };
layout(binding = NORM_TAIL + 2, std430) readonly buffer TailW { vec4 tail_w[]; };
#ifdef TAIL_F16
layout(binding = NORM_TAIL + 3, std430) writeonly buffer TailH { uvec2 tail_h[]; };
#else
layout(binding = NORM_TAIL + 3, std430) writeonly buffer TailQ { uvec4 tail_q[]; };
layout(binding = NORM_TAIL + 4, std430) writeonly buffer TailS { vec4 tail_s[]; };
#endif
layout(binding = NORM_TAIL + 5, std430) writeonly buffer TailY { vec4 tail_y[]; };

shared float tail_red[WG / MIN_SUBGROUP];

#ifdef TAIL_F16
// As norm_rows, the rows in parallel: `per` warps a row (h_stride in halves, a multiple of 4).
void norm_rows_f16(uint x_off, uint x_stride, uint cols, uint rows, uint y_off, uint y_stride, uint h_stride, float eps) {
  const uint nw = gl_NumSubgroups, w = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint per = max(1u, nw / rows), pass = nw / per, span = per * gl_SubgroupSize, part = w % per;
  for (uint t0 = 0u; t0 < rows; t0 += pass) {
    const uint t = t0 + w / per;
    const bool live = w / per < pass && t < rows;  // uniform per warp
    const uint xo = (x_off + t * x_stride) >> 2;
    float ss = 0.0;
    if (live)
      for (uint i = part * gl_SubgroupSize + lane; i < cols / 4u; i += span) {
        const vec4 v = tail_x[xo + i];
        ss += dot(v, v);
      }
    ss = subgroupAdd(ss);
    if (subgroupElect()) tail_red[w] = ss;
    barrier();
    float total = 0.0;
    for (uint j = 0u; j < per; ++j) total += tail_red[w - part + j];
    barrier();  // tail_red is written again by the next pass
    if (live) {
      const float scale = 1.0 / sqrt(total / float(cols) + eps);
      const uint yo = (y_off + t * y_stride) >> 2, ho = (t * h_stride) >> 2;
      for (uint i = part * gl_SubgroupSize + lane; i < cols / 4u; i += span) {
        const vec4 v = tail_x[xo + i] * scale * tail_w[i];
        tail_y[yo + i] = v;
        tail_h[ho + i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
      }
    }
  }
}
#else

// Rows of `cols` floats (a multiple of 32) at x_off + t·x_stride (multiples of 4), t < rows, read
// through TailX. The whole workgroup calls it (moe_combine_tail.glsl: after writing the rows).
void norm_rows(uint x_off, uint x_stride, uint cols, uint rows, uint y_off, uint y_stride, uint q_stride, uint s_stride,
               float eps) {
  const uint tid = gl_LocalInvocationIndex;
  for (uint t = 0u; t < rows; ++t) {
    const uint xo = (x_off + t * x_stride) >> 2;
    float ss = 0.0;
    for (uint i = tid; i < cols / 4u; i += WG) {
      const vec4 v = tail_x[xo + i];
      ss += dot(v, v);
    }
    ss = subgroupAdd(ss);
    if (subgroupElect()) tail_red[gl_SubgroupID] = ss;
    barrier();
    float total = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) total += tail_red[g];
    barrier();  // tail_red is written again by the next row
    const float scale = 1.0 / sqrt(total / float(cols) + eps);
    const uint yo = (y_off + t * y_stride) >> 2;
    for (uint b = tid; b < cols / 32u; b += WG) {
      vec4 v[8];
      for (uint i = 0u; i < 8u; ++i) {
        v[i] = tail_x[xo + 8u * b + i] * scale * tail_w[8u * b + i];
        tail_y[yo + 8u * b + i] = v[i];
      }
      const q8_block qb = q8_quantize(v);
      const uint qo = t * q_stride + 2u * b;
      tail_q[qo] = qb.lo;
      tail_q[qo + 1u] = qb.hi;
      tail_s[t * s_stride + b] = qb.s;
    }
  }
}

#endif

void norm_tail(uint x_off, uint x_stride, uint cols, uint rows, uint y_off, uint y_stride, uint q_stride, uint s_stride,
               float eps) {
#ifdef TAIL_F16
  if (last_workgroup()) norm_rows_f16(x_off, x_stride, cols, rows, y_off, y_stride, q_stride, eps);
#else
  if (last_workgroup()) norm_rows(x_off, x_stride, cols, rows, y_off, y_stride, q_stride, s_stride, eps);
#endif
}
