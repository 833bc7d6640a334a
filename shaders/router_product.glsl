// Decode's MoE router logits as two parts that need no level of their own (backend_tuning::
// router_product; the host side is runtime/vulkan/router_product.cpp). With x = h + W_o a the FFN
// norm's input (h the residual, a the O projection's input) and R' the router times the norm's
// weight, the logits are (R' h + M a) / rms(x), M = R' W_o precomputed at load. This kernel writes
// one part: row e of a product dotted with one token's input,
//  - without INPUT_Q8: R' against the f32 residual h (run beside the attention, before the O
//    projection adds into h in place);
//  - INPUT_Q8: M against the O projection's own int8 input (quantize_q8.glsl blocks), so the parts
//    see the a the projection sees (run beside the projection).
// The gate/up matvec's top-k (moe_topk.glsl TOPK_PARTS, TOPK_LPARTS 2) adds the parts and applies
// the 1 / rms from the projection's NORM_OUT block sums. One workgroup a (row, token); thread i
// takes the input's 32-element blocks i, i + WG, ... with its 8 row loads in flight first.
// Bindings: 0 the products (f32 rows of K), 1 the input (f32 rows, or int8 codes as uvec4),
// 2 the codes' block scales (INPUT_Q8; else unused), 3 the parts [token][part][expert].
layout(local_size_x = WG) in;
layout(binding = 0, std430) readonly buffer W4 { vec4 w4[]; };
#ifdef INPUT_Q8
layout(binding = 1, std430) readonly buffer XQ { uvec4 xq[]; };
layout(binding = 2, std430) readonly buffer XS { vec4 xs[]; };
#else
layout(binding = 1, std430) readonly buffer X4 { vec4 x4[]; };
#endif
layout(binding = 3, std430) writeonly buffer Parts { float parts[]; };
layout(push_constant) uniform Params {
  uint K;                 // the product's row length and the input's (a multiple of 32)
  uint w_off;             // the product's row 0, in vec4
  uint x_off, x_stride;   // f32 input: in vec4; INPUT_Q8: the codes, in uvec4 (16 codes)
  uint s_off, s_stride;   // INPUT_Q8: the block scales, in vec4
  uint out_off, out_stride;  // the part's expert 0 of token 0 and the token stride, in floats
} p;

shared float red[WG / MIN_SUBGROUP];

#ifdef INPUT_Q8
vec4 codes4(uint u) { return vec4(i8x4(u)); }
#endif

void main() {
  const uint e = gl_WorkGroupID.x, t = gl_WorkGroupID.y, nb = p.K / 32u;
  const uint wrow = p.w_off + e * (p.K / 4u);
  float acc = 0.0;
  for (uint b = gl_LocalInvocationIndex; b < nb; b += WG) {
    vec4 w[8];
    [[unroll]] for (uint j = 0u; j < 8u; ++j) w[j] = w4[wrow + b * 8u + j];
#ifdef INPUT_Q8
    const uint q0 = p.x_off + t * p.x_stride + 2u * b;
    const uvec4 lo = xq[q0], hi = xq[q0 + 1u];
    const float d = xs[p.s_off + t * p.s_stride + b].x;
    const float s = ((dot(w[0], codes4(lo.x)) + dot(w[1], codes4(lo.y))) + (dot(w[2], codes4(lo.z)) + dot(w[3], codes4(lo.w)))) +
                    ((dot(w[4], codes4(hi.x)) + dot(w[5], codes4(hi.y))) + (dot(w[6], codes4(hi.z)) + dot(w[7], codes4(hi.w))));
    acc += d * s;
#else
    const uint x0 = p.x_off + t * p.x_stride + b * 8u;
    float s = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; ++j) s += dot(w[j], x4[x0 + j]);
    acc += s;
#endif
  }
  acc = subgroupAdd(acc);
  if (subgroupElect()) red[gl_SubgroupID] = acc;
  barrier();
  if (gl_LocalInvocationIndex == 0u) {
    float total = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) total += red[g];
    parts[p.out_off + t * p.out_stride + e] = total;
  }
}
