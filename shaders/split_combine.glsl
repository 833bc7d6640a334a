// The flash-decoding merge of a split decode attention (attention.glsl COMBINE, the same
// arithmetic) as the tail of the split kernel (attention_dec.glsl / attention_qdec.glsl SPLIT):
// the workgroups of one (token, KV head) count themselves in on their own counter once their
// partial (acc, m, l) is written; the last of the n_splits merges the partials of the group's
// G query heads into the output and puts the counter back to 0. Saves the COMBINE dispatch and
// the barrier before it in every layer of a long-context decode step.
// Bindings: SPLIT_COMBINE the counters (one per token and KV head, 0 between dispatches); the
// kernel's partials (binding 0) and output (binding 7) through coherent aliases. The kernel
// declares its partials TAIL_COHERENT and calls split_combine() on every path out of main().
#define TAIL_COHERENT coherent

layout(binding = SPLIT_COMBINE, std430) coherent buffer SplitCounters { uint split_counter[]; };
layout(binding = 0, std430) coherent readonly buffer SplitPart { float split_part[]; };
layout(binding = 7, std430) writeonly buffer SplitOut { float split_out[]; };
shared bool split_is_last;

void split_combine(uint t, uint hk, uint G_, uint D_, uint n_head, uint n_head_kv, uint n_splits, uint o_off,
                   uint o_stride) {
  memoryBarrierBuffer();  // this workgroup's partial is visible device-wide before it counts in
  barrier();
  if (gl_LocalInvocationIndex == 0u) {
    const uint c = t * n_head_kv + hk;
    split_is_last = atomicAdd(split_counter[c], 1u) == n_splits - 1u;
    if (split_is_last) split_counter[c] = 0u;
  }
  barrier();
  if (!split_is_last) return;
  memoryBarrierBuffer();
  for (uint i = gl_LocalInvocationIndex; i < G_ * D_; i += WG) {
    const uint h = hk * G_ + i / D_, d = i % D_;
    const uint base = (t * n_head + h) * n_splits * (D_ + 2u);
    float M = -1.0 / 0.0;
    for (uint s = 0u; s < n_splits; ++s) M = max(M, split_part[base + s * (D_ + 2u) + D_]);
    float L = 0.0;
    for (uint s = 0u; s < n_splits; ++s) {
      const uint b = base + s * (D_ + 2u);
      L += split_part[b + D_ + 1u] * exp(split_part[b + D_] - M);
    }
    float a = 0.0;
    for (uint s = 0u; s < n_splits; ++s) {
      const uint b = base + s * (D_ + 2u);
      const float mv = split_part[b + D_];
      if (mv > -1.0 / 0.0) a += split_part[b + d] * exp(mv - M);
    }
    split_out[o_off + t * o_stride + h * D_ + d] = a / L;
  }
}

// Workgroup (KV head, token, split) of the grouped decode kernels; G and D are theirs.
#define SPLIT_COMBINE_CALL() \
  split_combine(gl_WorkGroupID.y, gl_WorkGroupID.x, G, D, p.n_head, p.n_head_kv, p.n_splits, p.o_off, p.o_stride)
