// The memory-tier options every app that loads a model shares (issue 14): budgets, overrides in
// llama.cpp's spelling, and --fit; kept apart from cli.hpp so the apps' mode files need not
// include CLI11. add_tier_options() (cli.hpp) declares them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/runtime/engine.hpp"

namespace strata::app {

struct tier_options {
  std::string gpu_budget;                     // --gpu-budget SIZE
  std::string ram_budget;                     // --ram-budget SIZE
  std::vector<std::string> override_tensor;  // -ot REGEX=gpu|cpu|disk[,...]
  bool cpu_moe = false;                       // --cpu-moe
  std::uint32_t n_cpu_moe = 0;                // --n-cpu-moe N
  bool fit = false;                           // --fit
  std::string expert_cache;                   // --expert-cache SLOTS (empty: off)
  std::string expert_misses;                  // --expert-misses cpu|gpu (empty: the planner's choice)
  std::uint32_t stream_layers = 0;            // --stream-layers N
  std::string stream_link;                    // --stream-link N (empty: the planner's choice)
  bool no_stream_experts = false;             // --no-stream-experts
  bool no_expert_cache = false;               // --no-expert-cache
  std::string f16_weights;                    // --f16-weights auto|on|off (empty: auto)
};

// Fills the engine's tier options (a malformed size or rule throws strata::error naming the flag).
void apply(const tier_options& t, rt::engine_options& eo);

}  // namespace strata::app
