// The pipeline variants (shader, format, defines, bindings) an op records where the choice needs
// nothing but the op's arguments, the tuning switches and the tensor-core layouts probed at
// start-up (mma_layout.hpp): no other device facts, no buffers (the variants that need those are
// backend::impl's, beside these in kernel_requests.cpp). A base of backend::impl, so its files
// call these as its own; defined in kernel_requests.cpp, matmul_recording.cpp (mul_mmq) and
// router_product.cpp. Private to runtime/vulkan (includes Vulkan).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "mma_layout.hpp"
#include "pipelines.hpp"
#include "tuning.hpp"

namespace strata::gpu {

struct kernel_variants : backend_tuning {
  static pipeline_request req(std::string shader, std::optional<gguf::type_id> fmt,
                              std::vector<std::pair<std::string, std::string>> defs, std::uint32_t bindings) {
    return {std::move(shader), fmt, std::move(defs), bindings};
  }
  pipeline_request matvec_req(gguf::type_id t, std::uint32_t nt, bool ids, std::uint64_t n_rows) const;
  static pipeline_request elementwise_req(const char* op, bool f16_out = false) {
    if (f16_out) return req("elementwise", {}, {{op, "1"}, {"F16_OUT", "1"}}, 5);
    return req("elementwise", {}, {{op, "1"}}, 4);
  }
  static pipeline_request copy_req(bool indexed, bool add = false);
  static pipeline_request norm_req(bool weighted, bool f16_out = false);
  // topk_lean: moe_topk.glsl TOPK_LEAN's experts a lane (topk_lean_slots), 0 for the full form.
  static pipeline_request moe_req(const char* stage, bool sigmoid = false, std::uint32_t topk_lean = 0);
  static pipeline_request combine_norm_out_req() { return req("moe", {}, {{"MOE_COMBINE", "1"}, {"RESIDUAL", "1"}, {"NORM_OUT", "1"}}, 10); }
  static std::vector<std::pair<std::string, std::string>> kv_defs(const kv::kv_config& c);
  static std::vector<std::pair<std::string, std::string>> kvq_defs(const kv_state& kv);  // kinds, bits, the window ring
  // kv_store_q and attn_prep over a compressed cache: kvq_defs and the encoder (kv_encode.glsl).
  static std::vector<std::pair<std::string, std::string>> kv_encode_defs(const kv_state& kv);
  pipeline_request quantize_req(bool norm) const;
  static pipeline_request router_product_req(bool q8);  // router_product.glsl: R' h (f32 input) or M a (INPUT_Q8)
  bool fa_quad = false;  // attention_mma.glsl MMA_QUAD: the probe found mma.sync's layout (and fa_regs)
  pipeline_request flash_req(std::uint32_t head_dim, std::uint32_t tokens) const;  // attention_mma, f16: 16 x flash_warps rows
  // Workgroup size, rows per lane group and units in flight per lane, per format and height,
  // from vk_matvec_bench on the H100 (bench/RESULTS.md): short matrices (the K/V projections)
  // keep one row per group so enough workgroups exist to fill the GPU; Q6_K's costlier units
  // want more rows per group on tall matrices; Q8_0 is load-bound and likes one row per group.
  mmvq_shape_t mmvq_shape(gguf::type_id t, std::uint64_t n_rows) const;
  std::uint32_t mmvq_rows_per_wg(const pipeline_request& r) const;
  static void set_mmvq_shape(pipeline_request& r, const mmvq_shape_t& s);  // an mmvq request's WG, RPG and U
  // A residual matvec of this format and height may write the next norm's first half (NORM_OUT).
  bool norm_out_fits(gguf::type_id t, std::uint64_t n_rows) const;
  bool use_mmvq(const weight& w, std::uint32_t n) const;
  // Tensor-core tiles (mul_mm.glsl MMA2): the largest tile that still gives the GPU a few
  // hundred workgroups (STRATA_VK_MMA2_SHAPE=BM:BN:WM:WN forces one).
  mma2_tile mma2_tile_for(std::uint64_t n_rows, std::uint32_t tokens) const;
  pipeline_request mma2_req(gguf::type_id t, const mma2_tile& s) const;
  pipeline_request mul_mm_req(gguf::type_id t) const;
  // Tile per batch width, from vk_matvec_bench on the H100 (bench/RESULTS.md): 128 x 128 with
  // 32 x 64 per warp from 128 tokens on, even where that leaves fewer workgroups than SMs
  // (qwen3-8b pp512 4,281 vs 3,777 t/s with 128 x 64 tiles there); narrower tiles below.
  static constexpr mma2_tile mm3_tiles[] = {{128, 128, 32, 64}, {64, 64, 32, 32}, {64, 32, 32, 16}, {64, 16, 16, 16}};
  mma2_tile mm3_tile_for(std::uint32_t tokens) const;
  // qw: the weights' format when the GEMM reads them in place (mm3_in_place), else f16.
  pipeline_request mm3_req(const mma2_tile& s, bool xf16, gguf::type_id qw = gguf::type_id::f16, bool split = false,
                           bool swiglu = false) const;
  static pipeline_request split_k_sum_req() { return req("split_k_sum", {}, {{"WG", "256"}}, 2); }
  static pipeline_request dequant_req(gguf::type_id t) { return req("dequant_f16", t, {{"WG", "256"}}, 2); }
  static pipeline_request narrow_req(gguf::type_id t);
  // mmq_layout: the accumulator layout (mma_layout.cpp), probed at start-up.
  std::optional<mma_layout> mmq_layout;
  std::uint32_t mmq_chunk_for(std::uint32_t pairs, std::uint32_t n_expert) const;
  mma2_tile mmq_moe_tile(std::uint32_t chunk) const;  // BN = the chunk
  pipeline_request mmq_req(gguf::type_id t, const mma2_tile& s, bool grouped, bool split = false) const;
  // mul_mm_reg (fragments built in registers): mmr_layout is the driver's f16 fragment layout,
  // probed at start-up; the kernel takes plain matmuls of mms_min .. mmr_max tokens.
  std::optional<f16_fragments> mmr_layout;
  bool use_mm_reg(gguf::type_id t, std::uint32_t n) const {
    return mmr && mmr_layout && detail::has_mmr_unit(t) && n <= mmr_max;
  }
  // 8-token tiles a mul_mm_reg workgroup row covers: 1, 2, 4 or 8 (few variants to compile).
  static std::uint32_t mm_reg_tiles(std::uint32_t tokens) { return tokens <= 8 ? 1 : tokens <= 16 ? 2 : tokens <= 32 ? 4 : 8; }
  pipeline_request mm_reg_req(gguf::type_id t, std::uint32_t tokens, std::uint64_t n_rows, bool residual = false,
                              bool swiglu = false) const;
};

}  // namespace strata::gpu
