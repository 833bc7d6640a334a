// Mixture-of-experts routing and combination on the GPU, one entry point per MOE_STAGE:
//  MOE_TOPK     one workgroup per token: top-k experts of the router logits (ties: lower id
//               first) and their weights (softmax over all experts renormalised over the k,
//               or sigmoid for Llama 4) -> ids[t*k + j], wts[t*k + j].
//  MOE_GATHER   Llama 4 weights the expert input: xin[pair] = x[pair / k] * wts[pair].
//  MOE_COMBINE  out[t] = sum_j f_j * y[t*k + j], f_j = wts (or 1 when the input was weighted).
layout(local_size_x = WG) in;
layout(binding = 1, std430) buffer Ids { int ids[]; };
layout(binding = 2, std430) buffer Wts { float wts[]; };
layout(binding = 3, std430) readonly buffer S { float s[]; };
layout(binding = 4, std430) writeonly buffer D { float d[]; };
layout(push_constant) uniform Params { uint n_expert, k, cols, s_off, s_stride, d_off, d_stride, weighted; } p;

#if defined(MOE_TOPK)
shared float logit[256];
shared uint taken[256];
void main() {
  const uint t = gl_WorkGroupID.x;
  for (uint e = gl_LocalInvocationID.x; e < p.n_expert; e += WG) {
    logit[e] = s[p.s_off + t * p.s_stride + e];
    taken[e] = 0;
  }
  barrier();
  if (gl_LocalInvocationID.x != 0) return;
  float mx = logit[0];
  for (uint e = 1; e < p.n_expert; ++e) mx = max(mx, logit[e]);
  float sum = 0.0;
  for (uint e = 0; e < p.n_expert; ++e) sum += exp(logit[e] - mx);
  float wsum = 0.0;
  for (uint j = 0; j < p.k; ++j) {
    uint best = 0xFFFFFFFFu;
    for (uint e = 0; e < p.n_expert; ++e)
      if (taken[e] == 0 && (best == 0xFFFFFFFFu || logit[e] > logit[best])) best = e;
    taken[best] = 1;
    ids[t * p.k + j] = int(best);
#ifdef ROUTER_SIGMOID
    wts[t * p.k + j] = 1.0 / (1.0 + exp(-logit[best]));
#else
    const float w = exp(logit[best] - mx) / sum;
    wts[t * p.k + j] = w;
    wsum += w;
#endif
  }
#ifndef ROUTER_SIGMOID
  wsum = max(wsum, 6.103515625e-5);
  for (uint j = 0; j < p.k; ++j) wts[t * p.k + j] /= wsum;
#endif
}
#elif defined(MOE_GATHER)
void main() {
  const uint i = gl_GlobalInvocationID.x, pair = gl_WorkGroupID.y;
  if (i >= p.cols) return;
  d[p.d_off + pair * p.d_stride + i] = s[p.s_off + (pair / p.k) * p.s_stride + i] * wts[pair];
}
#elif defined(MOE_COMBINE)
void main() {
  const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (i >= p.cols) return;
  float acc = 0.0;
  for (uint j = 0; j < p.k; ++j) {
    const float f = p.weighted != 0 ? wts[t * p.k + j] : 1.0;
    acc += f * s[p.s_off + (t * p.k + j) * p.s_stride + i];
  }
  d[p.d_off + t * p.d_stride + i] = acc;
}
#endif
