// The step being run, as the Vulkan backend's files see it: where each input lies in the
// host-visible step buffer (backend::impl::step: one section each, laid out by make_kv()) and the
// shape of the current step (set by backend::begin, step_cache.cpp), which chooses its recording.
// A base of backend::impl; plain numbers only (the buffer itself is impl's). Private to
// runtime/vulkan.
#pragma once
#include <cstdint>

namespace strata::gpu {

// The step buffer's sections, and the weights in their arena chunks, start this many bytes apart.
inline constexpr std::uint64_t section_align = 256;

struct step_layout {
  std::uint32_t max_rows = 0;  // tokens per step
  std::uint64_t off_tokens = 0, off_pos = 0, off_slots = 0, off_seq_row = 0, off_out_rows = 0, off_blocks = 0;
  std::uint64_t blocks_bytes = 0;
  std::uint32_t max_blocks = 0;

  std::uint32_t step_tokens = 0;
  std::uint32_t batch_tokens = 0;  // of them the batch's own (the rest pad it: step_inputs::padding)
  bool fuse_step = true;  // fusion applies to decode-sized steps (prefill uses the tiled matmul)
  bool single_seq = false, own_rows = false;  // every token of the step one sequence's / its sequence's only one
  bool short_ctx = false;  // a decode step whose tokens all see a short context (tuning.hpp short_ctx_len)
};

}  // namespace strata::gpu
