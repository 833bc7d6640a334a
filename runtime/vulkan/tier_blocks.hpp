// The Vulkan backend's memory-tier blocks (backend_options): what the backend keeps per block
// whose routed experts are GPU-cached (expert_cache.cpp), whose dense FFN streams through the
// ring (layer_stream.cpp), or whose routed experts stream in prompt steps (expert_stream.cpp).
// Private to runtime/vulkan (includes Vulkan).
#pragma once
#include <cstdint>
#include <vector>

#include "memory.hpp"
#include "strata/tiers/expert_cache.hpp"

namespace strata::gpu {

// A GPU-cached expert block: the slot cache's bookkeeping and every expert's host copy.
struct cached_block {
  cached_block(std::uint32_t l, std::uint32_t n_expert, std::uint32_t slots)
      : layer(l), cache(n_expert, slots, tiers::cache_policy::slru) {}
  std::uint32_t layer = 0;
  tiers::expert_slot_cache cache;
  std::uint32_t weight[3] = {~0u, ~0u, ~0u};  // gate, up, down weight ids
  std::uint64_t expert_bytes[3] = {0, 0, 0};
  // Every expert, host-visible (the uploads' source, and what the kernels read on a miss in the
  // lookup form): gate and up in one buffer, up from up_at, so one binding holds both for the
  // SwiGLU matvec; down in its own.
  gpu_buffer host_gate_up, host_down;
  std::uint64_t up_at = 0;
  const gpu_buffer& host(int part) const { return part == 2 ? host_down : host_gate_up; }
  std::uint64_t host_offset(int part) const { return part == 1 ? up_at : 0; }
  // The lookup form (expert_cache_lookup.cpp): the kernels map expert ids to slots through the
  // block's map on the GPU; `map` is the host's copy ([0] up_at, [1 + e] e's slot or -1),
  // rewritten on the GPU before the next step where `map_dirty`; `freq` the experts' decayed
  // routing counts (the admission policy's).
  bool lookup = false;
  std::vector<std::int32_t> map;
  std::vector<float> freq;
  bool map_dirty = true;
  // Router-driven prefetch (expert_cache.cpp): at this block's split the GPU also scores the next
  // cached block's router on this block's FFN input (`predict`: that router times the ratio of
  // the two blocks' FFN norm weights, experts x hidden f32), and the host uploads the experts it
  // ranks first into the next block's slots on the side queue while this block computes.
  std::uint32_t predict = 0;       // buffer id of the prediction matrix; 0: no prediction from here
  std::int32_t next = -1;          // the block predicted (index in `cached`)
  std::uint32_t hidden = 0;        // the FFN input's width
  // As the block predicted: the experts predicted for its next step (stamped `predicted_at`),
  // the prefetch's command buffer and the side queue's timeline value it signals when done.
  std::vector<std::uint64_t> predicted;
  std::uint64_t predicted_at = 0;
  std::uint32_t prefetch_cmd = 0;  // index in the backend's prefetch_cmds
  std::uint64_t prefetch_value = 0;
};

// A dense FFN streamed through the ring: its tensors in pinned host memory, laid out as in a slot.
struct streamed_block {
  std::uint32_t layer = 0;
  std::vector<std::uint32_t> weights;  // ids
  std::uint32_t part[3] = {~0u, ~0u, ~0u};  // weight ids of gate, up, down
  std::uint32_t cpu[3] = {0, 0, 0};         // their cpu_ffn indices (per-phase CPU share)
  std::uint64_t bytes = 0;             // of the slot it fills
  gpu_buffer host;
  // Steps of at most stream_cpu_tokens tokens (layer_stream.cpp): a block the link still carries
  // then has link >= 0 (its rank among those; it reads slot link % 2), the others are computed by
  // the CPU, and the hand-off of each of those copies `carries` (pieces of the next linked block).
  std::int32_t link = -1;
  struct copy_piece {
    std::uint32_t block;  // index in the backend's streams
    std::uint64_t offset, bytes;
  };
  std::vector<copy_piece> carries;
};

// Routed experts streamed in prompt steps: two ring items (gate + up, down), each pinned.
struct xstream_block {
  std::uint32_t layer = 0;
  std::uint32_t part[3] = {~0u, ~0u, ~0u};  // weight ids of gate, up, down
  std::uint64_t bytes[2] = {0, 0};          // items: gate + up, down
  gpu_buffer host[2];                       // pinned, laid out as in their slot
};

}  // namespace strata::gpu
