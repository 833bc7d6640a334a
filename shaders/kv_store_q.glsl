// Appends the batch's K and V rows to a cache with a compressed side (q8_0 or TurboQuant;
// kv_codec.glsl has the kinds): one workgroup per (KV head, token) encodes that head vector of
// K and of V in its side's format at the token's slot and copies it to the window's f16 ring
// (kv_encode.glsl's kv_append, which has the cache bindings 5-8 and 10-13).
// attn_prep.glsl does the same after the heads' norms and RoPE when the decoder's ops fuse.
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer Ksrc { float ks[]; };
layout(binding = 2, std430) readonly buffer Vsrc { float vs[]; };
layout(push_constant) uniform Params { uint n_tok, n_head_kv, k_off, k_stride, v_off, v_stride, ring_rows; } p;

float src_at(uint side, uint i) { return side == 0u ? ks[i] : vs[i]; }

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  kv_append(h, t, p.k_off + t * p.k_stride + h * KD, p.v_off + t * p.v_stride + h * KD, p.n_head_kv, p.ring_rows);
}
