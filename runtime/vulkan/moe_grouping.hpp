// The MoE buffers of a step (made by make_kv(), backend_setup.cpp): each routed (token, expert)
// pair's expert id and weight, the pairs grouped by expert for the grouped expert kernels, and
// their activations as f16 rows in expert order. A base of backend::impl; buffer ids and sizes
// only (the buffers are impl's). Private to runtime/vulkan.
#pragma once
#include <cstdint>

namespace strata::gpu {

struct moe_grouping {
  std::uint32_t moe_ids = 0, moe_wts = 0;  // buffer ids
  // Pairs grouped by expert (moe.glsl MOE_GROUP) for the grouped expert matvecs: chunks of up to
  // moe_chunk pairs, used once a step routes more than two pairs per expert (grouped_experts).
  // STRATA_VK_MOE_GROUPED=0 keeps one workgroup column per pair.
  static constexpr std::uint32_t moe_chunk = 8;
  std::uint32_t moe_groups = 0, moe_max_chunks = 0, moe_sorted_off = 0;
  std::uint32_t moe_xh = 0, moe_xh_cols = 0;  // buffer id: the pairs' rows as f16 (mul_mm_small), their width
};

}  // namespace strata::gpu
