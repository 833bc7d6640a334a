// Where each weight tensor of the model lives for the Vulkan backend (filled by load and reserve(),
// backend_setup.cpp): its chunk of the weight arena and its place there, or the memory tier that
// holds it instead (the CPU's experts, a GPU cache slot, a streaming ring slot). A base of
// backend::impl; indices and offsets only (the arena's chunks are impl's). Private to
// runtime/vulkan.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/gguf/tensor_info.hpp"

namespace strata::gpu {

struct weight_table {
  struct weight_entry {
    const gguf::tensor_info* info = nullptr;
    std::uint32_t chunk = 0;
    std::uint64_t offset = 0, bytes = 0;
    std::int32_t host = -1;  // an expert tensor the CPU computes: its index in `host` (not uploaded)
    // An expert tensor of a GPU-cached block: its index in `cached`; then chunk/offset/bytes are
    // its slots, and cache_cpu the CPU's copy for overflow steps.
    std::int32_t cache = -1, cache_cpu = -1;
    // A dense FFN tensor of a streamed block: its index in `streams`; then chunk is a ring slot
    // and offset its place in the slot (layer_stream.cpp).
    std::int32_t stream = -1;
    // A routed-expert tensor of a CPU block streamed in prompt steps (host >= 0 too): its index
    // in `xstreams`; then chunk is an expert ring slot and offset its place there (expert_stream.cpp).
    std::int32_t xstream = -1;
  };
  // Whether the GPU's kernels ever read the tensor (in its chunk, a cache slot or a ring slot).
  static bool gpu_reads(const weight_entry& e) { return e.host < 0 || e.xstream >= 0; }
  // Whether its bytes stay where they are in its chunk: not the CPU's, a cache slot or a ring slot.
  static bool resident(const weight_entry& e) { return e.host < 0 && e.cache < 0 && e.stream < 0 && e.xstream < 0; }
  std::vector<weight_entry> weights;
  bool uploaded = false;
};

}  // namespace strata::gpu
