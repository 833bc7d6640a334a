// Q and K heads prepared for attention and the step's K/V rows appended to the cache, in one
// dispatch (it replaces per-head norms, two RoPE passes and the KV append: four barriers per
// layer). Workgroup (x, t): x < n_head is query head x of token t, rewritten in place; x >= n_head
// is KV head x - n_head, whose K row goes to the cache after its ops and whose V row is copied.
// Ops per side (head_ops.glsl's flag bits, q in bits 0-3, k in bits 8-11; bit 16 = NEOX, bit 17 =
// rope_freqs factors).
// KV_ENCODE (a cache with a compressed side; kv_codec.glsl's kinds): the KV-head workgroups
// encode K (after its ops) and V as kv_store_q.glsl does (kv_encode.glsl) and, with KV_RING,
// copy the compressed sides to the f16 ring of the full-precision window.
layout(local_size_x = WG) in;
layout(binding = 0, std430) buffer Q { float q[]; };
layout(binding = 1, std430) readonly buffer Ksrc { float ks[]; };
layout(binding = 2, std430) readonly buffer Vsrc { float vs[]; };
layout(binding = 3, std430) readonly buffer QNorm { float qnw[]; };
layout(binding = 4, std430) readonly buffer KNorm { float knw[]; };
#ifndef KV_ENCODE  // else kv_encode.glsl declares the cache, slot, position and ring buffers
#ifdef KV_K_F32
layout(binding = 5, std430) writeonly buffer Kc { float kc[]; };
#else
layout(binding = 5, std430) writeonly buffer Kc { float16_t kc[]; };
#endif
#ifdef KV_V_F32
layout(binding = 6, std430) writeonly buffer Vc { float vc[]; };
#else
layout(binding = 6, std430) writeonly buffer Vc { float16_t vc[]; };
#endif
layout(binding = 7, std430) readonly buffer Slots { uint slots[]; };
layout(binding = 8, std430) readonly buffer Pos { int pos[]; };
#endif
layout(binding = 9, std430) readonly buffer FreqFactors { float ff[]; };
#ifdef Q_ROT
// Q_ROT (TurboQuant keys): the query heads also rotated as attention_qdec scores the codes
// (kv_codec.glsl's rotation, the same float operations), once a head here instead of in every
// split workgroup of the attention (H200, qwen3-8b tq3 at depth 4096: the attention's two
// rotations were 12 of its 33 us a layer).
layout(binding = 14, std430) writeonly buffer QRot { vec4 qrot[]; };
#endif
layout(push_constant) uniform Params {
  uint n_head, n_kv, D, n_rot;
  uint q_off, q_stride, k_off, k_stride, v_off, v_stride;
  float base, freq_scale, eps;
  uint flags;
  uint ring_rows;  // KV_ENCODE with KV_RING
  float temp_scale, temp_floor_base;
} p;

const uint MAXD = HO_MAXD;
float ho_freq_factor(uint i) { return ff[i]; }

#ifdef KV_ENCODE
// kv_encode.glsl's source: K from ho_h (after its ops), V from the step's rows.
float src_at(uint side, uint i) { return side == 0u ? ho_h[0][i] : vs[i]; }
#endif

void main() {
  const uint x = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const bool is_q = x < p.n_head;
  const uint head = is_q ? x : x - p.n_head;
  const uint ops = is_q ? (p.flags & 15u) : ((p.flags >> 8) & 15u);
  const uint src = is_q ? p.q_off + t * p.q_stride + head * p.D : p.k_off + t * p.k_stride + head * p.D;
  for (uint i = tid; i < p.D; i += WG) ho_h[0][i] = is_q ? q[src + i] : ks[src + i];
  // Every other load whose address is known now is issued now, not after the ops' barriers (a
  // memory latency each): the norm weights, the position, the V row and the cache destination.
  float nw[1][HO_PER];
  [[unroll]] for (uint k = 0; k < HO_PER; ++k) {
    const uint i = tid + k * WG;
    nw[0][k] = (ops & 1u) != 0 && i < p.D ? (is_q ? qnw[i] : knw[i]) : 0.0;
  }
  const int pos_t = pos[t];
  const uint vsrc = p.v_off + t * p.v_stride + head * p.D;
#ifdef KV_ENCODE
  const kv_dest dst = kv_dest_of(head, t, p.n_kv, p.ring_rows);
#if KV_HAS_TQ
  // The TurboQuant encoder's V elements.
  const vec4 vx = is_q ? vec4(0.0) : tq_v_prefetch(vsrc);
#endif
#else
  const uint slot_t = slots[t];
  float vv[(MAXD + WG - 1) / WG];
  [[unroll]] for (uint k = 0; k < (MAXD + WG - 1) / WG; ++k) {
    const uint i = tid + k * WG;
    vv[k] = !is_q && i < p.D ? vs[vsrc + i] : 0.0;
  }
#endif
  barrier();

  const uint row_ops[1] = {ops};
  head_ops(row_ops, nw, p.D, p.n_rot, p.base, p.freq_scale, p.eps, p.flags, pos_t);
  const float temp = (ops & 8u) != 0 ? head_temperature(pos_t, p.temp_scale, p.temp_floor_base) : 1.0;

  if (is_q) {
    for (uint i = tid; i < p.D; i += WG) q[src + i] = ho_h[0][i] * temp;
#ifdef Q_ROT
    const uint e0 = 4u * (tid % TQ_TPV);
    const bool mine = tid < TQ_TPV && e0 < KD;
    vec4 x = mine ? vec4(ho_h[0][e0] * temp, ho_h[0][e0 + 1u] * temp, ho_h[0][e0 + 2u] * temp, ho_h[0][e0 + 3u] * temp) : vec4(0.0);
    x = tq_rotate_forward4(x, e0);  // by every thread: its exchanges may meet at barriers
    if (mine) qrot[((t * p.n_head + head) * KD + e0) / 4u] = x;
#endif
    return;
  }
#ifdef KV_ENCODE
#if KV_HAS_TQ
  kv_append_to(dst, head, 0u, vsrc, vx);
#else
  kv_append_to(dst, head, 0u, vsrc, vec4(0.0));
#endif
#else
  const uint row = p.n_kv * p.D;
  const uint dst = slot_t * row + head * p.D;
  [[unroll]] for (uint k = 0; k < (MAXD + WG - 1) / WG; ++k) {
    const uint i = tid + k * WG;
    if (i >= p.D) break;
#ifdef KV_K_F32
    kc[dst + i] = ho_h[0][i];
#else
    kc[dst + i] = float16_t(ho_h[0][i]);
#endif
#ifdef KV_V_F32
    vc[dst + i] = vv[k];
#else
    vc[dst + i] = float16_t(vv[k]);
#endif
  }
#endif
}
