// The deferred work the Vulkan backend's recorder holds while fusing ops (fusion.cpp): norms
// waiting for the matmuls that read them, matmuls waiting for a residual add or their SwiGLU
// partner, Q/K head ops waiting for kv_store(), an MoE combine waiting for the residual add, and
// attn_prep's codes waiting for the attention. Private to runtime/vulkan.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "backend.hpp"
#include "commands.hpp"
#include "pipelines.hpp"
#include "push_constants.hpp"
#include "strata/graph/backend_contract.hpp"

namespace strata::gpu {

// An RMS norm (weighted when w) of x into y, not recorded yet.
struct pending_norm {
  tensor x, y;
  const weight* w = nullptr;
  float eps = 0;
};
struct pending_matmul {
  const weight* w = nullptr;
  tensor x{}, y{};
  std::optional<pending_norm> norm{};
  std::optional<tensor> residual{};
  const weight* up = nullptr;
  bool gemm_pair = false;  // waits only to pair with an up matmul on the f16 GEMM (no residual joins it)
  std::optional<pending_norm> tail{};  // the next norm of y, run by this dispatch's last workgroup
  // The next norm of y, half done here (mmvq NORM_OUT: y times its weight as int8 codes, block
  // sums of y^2) and half by the matvecs that read it (RMS_IN); kept only while a matmul
  // reading that norm's output follows (try_norm_out()).
  std::optional<pending_norm> norm_out{};
  struct topk_t {
    std::uint32_t n_expert, k;
    bool sigmoid;
  };
  std::optional<topk_t> topk{};  // a router: its top-k, run by the last workgroup if the path allows
  // With norm_out: the MoE router (f32) whose logits this dispatch writes as per-block parts
  // (mmvq.glsl ROUTER_PARTS) for the gate/up matvec's top-k (moe_ffn). norm_out_by_tails: the
  // projection cannot own whole blocks (norm_out_fits), so it writes the norm's first half from one
  // token's block tails (record_norm_out_projection), for an MoE router's parts or product or an
  // integer matvec reading the norm (block_norm_out); any other reader resets it.
  const weight* router = nullptr;
  bool norm_out_by_tails = false;
};
// The MoE router's logits, ranked by every workgroup of the experts' gate/up matvec first
// (mmvq.glsl TOPK_IN) instead of read from the ids a MOE_TOPK dispatch wrote (per-pair gate/up
// only); with parts they come as parts to sum (ROUTER_PARTS' per-block parts or router_product.glsl's
// two) and the input as NORM_OUT's codes (TOPK_PARTS, RMS_IN).
struct topk_in_t {
  tensor logits;
  std::uint32_t n_expert = 0;
  bool sigmoid = false;
  bool parts = false;  // logits are parts in parts_buf: summed, then scaled by the norm
  float eps = 0;       // with parts: the FFN norm's epsilon
  // With parts: their buffer and count a token ([token][part][expert]); 0 parts: one a 32-row block (ROUTER_PARTS).
  std::uint32_t parts_buf = 0, n_parts = 0;
};
// What one of the integer matvec's two scratch slots holds now (valid until its buffer is written).
struct quantized_input {
  tensor x;
  const weight* norm_w = nullptr;
  float eps = 0;
  bool raw = false;  // NORM_OUT's codes: the 1 / rms (from rms_sq of the slot) still to apply
};
// A per-head op on Q or K (weighted / plain RMS norm, RoPE, temperature) and the ops of one tensor.
struct head_op {
  enum kind_t { norm_w, norm, rope, temp } kind = norm;
  const weight* w = nullptr;  // norm_w
  float eps = 0;              // norm_w, norm
  graph::rope_params rp{};    // rope
  const weight* ff = nullptr;  // rope: frequency factors (rope_freqs), if any
  graph::position_scale_params ps{};  // temp
};
struct head_tensor {
  tensor t;  // all heads of the step's tokens: rows = tokens, cols = n_heads * head_dim
  std::uint32_t n_heads = 0;
  std::vector<head_op> ops;
};
// An MoE layer's combine waits one op, so the decoder's residual add can join it (RESIDUAL).
struct pending_combine {
  moe_pc pc;
  tensor y, out;
  std::optional<tensor> residual;    // out = residual + sum, once the residual add has joined
  std::optional<pending_norm> tail;  // the next norm of out, run by the last workgroup
  // The experts' down matvec that writes y, not yet recorded: with the residual joined, its
  // last workgroup runs the combine (moe_combine_tail.glsl; STRATA_VK_TAIL decode steps).
  struct down_t {
    const weight* w = nullptr;
    std::uint32_t slot = 0, pairs = 0;
    bool block = false;  // its workgroups combine each 32-row block (moe_block_tail.glsl) where the next norm joins
    bool last_wg = false;  // or its last workgroup combines all rows (record_down_combine) where no block tail can
  };
  std::optional<down_t> down;
  // The next norm's first half (moe.glsl NORM_OUT), kept while the op after the norm is a
  // matmul that reads it (try_norm_out()).
  std::optional<pending_norm> norm_out;
};
// attn_prep's codes (kv_encode.glsl KV_PART 2), recorded after the attention's dispatch; or
// (head_ops) attn_prep itself over an f16/f32 cache, which the attention of q may run in its own
// kernel (attention.glsl HEAD_OPS) and otherwise records first.
struct pending_encode {
  pipeline_request r;
  std::vector<binding> b;
  attn_prep_pc pc;
  std::uint32_t gx, gy;
  bool head_ops = false;
  tensor q{};
};

}  // namespace strata::gpu
