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
#define NORM_TAIL_PC uint tail_x_off, tail_x_stride, tail_cols, tail_rows, tail_y_off, tail_y_stride, tail_q_stride, tail_s_stride; float tail_eps;
#define NORM_TAIL_CALL() norm_tail(p.tail_x_off, p.tail_x_stride, p.tail_cols, p.tail_rows, p.tail_y_off, p.tail_y_stride, \
                                   p.tail_q_stride, p.tail_s_stride, p.tail_eps)

layout(binding = NORM_TAIL + 1, std430) coherent readonly buffer TailX { vec4 tail_x[]; };
layout(binding = NORM_TAIL + 2, std430) readonly buffer TailW { vec4 tail_w[]; };
layout(binding = NORM_TAIL + 3, std430) writeonly buffer TailQ { uvec4 tail_q[]; };
layout(binding = NORM_TAIL + 4, std430) writeonly buffer TailS { vec4 tail_s[]; };
layout(binding = NORM_TAIL + 5, std430) writeonly buffer TailY { vec4 tail_y[]; };

shared float tail_red[WG / MIN_SUBGROUP];

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

void norm_tail(uint x_off, uint x_stride, uint cols, uint rows, uint y_off, uint y_stride, uint q_stride, uint s_stride,
               float eps) {
  if (last_workgroup()) norm_rows(x_off, x_stride, cols, rows, y_off, y_stride, q_stride, s_stride, eps);
}
