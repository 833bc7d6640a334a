// The flash-decoding merge of a split decode attention (attention.glsl COMBINE's formula, a
// different summation order) as the tail of the split kernel (attention_dec.glsl / attention_qdec.glsl SPLIT):
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
const uint SPLIT_MAX = 8u * 128u;  // query heads of a group x splits (max_splits in backend.cpp)
shared float split_m[SPLIT_MAX], split_l[SPLIT_MAX];
shared float split_head_l[8];

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
  // Every split's (m, l) of the group's heads at once, a pair per thread; then per head the
  // maximum and the weights exp(m - M) in shared memory. A thread walking the splits itself
  // waited out a memory latency per split.
  for (uint i = gl_LocalInvocationIndex; i < G_ * n_splits; i += WG) {
    const uint b = (t * n_head + hk * G_ + i / n_splits) * n_splits * (D_ + 2u) + (i % n_splits) * (D_ + 2u) + D_;
    split_m[i] = split_part[b];
    split_l[i] = split_part[b + 1u];
  }
  barrier();
  if (gl_LocalInvocationIndex < G_) {
    const uint g0 = gl_LocalInvocationIndex * n_splits;
    float M = -1.0 / 0.0;
    for (uint s = 0u; s < n_splits; ++s) M = max(M, split_m[g0 + s]);
    float L = 0.0;
    for (uint s = 0u; s < n_splits; ++s) {
      const float w = split_m[g0 + s] > -1.0 / 0.0 ? exp(split_m[g0 + s] - M) : 0.0;
      split_m[g0 + s] = w;  // now the split's weight
      L += split_l[g0 + s] * w;
    }
    split_head_l[gl_LocalInvocationIndex] = L;
  }
  barrier();
  const uint n8 = n_splits / 8u * 8u;
  for (uint i = gl_LocalInvocationIndex; i < G_ * D_; i += WG) {
    const uint g = i / D_, h = hk * G_ + g, d = i % D_;
    const uint base = (t * n_head + h) * n_splits * (D_ + 2u);
    float a = 0.0;
    for (uint s0 = 0u; s0 < n8; s0 += 8u) {  // eight loads in flight, then their sums
      float v[8];
      [[unroll]] for (uint k = 0u; k < 8u; ++k) v[k] = split_part[base + (s0 + k) * (D_ + 2u) + d];
      [[unroll]] for (uint k = 0u; k < 8u; ++k) {
        const float w = split_m[g * n_splits + s0 + k];
        a += w != 0.0 ? v[k] * w : 0.0;  // an empty split wrote only m, l
      }
    }
    for (uint s = n8; s < n_splits; ++s) {
      const float w = split_m[g * n_splits + s];
      const float v = split_part[base + s * (D_ + 2u) + d];
      a += w != 0.0 ? v * w : 0.0;
    }
    split_out[o_off + t * o_stride + h * D_ + d] = a / split_head_l[g];
  }
}

// Workgroup (KV head, token, split) of the grouped decode kernels; G and D are theirs.
#define SPLIT_COMBINE_CALL() \
  split_combine(gl_WorkGroupID.y, gl_WorkGroupID.x, G, D, p.n_head, p.n_head_kv, p.n_splits, p.o_off, p.o_stride)
