// The two 2-slot device rings the memory tiers stream weights through inside a recorded step:
// dense FFNs of streamed blocks (layer_stream.cpp: block j uses slot j % 2) and routed experts
// of CPU blocks in prompt steps (expert_stream.cpp: two items a block, gate + up then down).
// Which weight chunks the slots are, the recording's position in each chain, their counters
// and the expert ring's switches. A base of backend::impl; plain values only: the slots are
// entries of impl's `chunks`, the pinned copies impl's streamed blocks. Private to runtime/vulkan
// (includes Vulkan).
#pragma once
#include <cstdint>

#include "backend.hpp"
#include "memory.hpp"

namespace strata::gpu {

struct stream_rings {
  std::uint32_t ring_chunk[2] = {0, 0}, stream_next = 0;  // stream_next: while recording, the first block not entered
  stream_stats streaming;
  std::uint32_t xring_chunk[2] = {0, 0};
  std::uint32_t xstream_next = 0;  // while recording: the first item (2 per block) not yet entered
  stream_stats xstreaming;
  std::uint32_t xstream_direct_tokens = 512;  // STRATA_VK_XSTREAM_DIRECT_TOKENS (0: the ring always)
  // ... 0 where an expert's slab of a tensor is larger than this (expert_stream.cpp: the GPU's L2
  // no longer holds it between the chunks of its pairs).
  static constexpr std::uint64_t xstream_direct_slab_limit = 4ull << 20;
  // Lab (STRATA_VK_XSTREAM_ZC=1): every step's kernels read the streamed blocks' experts from
  // their pinned host copy over PCIe (no ring copies, no CPU hand-off): what a shader's reads of
  // host memory move, for a GPU share of the CPU's experts.
  bool xstream_zero_copy = false;

  // One item of either chain (backend::impl::advance_ring): its pinned source, its slot and its bytes.
  struct ring_copy {
    const gpu_buffer& from;
    const gpu_buffer& slot;
    std::uint64_t bytes;
  };
};

}  // namespace strata::gpu
