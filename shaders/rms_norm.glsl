// y = x / sqrt(mean(x^2) + eps) [* w], one workgroup per row (y may alias x).
// F16_OUT (with HAS_NORM_WEIGHT, even cols): y also as f16 into yh (rows h_stride halves apart
// from h_off), the tensor-core matmuls' input, so no copy dispatch follows the norm; the halves
// are the f32 results rounded as copy_rows TO_F16 rounds them. A row of at most 8 x WG keeps the
// elements each thread loaded for the sum in registers, with their weights loaded before the
// sum's reduction, so the output takes no second round trip (and no barrier: each thread writes
// only what it read).
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer X { float x[]; };
layout(binding = 2, std430) buffer Y { float y[]; };
#ifdef HAS_NORM_WEIGHT
layout(binding = 3, std430) readonly buffer Wt { float w[]; };
#endif
#ifdef F16_OUT
layout(binding = 4, std430) writeonly buffer YH { float16_t yh[]; };
#endif
layout(push_constant) uniform Params { uint cols, x_off, x_stride, y_off, y_stride; float eps; uint rows, h_off, h_stride; } p;

shared float red[WG / MIN_SUBGROUP];

void main() {
  // More rows than the device's x limit spill into z (backend dispatch()), rounded up.
  const uint r = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.z;
  if (r >= p.rows) return;  // uniform per workgroup, before any barrier
  const uint xb = p.x_off + r * p.x_stride, yb = p.y_off + r * p.y_stride;
  // Loads in batches of eight before their sums (same order): one load per loop iteration waited
  // out a memory latency each.
  float s = 0.0;
#ifdef F16_OUT
  const bool one = p.cols <= 8 * WG;  // uniform: one batch a thread, kept
  float xk[8], wk[8];
  if (one) {
    const uint i0 = gl_LocalInvocationID.x;
    [[unroll]] for (uint k = 0; k < 8; ++k) {
      const uint i = i0 + k * WG < p.cols ? i0 + k * WG : 0;
      xk[k] = x[xb + i];
      wk[k] = w[i];
    }
    [[unroll]] for (uint k = 0; k < 8; ++k)  // the loop below's order, so its scale, bit for bit
      if (i0 + k * WG < p.cols) s += xk[k] * xk[k];
  } else
#endif
  for (uint i0 = gl_LocalInvocationID.x; i0 < p.cols; i0 += 8 * WG) {
    float v[8];
    [[unroll]] for (uint k = 0; k < 8; ++k) v[k] = x[xb + (i0 + k * WG < p.cols ? i0 + k * WG : i0)];
    [[unroll]] for (uint k = 0; k < 8; ++k)
      if (i0 + k * WG < p.cols) s += v[k] * v[k];
  }
  s = subgroupAdd(s);
  if (subgroupElect()) red[gl_SubgroupID] = s;
  barrier();
  float sum = 0.0;
  for (uint g = 0; g < gl_NumSubgroups; ++g) sum += red[g];
  const float scale = 1.0 / sqrt(sum / float(p.cols) + p.eps);
#ifdef F16_OUT
  const uint hb = p.h_off + r * p.h_stride;
  if (one) {
    [[unroll]] for (uint k = 0; k < 8; ++k) {
      const uint i = gl_LocalInvocationID.x + k * WG;
      if (i < p.cols) {
        const float o = (xk[k] * scale) * wk[k];
        y[yb + i] = o;
        yh[hb + i] = f16_rounded(o);
      }
    }
    return;
  }
#endif
  barrier();  // x and y may alias: every thread has read its x before anyone writes
#ifdef F16_OUT
  // Element pairs 2j, 2j+1, four a batch (one memory latency).
  const uint pairs = p.cols / 2;
  for (uint j0 = gl_LocalInvocationID.x; j0 < pairs; j0 += 4 * WG) {
    vec2 v[4], wv[4];
    [[unroll]] for (uint k = 0; k < 4; ++k) {
      const uint j = j0 + k * WG < pairs ? j0 + k * WG : j0;  // past the row: this thread's own pair
      v[k] = vec2(x[xb + 2 * j], x[xb + 2 * j + 1]);
      wv[k] = vec2(w[2 * j], w[2 * j + 1]);
    }
    [[unroll]] for (uint k = 0; k < 4; ++k) {
      const uint j = j0 + k * WG;
      if (j < pairs) {
        const vec2 o = (v[k] * scale) * wv[k];
        y[yb + 2 * j] = o.x;
        y[yb + 2 * j + 1] = o.y;
        yh[hb + 2 * j] = f16_rounded(o.x);
        yh[hb + 2 * j + 1] = f16_rounded(o.y);
      }
    }
  }
#else
  for (uint i0 = gl_LocalInvocationID.x; i0 < p.cols; i0 += 8 * WG) {
    float v[8], wv[8];
    [[unroll]] for (uint k = 0; k < 8; ++k) {
      const uint i = i0 + k * WG < p.cols ? i0 + k * WG : i0;  // past the row: this thread's own element (y may alias x)
      v[k] = x[xb + i];
#ifdef HAS_NORM_WEIGHT
      wv[k] = w[i];
#else
      wv[k] = 1.0;
#endif
    }
    [[unroll]] for (uint k = 0; k < 8; ++k) {
      const uint i = i0 + k * WG;
#ifdef HAS_NORM_WEIGHT
      if (i < p.cols) y[yb + i] = (v[k] * scale) * wv[k];
#else
      if (i < p.cols) y[yb + i] = v[k] * scale;
#endif
    }
  }
#endif
}
