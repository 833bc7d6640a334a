// Routed experts computed by the CPU inside a Vulkan step (memory tiers, issue 14): the expert
// tensors of chosen MoE blocks stay in host memory as CPU weights, and at each of those blocks
// the recorded step pauses (one submit ends, cpu_experts::run, the next submit starts): the
// GPU's router logits and the FFN norm's rows come to the host, the CPU backend's kernels route
// and run the experts on its thread pool, and the weighted sum goes back. Private to
// runtime/vulkan; the recording side is backend::impl::record_cpu_moe (cpu_experts.cpp).
#pragma once
#include <cstdint>
#include <memory>

#include "strata/gguf/tensor_info.hpp"
#include "strata/graph/backend_contract.hpp"

namespace strata::kernels::cpu {
class thread_pool;
}

namespace strata::gpu {

class cpu_experts {
 public:
  explicit cpu_experts(unsigned threads);  // 0: one per physical core
  ~cpu_experts();
  cpu_experts(const cpu_experts&) = delete;
  cpu_experts& operator=(const cpu_experts&) = delete;

  unsigned threads() const noexcept;
  // The CPU backend's workers (kept hot across the hand-offs of a step: handoff_submit.cpp).
  kernels::cpu::thread_pool& pool() noexcept;
  // An expert tensor [n_in, n_out, n_expert] as the CPU kernels store it; returns its index.
  std::uint32_t load(const gguf::tensor_info& t);
  // Scratch for steps of at most max_tokens rows (max_tokens x n_used expert pairs), sized from
  // the loaded tensors; before the first run().
  void reserve(std::uint32_t max_tokens, std::uint32_t n_used);

  // One block's experts for `rows` tokens: x (rows x cols, the FFN norm's output) and the
  // router logits (rows x n_expert) in host memory in, out (rows x cols) = Σ w_e · FFN_e(x).
  struct task {
    std::uint32_t gate = 0, up = 0, down = 0;  // indices from load()
    graph::moe_params params;
    std::uint32_t rows = 0, cols = 0, n_expert = 0;
    std::uint32_t ranks = 0;  // > 0: only each token's first `ranks` experts (the GPU computes the rest)
    std::uint32_t ff_begin = 0;  // > 0: only the experts' intermediate columns from here on (the GPU's slice is before)
  };
  // What task::ff_begin must be a multiple of for these experts; 0: they cannot be cut by
  // columns (no packed copy on the CPU).
  std::uint32_t slice_align(std::uint32_t gate, std::uint32_t up, std::uint32_t down) const;
  void run(const task& t, const float* x, const float* logits, float* out);

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace strata::gpu
