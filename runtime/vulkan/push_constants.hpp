// Push-constant blocks of the Vulkan kernels, field for field as each shader declares its
// `Params` (shaders/<kernel>.glsl): the one C++ definition of every layout the backend pushes.
#pragma once
#include <cstdint>

namespace strata::gpu {

struct matvec_pc {
  std::uint32_t K, N, n_tok, row_bytes, x_off, x_stride, y_off, y_stride, expert_bytes, in_div, ids_off, up_off;
  std::uint32_t r_off, r_stride;
  float eps;
};
struct mmvq_pc {
  std::uint32_t K, N, n_tok, row_bytes, q_off, q_stride, s_off, s_stride, y_off, y_stride, r_off, r_stride, up_off,
      expert_bytes, ids_off, in_div;
};
// norm_tail.glsl's fields, after the push constants of the kernel whose last workgroup runs the
// next RMS norm (offsets and strides in floats; q/s strides in uvec4 / vec4 as quantize_pc).
struct norm_tail_pc {
  std::uint32_t x_off, x_stride, cols, rows, y_off, y_stride, q_stride, s_stride;
  float eps;
};
template <class PC>
struct with_norm_tail {
  PC kernel;
  norm_tail_pc tail;
};
struct quantize_pc {
  std::uint32_t K, x_off, x_stride, q_off, q_stride, s_off, s_stride;
  float eps;
  std::uint32_t y_off = 0, y_stride = 0;  // WRITE_Y
};
struct attn_prep_pc {
  std::uint32_t n_head, n_kv, D, n_rot, q_off, q_stride, k_off, k_stride, v_off, v_stride;
  float base, freq_scale, eps;
  std::uint32_t flags;
  std::uint32_t ring_rows;  // compressed cache (KV_ENCODE) with a full-precision window
  float temp_scale, temp_floor_base;  // TEMP
};
struct mm_f16_pc {  // mul_mm_f16.glsl
  std::uint32_t K, N, n_tok, w_off, x_off, x_stride, y_off, y_stride;
  std::uint32_t row_bytes = 0;  // QW (weights in their own format): bytes per row
  std::uint32_t k_chunk = 0, part_stride = 0;  // SPLIT_K: K per workgroup z, floats between partials
  std::uint32_t up_off = 0, h_off = 0, h_stride = 0;  // SWIGLU: bytes from gate to up; the f16 copy's rows, in halves
  std::uint32_t row0 = 0;                              // SWIGLU: the dispatch's first row
  std::uint32_t r_off = 0, r_stride = 0;               // RESIDUAL: rows added to the product
};
struct mul_mm_split_pc {  // mul_mm.glsl NARROW SPLIT_K
  std::uint32_t K, N, n_tok, row_bytes, x_off, x_stride, y_off, y_stride, k_chunk, part_stride;
};
struct split_k_sum_pc {  // split_k_sum.glsl
  std::uint32_t N, n_tok, splits, part_stride, y_off, y_stride;
  std::uint32_t r_off = 0, r_stride = 0;  // RESIDUAL
};
struct mm_small_pc {  // mul_mm_small.glsl, mul_mm_reg.glsl
  std::uint32_t K, N, n_tok, row_bytes, x_off, x_stride, y_off, y_stride, expert_bytes, sorted_off;
  std::uint32_t r_off = 0, r_stride = 0;  // mul_mm_reg RESIDUAL
  std::uint32_t up_off = 0, h_off = 0, h_stride = 0;  // mul_mm_reg SWIGLU
};
struct mmq_pc {  // mul_mmq.glsl
  std::uint32_t K, N, n_tok, row_bytes, q_off, q_stride, s_off, s_stride, y_off, y_stride;
  std::uint32_t expert_bytes = 0, sorted_off = 0, in_div = 1;  // MOE_GROUPED
  std::uint32_t k_chunk = 0, part_stride = 0;                  // SPLIT_K: K per workgroup z, floats between partials
};
struct dequant_f16_pc {
  std::uint32_t K, row_bytes, row0, rows, o_off;
};
struct get_rows_pc {
  std::uint32_t K, row_bytes, o_off, o_stride;
};
struct rms_norm_pc {
  std::uint32_t cols, x_off, x_stride, y_off, y_stride;
  float eps;
  std::uint32_t rows;  // bounds the workgroups a dispatch spilled into z rounds up to
  std::uint32_t h_off = 0, h_stride = 0;  // F16_OUT: the f16 copy's rows, in halves
};
struct rope_pc {
  std::uint32_t n_tok, n_heads, n_rot, head_stride, x_off, x_stride;
  float base, freq_scale;
  std::uint32_t neox, has_ff;
};
struct temperature_pc {
  std::uint32_t n_tok, cols, q_off, q_stride;
  float scale, floor_base;
};
struct kv_store_pc {
  std::uint32_t n_tok, row, k_off, k_stride, v_off, v_stride;
};
struct attention_pc {
  std::uint32_t n_head, n_head_kv, D, chunk, q_off, q_stride, o_off, o_stride, block_size, max_blocks;
  float scale;
  std::uint32_t split_len, n_splits;
  std::uint32_t window, ring_rows;  // attention_q only (compressed KV)
};
struct kv_store_q_pc {
  std::uint32_t n_tok, n_head_kv, k_off, k_stride, v_off, v_stride, ring_rows;
};
struct elementwise_pc {
  std::uint32_t cols, a_off, a_stride, b_off, b_stride, o_off, o_stride;
  std::uint32_t h_off = 0, h_stride = 0;  // F16_OUT: the f16 copy's rows, in halves
};
struct copy_rows_pc {
  std::uint32_t cols, s_off, s_stride, d_off, d_stride;
};
struct gather_f16_pc {  // copy_rows TO_F16 INDEXED
  std::uint32_t cols, s_off, s_stride, d_off, d_stride, idx_off, div;
};
struct moe_pc {
  std::uint32_t n_expert, k, cols, s_off, s_stride, d_off, d_stride, weighted;
  std::uint32_t r_off = 0, r_stride = 0;  // MOE_COMBINE RESIDUAL
};
struct router_product_pc {  // router_product.glsl
  std::uint32_t K, w_off, x_off, x_stride, s_off, s_stride, out_off, out_stride;
};
struct argmax_pc {
  std::uint32_t cols, s_off, s_stride;
};

}  // namespace strata::gpu
