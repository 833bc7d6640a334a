// How the engine places a model over the GPU and the CPU (memory tiers, issue 14): the model's
// demand at the engine's context, batch and KV types, the budgets (given, or free memory minus a
// margin), the link speeds (the probe's cache, else assumed) and the layout it executes
// (tiers/engine_layout.hpp: -ngl with expert overrides, or the planner's choice with `fit`).
// model::load uses it; strata-run --plan prints the same inputs and layout.
#pragma once
#include <filesystem>
#include <string>

#include "strata/arch/architecture.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/tiers/engine_layout.hpp"

namespace strata::rt {

struct placement_inputs {
  tiers::model_demand demand;
  tiers::plan_options plan;  // budgets, links, overrides (-ot, then --cpu-moe/--n-cpu-moe), prefill batch
  std::string gpu_budget_source, ram_budget_source;  // where each budget came from, for reports
};

// `gpu`: the model is to run on the Vulkan backend (else the GPU budget is 0). Budgets left 0 in
// `opt` take the defaults when `opt.fit` or `defaults` asks for them, else stay unlimited.
placement_inputs placement_for(const std::filesystem::path& model, const gguf::reader& r, const arch::hparams& hp,
                               const engine_options& opt, bool gpu, bool defaults = false);

// The layout model::load runs: all on the CPU without `gpu`; with opt.fit the planner's layout
// within the budgets; else -ngl with the expert overrides, checked against the budgets (errors
// name the budget, the layout and what does not fit).
tiers::engine_layout choose_layout(const placement_inputs& in, const engine_options& opt, bool gpu);

}  // namespace strata::rt
