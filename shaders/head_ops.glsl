// Per-head ops on rows held in shared memory, shared by attn_prep.glsl (one row a workgroup: a
// query head or a K head) and attention.glsl HEAD_OPS (its query head and its group's K row
// together). Flag bits of a row's ops, in this order:
//   1 PRE_NORM   RMS norm with a weight (Qwen3 q_norm / k_norm)
//   2 ROPE       rotary embedding (NORM pairs 2i,2i+1 or NEOX pairs i,i+n_rot/2)
//   4 POST_NORM  RMS norm without weight (Llama 4 RoPE layers)
//   8 TEMP       position scale (Llama 4), applied by the caller as it writes the query:
//                head_temperature()
// Every row gets the same float operations in the same order whatever HO_ROWS is: the two kernels'
// rows agree bit for bit on lavapipe; a GPU compiler may still schedule them differently (the
// H200's differ in the last bits; `precise` on the norms' sums and RoPE did not change that). The including shader defines ho_freq_factor() (rope_freqs).
#ifndef HO_ROWS
#define HO_ROWS 1
#endif
const uint HO_MAXD = 256, HO_PER = (HO_MAXD + WG - 1) / WG;
shared float ho_h[HO_ROWS][HO_MAXD];
shared float ho_red[HO_ROWS][WG / MIN_SUBGROUP];

float ho_freq_factor(uint i);

// Per-row sums over the workgroup of one partial a thread (barriers: uniform control flow).
void ho_row_sums(inout float s[HO_ROWS]) {
  [[unroll]] for (uint r = 0; r < HO_ROWS; ++r) s[r] = subgroupAdd(s[r]);
  barrier();  // ho_red may still be read by the previous reduction
  if (subgroupElect())
    [[unroll]] for (uint r = 0; r < HO_ROWS; ++r) ho_red[r][gl_SubgroupID] = s[r];
  barrier();
  [[unroll]] for (uint r = 0; r < HO_ROWS; ++r) {
    float t = 0.0;
    for (uint g = 0; g < gl_NumSubgroups; ++g) t += ho_red[r][g];
    s[r] = t;
  }
}

// RMS-normalises the rows whose ops have `bit`, times their weights nw when `weighted`.
void ho_norm(const uint ops[HO_ROWS], uint bit, bool weighted, const float nw[HO_ROWS][HO_PER], uint D, float eps) {
  const uint tid = gl_LocalInvocationID.x;
  float s[HO_ROWS];
  [[unroll]] for (uint r = 0; r < HO_ROWS; ++r) {
    s[r] = 0.0;
    for (uint i = tid; i < D; i += WG) s[r] += ho_h[r][i] * ho_h[r][i];
  }
  ho_row_sums(s);
  [[unroll]] for (uint r = 0; r < HO_ROWS; ++r) {
    if ((ops[r] & bit) == 0u) continue;
    const float scale = 1.0 / sqrt(s[r] / float(D) + eps);
    [[unroll]] for (uint k = 0; k < HO_PER; ++k) {
      const uint i = tid + k * WG;
      if (i < D) ho_h[r][i] = weighted ? (ho_h[r][i] * scale) * nw[r][k] : ho_h[r][i] * scale;
    }
  }
  barrier();
}

// The ops of bits 1-4 on every row (ops uniform over the workgroup). ho_h must be visible (a
// barrier after its stores); it is again on return. flags: bit 16 NEOX pairs, bit 17 rope_freqs.
void head_ops(const uint ops[HO_ROWS], const float nw[HO_ROWS][HO_PER], uint D, uint n_rot, float base,
              float freq_scale, float eps, uint flags, int pos_t) {
  const uint tid = gl_LocalInvocationID.x;
  uint any = 0u;
  [[unroll]] for (uint r = 0; r < HO_ROWS; ++r) any |= ops[r];
  if ((any & 1u) != 0u) ho_norm(ops, 1u, true, nw, D, eps);
  if ((any & 2u) != 0u) {
    const uint half_rot = n_rot / 2;
    const bool neox = (flags & (1u << 16)) != 0, has_ff = (flags & (1u << 17)) != 0;
    float r0[HO_ROWS][HO_MAXD / 2 / WG + 1], r1[HO_ROWS][HO_MAXD / 2 / WG + 1];
    uint k = 0;
    for (uint i = tid; i < half_rot; i += WG, ++k) {  // read every pair before any is written
      const float theta = float(pos_t) * pow(base, -2.0 * float(i) / float(n_rot));
      const float f = freq_scale * (theta / (has_ff ? ho_freq_factor(i) : 1.0));
      const float c = cos(f), sn = sin(f);
      const uint a = neox ? i : 2 * i, b = neox ? i + half_rot : 2 * i + 1;
      [[unroll]] for (uint r = 0; r < HO_ROWS; ++r) {
        const float x0 = ho_h[r][a], x1 = ho_h[r][b];
        r0[r][k] = x0 * c - x1 * sn;
        r1[r][k] = x0 * sn + x1 * c;
      }
    }
    barrier();
    k = 0;
    for (uint i = tid; i < half_rot; i += WG, ++k)
      [[unroll]] for (uint r = 0; r < HO_ROWS; ++r) {
        if ((ops[r] & 2u) == 0u) continue;
        ho_h[r][neox ? i : 2 * i] = r0[r][k];
        ho_h[r][neox ? i + half_rot : 2 * i + 1] = r1[r][k];
      }
    barrier();
  }
  if ((any & 4u) != 0u) ho_norm(ops, 4u, false, nw, D, eps);
}

// Llama 4's attention temperature at position pos_t (op bit 8).
float head_temperature(int pos_t, float temp_scale, float temp_floor_base) {
  return log(floor((float(pos_t) + 1.0) / temp_floor_base) + 1.0) * temp_scale + 1.0;
}
