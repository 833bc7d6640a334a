// HEAD_OPS of the decode attention kernels (attention.glsl's per-head kernel, attention_dec.glsl's
// split grouped LANES form): steps over an f16/f32 cache, each token its sequence's only one, run
// attn_prep's work in the attention kernel, a level fewer a layer. A workgroup takes its query
// heads and its KV head's K row through the ops (head_ops.glsl, HO_ROWS = query heads + 1: the
// float operations of attn_prep's workgroups in their order), keeps the step's own key and value
// as the cache holds them in kself / vself, and one workgroup of each KV head appends them.
// Bindings from HEAD_OPS: the step's K and V rows (before their ops), the q / k norm weights, the
// step's cache slots, the rope_freqs factors. Binding 1 is the query before its ops; the cache
// bindings 2 and 3 are also written (the step's rows).
#define HEAD_OPS_PC                                                                      \
  uint window, ring_rows; /* attention_q's (the host's attention_pc), unused here */      \
  uint hp_n_head, hp_n_kv, hp_D, n_rot, hq_off, hq_stride, k_off, k_stride, v_off, v_stride; \
  float base, freq_scale, eps;                                                            \
  uint flags, hp_ring_rows;                                                               \
  float temp_scale, temp_floor_base;
layout(binding = 1, std430) readonly buffer HoQ { float ho_q[]; };
layout(binding = HEAD_OPS, std430) readonly buffer Ksrc { float ks[]; };
layout(binding = HEAD_OPS + 1, std430) readonly buffer Vsrc { float vs[]; };
layout(binding = HEAD_OPS + 2, std430) readonly buffer QNorm { float qnw[]; };
layout(binding = HEAD_OPS + 3, std430) readonly buffer KNorm { float knw[]; };
layout(binding = HEAD_OPS + 4, std430) readonly buffer Slots { uint slots[]; };
layout(binding = HEAD_OPS + 5, std430) readonly buffer FreqFactors { float ff[]; };
#ifdef KV_K_F32
layout(binding = 2, std430) writeonly buffer KcW { float kcw[]; };
#else
layout(binding = 2, std430) writeonly buffer KcW { float16_t kcw[]; };
#endif
#ifdef KV_V_F32
layout(binding = 3, std430) writeonly buffer VcW { float vcw[]; };
#else
layout(binding = 3, std430) writeonly buffer VcW { float16_t vcw[]; };
#endif
float ho_freq_factor(uint i) { return ff[i]; }
shared vec4 kself[HO_MAXD / 4], vself[HO_MAXD / 4];  // the step's own key and value

// attn_prep's push constants the ops read (the kernels' HEAD_OPS_PC fields: ho_src_of(p)).
struct ho_src {
  uint q_off, q_stride, k_off, k_stride, v_off, v_stride, n_rot, flags;
  float base, freq_scale, eps, temp_scale, temp_floor_base;
};
#define ho_src_of(P)                                                                                      \
  ho_src(P.hq_off, P.hq_stride, P.k_off, P.k_stride, P.v_off, P.v_stride, P.n_rot, P.flags, P.base,  \
         P.freq_scale, P.eps, P.temp_scale, P.temp_floor_base)

// Token t at position pos_t: query heads h0 .. h0 + HO_ROWS - 2 into ho_h rows 0 .., KV head hk's
// K row into the last, through their ops; kself / vself filled, the rows appended at the token's
// slot (row: floats a cache row) when `appends`. Called by every invocation (barriers); returns
// the queries' temperature (1 without TEMP). ho_h, kself and vself are visible on return.
float ho_run(ho_src s, uint t, uint h0, uint hk, uint D, uint row, uint pos_t, bool appends) {
  const uint tid = gl_LocalInvocationID.x, NQ = HO_ROWS - 1;
  for (uint i = tid; i < D; i += WG) {
    [[unroll]] for (uint g = 0; g < NQ; ++g) ho_h[g][i] = ho_q[s.q_off + t * s.q_stride + (h0 + g) * D + i];
    ho_h[NQ][i] = ks[s.k_off + t * s.k_stride + hk * D + i];
  }
  uint row_ops[HO_ROWS];
  [[unroll]] for (uint g = 0; g < NQ; ++g) row_ops[g] = s.flags & 15u;
  row_ops[NQ] = (s.flags >> 8) & 15u;
  float nw[HO_ROWS][HO_PER], vv[HO_PER];
  [[unroll]] for (uint k = 0; k < HO_PER; ++k) {
    const uint i = tid + k * WG;
    [[unroll]] for (uint g = 0; g < NQ; ++g) nw[g][k] = (row_ops[g] & 1u) != 0 && i < D ? qnw[i] : 0.0;
    nw[NQ][k] = (row_ops[NQ] & 1u) != 0 && i < D ? knw[i] : 0.0;
    vv[k] = i < D ? vs[s.v_off + t * s.v_stride + hk * D + i] : 0.0;
  }
  const uint slot_t = slots[t];
  barrier();
  head_ops(row_ops, nw, D, s.n_rot, s.base, s.freq_scale, s.eps, s.flags, int(pos_t));
  [[unroll]] for (uint k = 0; k < HO_PER; ++k) {
    const uint i = tid + k * WG;
    if (i >= D) break;
#ifdef KV_K_F32
    const float kx = ho_h[NQ][i];
#else
    const float16_t kx = float16_t(ho_h[NQ][i]);
#endif
#ifdef KV_V_F32
    const float vx = vv[k];
#else
    const float16_t vx = float16_t(vv[k]);
#endif
    kself[i / 4][i % 4] = float(kx);
    vself[i / 4][i % 4] = float(vx);
    if (appends) {
      kcw[slot_t * row + hk * D + i] = kx;
      vcw[slot_t * row + hk * D + i] = vx;
    }
  }
  barrier();  // kself / vself
  return (row_ops[0] & 8u) != 0 ? head_temperature(int(pos_t), s.temp_scale, s.temp_floor_base) : 1.0;
}
