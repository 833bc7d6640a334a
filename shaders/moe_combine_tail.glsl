// The MoE combine as the tail of the experts' down matvec (mmvq.glsl MOE_IDS): its last
// workgroup (last_workgroup.glsl) sums each token's k expert rows, weighted by the router's
// weights unless the input already was, adds the residual (moe.glsl MOE_COMBINE RESIDUAL, the
// same order of additions), and with NORM_TAIL runs the next RMS norm over the sums
// (norm_tail.glsl norm_rows; its TailX binding is the output rows again, and its slot +0 may be
// this tail's last binding: the counter is this tail's).
// Bindings from MOE_COMBINE_TAIL: +0 the counter, +1 router weights, +2 output rows, +3 residual
// rows, +4 the expert rows (the matvec's output again).
#ifdef NORM_TAIL
#define MOE_COMBINE_NORM_PC uint ct_norm_y_off, ct_norm_y_stride, ct_q_stride, ct_s_stride; float ct_eps;
#else
#define MOE_COMBINE_NORM_PC
#endif
#define MOE_COMBINE_TAIL_PC uint ct_k, ct_out_off, ct_out_stride, ct_r_off, ct_r_stride, ct_weighted; MOE_COMBINE_NORM_PC

layout(binding = MOE_COMBINE_TAIL + 1, std430) readonly buffer CtWts { float ct_wts[]; };
layout(binding = MOE_COMBINE_TAIL + 2, std430) coherent writeonly buffer CtOut { float ct_out[]; };
layout(binding = MOE_COMBINE_TAIL + 3, std430) readonly buffer CtRes { float ct_res[]; };
layout(binding = MOE_COMBINE_TAIL + 4, std430) coherent readonly buffer CtRows { float ct_rows[]; };

// tokens x cols outputs; expert row (t * k + j) of the matvec's output at y_off + row * y_stride.
void moe_combine_rows(uint tokens, uint k, uint cols, uint y_off, uint y_stride, uint out_off, uint out_stride, uint r_off,
                      uint r_stride, bool weighted) {
  for (uint t = 0u; t < tokens; ++t)
    for (uint i = gl_LocalInvocationIndex; i < cols; i += WG) {
      float acc = 0.0;
      for (uint j0 = 0u; j0 < k; j0 += 8u) {  // eight loads in flight, then their sums in order
        float v[8], f[8];
        [[unroll]] for (uint jj = 0u; jj < 8u; ++jj) {
          const uint j = min(j0 + jj, k - 1u);
          f[jj] = weighted ? ct_wts[t * k + j] : 1.0;
          v[jj] = ct_rows[y_off + (t * k + j) * y_stride + i];
        }
        [[unroll]] for (uint jj = 0u; jj < 8u; ++jj)
          if (j0 + jj < k) acc += f[jj] * v[jj];
      }
      acc = ct_res[r_off + t * r_stride + i] + acc;
      ct_out[out_off + t * out_stride + i] = acc;
    }
}

#ifdef NORM_TAIL
#define MOE_COMBINE_TAIL_CALL()                                                                                           \
  if (last_workgroup()) {                                                                                                \
    moe_combine_rows(p.n_tok / p.ct_k, p.ct_k, p.N, p.y_off, p.y_stride, p.ct_out_off, p.ct_out_stride, p.ct_r_off,      \
                     p.ct_r_stride, p.ct_weighted != 0u);                                                                \
    memoryBarrierBuffer();                                                                                               \
    barrier(); /* the sums are written: the norm reads them back */                                                     \
    norm_rows(p.ct_out_off, p.ct_out_stride, p.N, p.n_tok / p.ct_k, p.ct_norm_y_off, p.ct_norm_y_stride, p.ct_q_stride,  \
              p.ct_s_stride, p.ct_eps);                                                                                  \
  }
#else
#define MOE_COMBINE_TAIL_CALL()                                                                                           \
  if (last_workgroup())                                                                                                  \
    moe_combine_rows(p.n_tok / p.ct_k, p.ct_k, p.N, p.y_off, p.y_stride, p.ct_out_off, p.ct_out_stride, p.ct_r_off,      \
                     p.ct_r_stride, p.ct_weighted != 0u);
#endif
