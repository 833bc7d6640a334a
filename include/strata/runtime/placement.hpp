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

// Tokens a prompt step takes when -b is not given (engine_options::n_batch 0). On the GPU a step
// expands each quantized weight to f16 once for all its tokens (the prefill GEMM's scratch), so
// longer steps are faster: qwen3-8b Q4_K_M pp4096 on the H200 ran 8,601 t/s in 512-token steps
// and 9,632 in 2,048-token steps (session 32). They cost activation memory (~0.5 GB at 2,048 for
// an 8B model), so the long step is taken only where it takes nothing from the weights: the model
// whole on a real GPU (no CPU blocks, experts or streaming), an uncompressed KV cache (a
// compressed one sizes its f16 window ring by the step), and the larger step's weights, KV and
// scratch within the GPU's free memory less the default margin (and within --gpu-budget). Else
// 512, llama.cpp's micro-batch. An explicit n_batch is returned as it is.
inline constexpr std::uint32_t short_prompt_step = 512, long_prompt_step = 2048;
struct prompt_step_facts {
  bool real_gpu = false;           // a GPU, not lavapipe
  bool plain_kv = false;           // f16 / f32 keys and values
  bool whole_on_gpu = false;       // every block on the GPU, nothing on the CPU or streamed
  std::uint64_t long_step_bytes = 0;  // weights + KV + scratch with long_prompt_step steps
  std::uint64_t budget = 0;        // free memory less the margin (and within --gpu-budget)
};
constexpr std::uint32_t choose_prompt_step(const prompt_step_facts& f) noexcept {
  return f.real_gpu && f.plain_kv && f.whole_on_gpu && f.long_step_bytes <= f.budget ? long_prompt_step
                                                                                     : short_prompt_step;
}
std::uint32_t prompt_step_tokens(const std::filesystem::path& model, const gguf::reader& r, const arch::hparams& hp,
                                 const engine_options& opt, bool gpu);

}  // namespace strata::rt
