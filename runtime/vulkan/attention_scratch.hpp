// The attention op's scratch buffers (attention.cpp; fusion.cpp's attn_prep), allocated on first
// use: the split attention's partials and merge counters, and attn_prep's rotated queries with
// the rows they hold. A base of backend::impl; buffer ids and a tensor view only (the buffers
// are impl's). Private to runtime/vulkan.
#pragma once
#include <cstdint>
#include <optional>

#include "backend.hpp"

namespace strata::gpu {

struct attention_scratch {
  std::uint32_t attn_part = 0;             // split-attention partials (allocated on first use)
  // attn_prep's rotated queries (Q_ROT; allocated on first use) and the q rows they hold, until read.
  std::uint32_t q_rot = 0;
  std::optional<tensor> q_rot_of;
  // Per (token, KV head) counters of the split attention's merge as its last workgroup's tail
  // (split_combine.glsl, STRATA_VK_TAIL decode steps): allocated zeroed on first use.
  std::uint32_t split_counters = 0;
  static constexpr std::uint32_t split_counter_count = 4096;
};

}  // namespace strata::gpu
