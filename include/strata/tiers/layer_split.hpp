// The placement the engine executes today, in the planner's terms, so benchmarks can print the
// cost model's prediction beside what they measure: `-ngl N` puts the embedding and blocks
// [0, N) on the GPU (resident) and blocks [N, n_layer), the output norm and the head on the CPU
// (the staged model's stages: the first holds the embedding, the last the head), and how many
// blocks fit a GPU budget that way.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/tiers/cost.hpp"
#include "strata/tiers/demand.hpp"

namespace strata::tiers {

// n_gpu_layers >= n_layer (or < 0): everything on the GPU; 0: everything on the CPU.
inline std::vector<tensor_placement> layer_split_placement(const model_demand& d, std::int64_t n_gpu_layers) {
  const std::uint32_t n = n_gpu_layers < 0 || n_gpu_layers >= std::int64_t(d.n_layer) ? d.n_layer
                                                                                      : std::uint32_t(n_gpu_layers);
  constexpr tensor_placement gpu{home_tier::gpu, exec_unit::gpu, exec_unit::gpu};
  constexpr tensor_placement cpu{home_tier::ram, exec_unit::cpu, exec_unit::cpu};
  std::vector<tensor_placement> p(d.tensors.size(), cpu);
  if (n == 0) return p;
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    const tensor_demand& t = d.tensors[i];
    const bool on_gpu = t.layer >= 0 ? std::uint32_t(t.layer) < n
                                     : t.kind == tensor_kind::embedding || n == d.n_layer;
    if (on_gpu) p[i] = gpu;
  }
  return p;
}

// The most leading blocks -ngl may put on the GPU within `gpu_budget`: their weights and KV, the
// embedding (with the first GPU block), the activation scratch, and the output norm and head
// when every block is there. 0 when not even one block fits (everything then runs on the CPU).
inline std::uint32_t layers_that_fit(const model_demand& d, std::uint64_t gpu_budget) {
  std::vector<std::uint64_t> block(d.n_layer, 0);
  std::uint64_t embedding = 0, tail = 0;
  for (const tensor_demand& t : d.tensors) {
    if (t.layer >= 0 && std::uint32_t(t.layer) < d.n_layer) block[t.layer] += t.bytes;
    else if (t.kind == tensor_kind::embedding) embedding += t.bytes;
    else tail += t.bytes;
  }
  std::uint64_t used = d.scratch_bytes + embedding;
  std::uint32_t n = 0;
  while (n < d.n_layer && used + block[n] + d.kv_bytes_per_layer <= gpu_budget) used += block[n++] + d.kv_bytes_per_layer;
  if (n == d.n_layer && used + tail > gpu_budget) --n;  // the head comes with the last block
  return n;
}

}  // namespace strata::tiers
