// The placement the engine executes today, in the planner's terms, so benchmarks can print the
// cost model's prediction beside what they measure: `-ngl N` puts the embedding and blocks
// [0, N) on the GPU (resident) and blocks [N, n_layer), the output norm and the head on the CPU
// (the staged model's stages: the first holds the embedding, the last the head).
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

}  // namespace strata::tiers
