// Tensors copied into pinned host-visible buffers in the GPU's row layout (copy_gpu_rows) for the
// rings and caches that stream weights to the GPU (expert_stream.cpp, layer_stream.cpp,
// expert_cache.cpp), split into row ranges over every physical core: one thread wrote ~1 GB/s
// into pinned memory, and Scout at --gpu-budget 12G spent ~40 s of its load copying 51 GiB of
// CPU blocks' experts for the expert ring.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "strata/gguf/tensor_info.hpp"

namespace strata::gpu {

struct pinned_copy {
  const gguf::tensor_info* t;  // whole rows from its data
  std::uint64_t bytes;         // the first `bytes` of t's data (whole rows)
  std::byte* dst;
};

void copy_pinned(std::span<const pinned_copy> copies);

}  // namespace strata::gpu
