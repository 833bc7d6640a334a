// Dense FFNs computed by the CPU inside a Vulkan step (memory tiers, issue 14 item 4): in the
// short steps of the decode phase a streamed block's FFN is computed where its weights live
// instead of being copied into the ring (layer_stream.cpp): the FFN norm's rows come to the
// host, the CPU backend's kernels run gate, up, SwiGLU and down on its thread pool, and the
// result goes back into the step. Private to runtime/vulkan.
#pragma once
#include <cstdint>
#include <memory>

#include "strata/gguf/tensor_info.hpp"

namespace strata::kernels::cpu {
class thread_pool;
}

namespace strata::gpu {

class cpu_ffn {
 public:
  explicit cpu_ffn(unsigned threads);  // 0: one per physical core
  ~cpu_ffn();
  cpu_ffn(const cpu_ffn&) = delete;
  cpu_ffn& operator=(const cpu_ffn&) = delete;

  unsigned threads() const noexcept;
  // The CPU backend's workers (kept hot across the hand-offs of a step: handoff_submit.cpp).
  kernels::cpu::thread_pool& pool() noexcept;
  // A dense FFN matrix [n_in, n_out] as the CPU kernels read it; returns its index.
  std::uint32_t load(const gguf::tensor_info& t);
  // Scratch for steps of at most max_rows tokens, sized from the loaded tensors.
  void reserve(std::uint32_t max_rows);
  // out (rows x cols) = down(SwiGLU(gate x, up x)) for x (rows x cols), both in host memory.
  void run(std::uint32_t gate, std::uint32_t up, std::uint32_t down, std::uint32_t rows, std::uint32_t cols, const float* x,
           float* out);

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace strata::gpu
