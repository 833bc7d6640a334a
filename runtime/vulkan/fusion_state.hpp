// What the recorder holds between ops while fusing (fusion.cpp; the types in fusion_types.hpp):
// the deferred norms, matmuls, head ops, MoE combine and attn_prep codes, what the int8 slots and
// the f16 rows hold, and the flags the fused forms leave for the next op. A base of
// backend::impl; plain values only (buffer ids, tensors, pending ops: no Vulkan objects owned).
// Private to runtime/vulkan (includes Vulkan).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "fusion_types.hpp"

namespace strata::gpu {

struct fusion_state {
  // Peephole fusion while recording (STRATA_VK_FUSE=0 turns it off): an RMS norm whose only
  // consumers are matmuls is not dispatched but folded into their input (NORM_INPUT); matmuls
  // are held back one op so a following residual add (ADD_RESIDUAL) or, for a gate/up pair,
  // the SwiGLU (SWIGLU) joins their dispatch. The deferred ops' types are in fusion_types.hpp.
  using pending_norm = gpu::pending_norm;
  using pending_matmul = gpu::pending_matmul;
  using quantized_input = gpu::quantized_input;
  using head_op = gpu::head_op;
  using head_tensor = gpu::head_tensor;
  using pending_combine = gpu::pending_combine;
  using pending_encode = gpu::pending_encode;
  std::vector<pending_norm> norms;
  std::vector<pending_matmul> mats;
  std::vector<tensor> dropped;  // results of norms dropped unread: reading one is a bug
  static bool same(const tensor& a, const tensor& b) {
    return a.buf == b.buf && a.off == b.off && a.rows == b.rows && a.cols == b.cols && a.stride == b.stride;
  }

  // What the two int8 scratch slots (matmul_scratch.hpp xq) hold, and the last one written.
  std::optional<quantized_input> quantized[2];
  std::uint32_t last_slot = 1;
  std::optional<std::uint32_t> tail_slot;  // the quantized slot the tail just recorded wrote
  // The activation mm_xh holds as f16 (f16_input), until its buffer is written, and where in
  // mm_xh (halves) its rows start: 0, or xh_swiglu_at, the second region, where mul_mm_reg's
  // SWIGLU form writes them while its own input is read from the first (or the first where its
  // input is in the second).
  std::optional<tensor> xh_holds;
  std::uint32_t xh_at = 0;
  void holds_f16(const tensor& y, std::uint32_t at = 0) {  // a dispatch just wrote y's f16 rows at `at`
    xh_holds = y;
    xh_at = at;
  }

  // Per-head ops on Q and K (weighted / plain RMS norm, RoPE, temperature) wait for kv_store()'s attn_prep
  // dispatch. Any other op first records them one by one, in order (flush_heads): same results.
  std::vector<head_tensor> heads;
  bool keep_heads = false;  // set while a head op or kv_store() prepares its inputs
  std::optional<pending_combine> combine;
  std::uint32_t tail_counter = 0, block_counters = 0;  // buffer ids: last-workgroup counters, 0 between dispatches
  bool topk_done = false;  // the router matvec just recorded ran the top-k
  // attn_prep's codes (kv_encode.glsl KV_PART 2), recorded after the next dispatch, the attention's
  // (encode_next), so both run in one level (tuning.hpp encode_beside); other ops record it first.
  std::optional<pending_encode> encode;
  bool encode_next = false;
  // ROUTER_PARTS (moe_ffn, fusion.cpp record_router_parts): the parts' buffer id, the experts it holds, its tokens.
  std::uint32_t router_part_buf = 0, router_part_experts = 0, router_part_tokens = 8;
  // Whether the last record_matmul() wrote the parts / the next norm's first half (NORM_OUT).
  bool router_parts_recorded = false, norm_out_recorded = false;
};

}  // namespace strata::gpu
