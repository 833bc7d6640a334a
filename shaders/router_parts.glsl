// The MoE router's logits as per-block parts, written by the dispatch that produces the FFN
// norm's input (mmvq.glsl ROUTER_PARTS = the experts, in its NORM_OUT form or its block tails):
// for a 32-row block of one token, sum over the block's rows of router[e][row] x (y[row] x the
// norm's weight). The gate/up matvec's top-k (moe_topk.glsl TOPK_PARTS) sums a token's blocks and
// applies the 1 / rms, so the router has no dispatch of its own. Bindings ROUTER_PARTS_AT: the
// router's f32 rows [expert][rows]; + 1 the parts [token][rows / 32][expert].
layout(binding = ROUTER_PARTS_AT, std430) readonly buffer RouterW { vec4 router_w4[]; };
layout(binding = ROUTER_PARTS_AT + 1, std430) writeonly buffer RouterParts { float router_part[]; };

// Called by every invocation; v: block blk's 32 values (rows 32 blk ..), n_rows the router's row
// length. A thread an expert: its row's 32 columns are 128 contiguous bytes, loaded before the sum.
void router_part_block(uint tok, uint blk, uint n_rows, vec4 v[8]) {
#ifdef ROUTER_PARTS_LAB  // lab (wrong results): no parts written, the bound with the router free
  return;
#endif
  for (uint e = gl_LocalInvocationIndex; e < ROUTER_PARTS; e += WG) {
    const uint w0 = (e * n_rows) / 4u + blk * 8u;
    vec4 wr[8];
    [[unroll]] for (uint j = 0u; j < 8u; ++j) wr[j] = router_w4[w0 + j];
    float s = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; ++j) s += dot(wr[j], v[j]);
    router_part[(tok * (n_rows / 32u) + blk) * ROUTER_PARTS + e] = s;
  }
}
