// The memory tiers' hand-offs to the CPU inside a step: the ids of the host-visible buffers the
// GPU's rows go out through and the CPU's result comes back in, for routed experts the CPU
// computes (cpu_experts.cpp: the FFN norm's rows and router logits out, the experts' sum back)
// and for streamed dense FFNs in decode steps (layer_stream.cpp: the FFN norm's rows out, the
// FFN's output back), and the share of a CPU block the GPU takes. A base of backend::impl;
// buffer ids and switches only (the buffers and the CPU backends are impl's). Private to
// runtime/vulkan.
#pragma once
#include <cstdint>

namespace strata::gpu {

struct cpu_handoffs {
  std::uint32_t hand_in = 0, hand_out = 0, hand_slots = 0;  // ids; hand_out: hand_slots regions of max_rows rows
  std::uint32_t hand_cols = 0;              // floats of x per row in hand_in (router logits after max_rows rows)
  std::uint32_t ffn_in = 0, ffn_out = 0, ffn_rows = 0;  // buffer ids, rows they hold
  std::int32_t ffn_open = -1;  // while recording: the block whose FFN the CPU computes (up to its down)

  // What the GPU computes of a CPU block's experts in a step, from the block's pinned host copy
  // (its kernels read it over PCIe) while the CPU computes the rest: the link's bandwidth added
  // to the CPU's. Either ranks k - ranks .. k - 1 of each token's experts (the CPU the first
  // k - ranks), or the first ff_cols intermediate columns of every routed expert (gate/up rows,
  // down inputs; the CPU the columns after them), which also splits a top-1 block (Llama 4).
  struct gpu_share_t {
    std::uint32_t ranks = 0, ff_cols = 0;
    explicit operator bool() const noexcept { return ranks || ff_cols; }
  };
  static constexpr std::int32_t top1_slice_percent = 20;
  std::int32_t gpu_share_env = 0;   // STRATA_VK_GPU_SHARE (0: off)
  std::int32_t gpu_slice_env = -1;  // STRATA_VK_GPU_SLICE (0: off; unset, -1: the default)
  bool host_experts = false;  // while recording a GPU share: bind_weight binds the pinned host copies
};

}  // namespace strata::gpu
