// Appends the batch's K and V rows to a cache with a compressed side (q8_0 or TurboQuant;
// kv_codec.glsl has the kinds): one workgroup per (KV head, token) encodes that head vector of
// K and of V in its side's format at the token's slot (kv_encode.glsl, as
// kernels::cpu::kv_codec::encode does), and, with KV_RING, copies the compressed sides to the
// f16 ring of the full-precision window (row seq·ring_rows + pos mod ring_rows, tagged with pos).
// attn_prep.glsl does the same after the heads' norms and RoPE when the decoder's ops fuse.
layout(local_size_x = WG) in;
layout(binding = 0, std430) writeonly buffer Kc8 { uint8_t kc8[]; };
layout(binding = 0, std430) writeonly buffer Kc16 { uint16_t kc16[]; };
layout(binding = 0, std430) writeonly buffer Kc32 { float kc32[]; };
layout(binding = 1, std430) readonly buffer Ksrc { float ks[]; };
layout(binding = 2, std430) readonly buffer Vsrc { float vs[]; };
layout(binding = 3, std430) writeonly buffer Vc8 { uint8_t vc8[]; };
layout(binding = 3, std430) writeonly buffer Vc16 { uint16_t vc16[]; };
layout(binding = 3, std430) writeonly buffer Vc32 { float vc32[]; };
layout(binding = 4, std430) readonly buffer Slots { uint slots[]; };
layout(binding = 5, std430) writeonly buffer Kring { uint16_t kring[]; };
layout(binding = 6, std430) writeonly buffer Vring { uint16_t vring[]; };
layout(binding = 7, std430) writeonly buffer Tags { uint tags[]; };
layout(binding = 8, std430) readonly buffer Pos { int pos[]; };
layout(binding = 9, std430) readonly buffer SeqRow { uint seq_row[]; };
layout(push_constant) uniform Params { uint n_tok, n_head_kv, k_off, k_stride, v_off, v_stride, ring_rows; } p;

float src_at(uint side, uint i) { return side == 0u ? ks[i] : vs[i]; }
void put_u8(uint side, uint i, uint v) {
  if (side == 0u) kc8[i] = uint8_t(v);
  else vc8[i] = uint8_t(v);
}
void put_u16(uint side, uint i, uint v) {
  if (side == 0u) kc16[i] = uint16_t(v);
  else vc16[i] = uint16_t(v);
}
void put_f32(uint side, uint i, float v) {
  if (side == 0u) kc32[i] = v;
  else vc32[i] = v;
}

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint row = slots[t] * p.n_head_kv + h;
  const uint ksrc = p.k_off + t * p.k_stride + h * KD, vsrc = p.v_off + t * p.v_stride + h * KD;
  encode(0u, KV_K_KIND, ksrc, row);
  encode(1u, KV_V_KIND, vsrc, row);
#ifdef KV_RING
  const uint P = uint(pos[t]);
  const uint r = seq_row[t] * p.ring_rows + P % p.ring_rows;
  const uint base = (r * p.n_head_kv + h) * KD;
  for (uint i = tid; i < KD; i += WG) {
    if (KV_K_KIND >= 2) kring[base + i] = uint16_t(f32_to_f16_bits(ks[ksrc + i]));
    if (KV_V_KIND >= 2) vring[base + i] = uint16_t(f32_to_f16_bits(vs[vsrc + i]));
  }
  if (h == 0u && tid == 0u) tags[r] = P;
#endif
}
