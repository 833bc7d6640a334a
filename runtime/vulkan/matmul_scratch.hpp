// The matmuls' scratch buffers, by id and size (made by make_kv() / reserve(), backend_setup.cpp):
// the two int8 activation slots, the f16 weight scratch of prompt steps and its schedule, the
// split-K partials and the f16 activation rows the tensor-core GEMMs read. A base of
// backend::impl; ids and sizes only (the buffers are impl's; what the slots hold is
// fusion_state's). Private to runtime/vulkan.
#pragma once
#include <cstdint>

#include "scratch_schedule.hpp"

namespace strata::gpu {

struct matmul_scratch {
  // Two scratch slots, so a matvec can read its quantized input from one and write its output,
  // quantized for the next matvec (QUANT_OUT), into the other.
  std::uint32_t xq[2] = {0, 0}, xs[2] = {0, 0};  // buffer ids
  std::uint32_t max_k = 0;                         // widest matmul input
  std::uint32_t max_q8_rows = 0;                   // rows the int8 scratch holds (tokens or MoE pairs)
  std::uint32_t rms_sq[2] = {0, 0};  // buffer ids per slot: NORM_OUT's sums of y^2 per token and 32-row block

  std::uint32_t mm_scratch = 0;  // buffer id of the f16 weight scratch (its first slot; mm_scratch_halves a slot)
  std::uint64_t mm_scratch_halves = 0;
  scratch_schedule scratch_plan;         // the slots, and which weights to expand ahead
  std::uint32_t scratch_slice_rows(std::uint64_t K) const;  // rows of a K-wide matrix a slot holds (>= 128)
  std::uint32_t swiglu_part_rows(std::uint64_t K, std::uint64_t F) const;  // gate rows a slot holds with up's

  std::uint32_t mm_parts = 0, narrow_parts = 0;  // buffer ids of the split-K GEMMs' partials
  std::uint64_t mm_parts_floats = 0, narrow_parts_floats = 0;

  std::uint32_t mm_xh = 0, mm_xh_cols = 0;  // buffer id: max_rows x mm_xh_cols halves
  // mm_xh's second region (fusion_state xh_at): where it starts (halves) and the rows it holds.
  std::uint32_t xh_swiglu_at = 0, xh_b_rows = 0;
};

}  // namespace strata::gpu
