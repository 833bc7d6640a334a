// `strata-run --plan`: where each tensor of the model would live and run for the given budgets
// (issue 14's placement planner), the bytes per token on each link and the predicted speeds.
// Budgets default to what the GPU (VK_EXT_memory_budget) and the host report free, minus margins;
// link speeds come from the probe cache when one exists, else from labelled assumptions.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "modes.hpp"
#include "strata/arch/all.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/runtime/device_memory.hpp"
#include "strata/runtime/link_probe.hpp"
#include "strata/tiers/layer_split.hpp"
#include "strata/tiers/report.hpp"

namespace strata::app {
namespace {

// Bytes per stored K or V element (TurboQuant: its bits plus an fp16 scale per head vector).
double kv_element_bytes(kv::kv_type t, std::uint32_t head_dim) {
  switch (t) {
    case kv::kv_type::f32: return 4;
    case kv::kv_type::f16: return 2;
    case kv::kv_type::q8_0: return 34.0 / 32;
    default: return kv::turboquant_bits(t) / 8.0 + 2.0 / head_dim;
  }
}

tiers::plan_options tier_plan_options(const run_options& opt, std::string& gpu_note, std::string& ram_note) {
  tiers::plan_options po;
  if (!opt.gpu_budget.empty()) {
    po.gpu_budget = parse_byte_size(opt.gpu_budget, "--gpu-budget");
    gpu_note = "--gpu-budget";
  } else if (opt.backend == "cpu") {
    gpu_note = "--backend cpu: no GPU";
  } else if (const auto g = rt::gpu_memory(opt.device); !g) {
    gpu_note = "no Vulkan device: no GPU";
  } else if (g->is_cpu && opt.backend != "vulkan") {
    gpu_note = "only a CPU Vulkan device ('" + g->device + "'; --backend auto does not use it): no GPU";
  } else {
    po.gpu_budget = rt::default_gpu_budget(g->available);
    gpu_note = "'" + g->device + "': " + format_byte_size(g->available) + " free of " + format_byte_size(g->total) +
               (g->from_budget_ext ? " (VK_EXT_memory_budget)" : " (heap size; no VK_EXT_memory_budget)") +
               " minus a margin";
  }
  if (!opt.ram_budget.empty()) {
    po.ram_budget = parse_byte_size(opt.ram_budget, "--ram-budget");
    ram_note = "--ram-budget";
  } else if (const auto a = rt::host_available_memory()) {
    po.ram_budget = rt::default_ram_budget(*a);
    ram_note = "MemAvailable " + format_byte_size(*a) + " minus a margin";
  } else {
    throw error("--plan: /proc/meminfo has no MemAvailable; give --ram-budget SIZE");
  }
  for (const std::string& rule : opt.override_tensor) tiers::parse_override_rules(rule, po.overrides);
  tiers::add_cpu_moe_rules(opt.cpu_moe, opt.n_cpu_moe, po.overrides);
  po.prefill_batch = opt.n_batch;
  return po;
}

}  // namespace

int run_plan(const run_options& opt) {
  const gguf::file f(opt.model);
  const arch::hparams hp = arch::visit(f->get_string("general.architecture"),
                                       [&](auto a) { return decltype(a)::load_hparams(f.gguf()); });
  const kv::kv_cache_types kv_types = kv::parse_kv_cache_types(opt.kv_type, opt.kv_type_k, opt.kv_type_v);
  tiers::demand_options d_opt;
  d_opt.n_ctx = opt.n_ctx ? opt.n_ctx : hp.n_ctx_train;
  d_opt.kv_bytes_per_element =
      (kv_element_bytes(kv_types.k, hp.head_dim) + kv_element_bytes(kv_types.v, hp.head_dim)) / 2;
  d_opt.max_batch = opt.n_batch;
  const tiers::model_demand demand = tiers::demand_from_gguf(f.gguf(), hp, d_opt);

  std::string gpu_note, ram_note;
  tiers::plan_options po = tier_plan_options(opt, gpu_note, ram_note);
  rt::probe_options probe;
  probe.disk_file = opt.model;
  probe.threads = opt.threads;
  probe.gpu = po.gpu_budget > 0 || opt.backend == "vulkan";
  probe.device = opt.device;
  const std::filesystem::path cache = rt::link_cache_path(probe);
  if (opt.probe) {
    po.links = rt::probe_links(probe);
    if (!cache.empty()) rt::save_cached_links(cache, po.links);
  } else if (auto cached = cache.empty() ? std::nullopt : rt::load_cached_links(cache)) {
    po.links = std::move(*cached);
  }
  const tiers::placement_plan plan = tiers::plan_placement(demand, po);
  // What the engine can execute today for the same budget: -ngl N, the most leading layers that
  // fit, with the cost model's prediction (run it with strata-bench to compare with a measurement).
  const std::uint32_t ngl = po.gpu_budget ? tiers::layers_that_fit(demand, po.gpu_budget) : 0;
  const auto split = tiers::layer_split_placement(demand, ngl);
  const auto order = tiers::execution_order(demand);
  const double split_decode = tiers::evaluate(demand, split, po.links, 1, order).tokens_per_second();
  const double split_prefill = tiers::evaluate(demand, split, po.links, po.prefill_batch, order).tokens_per_second();
  if (opt.json) {
    std::string out = tiers::plan_json(demand, plan, po);
    out.pop_back();  // add where the budgets came from and the layer split
    out += ",\"model\":" + json::quote(opt.model) + ",\"n_ctx\":" + std::to_string(d_opt.n_ctx) +
           ",\"gpu_budget_source\":" + json::quote(gpu_note) + ",\"ram_budget_source\":" + json::quote(ram_note) +
           ",\"layer_split\":{\"n_gpu_layers\":" + std::to_string(ngl) + ",\"decode_tokens_per_second\":" +
           std::to_string(split_decode) + ",\"prefill_tokens_per_second\":" + std::to_string(split_prefill) + "}}";
    std::cout << out << "\n";
  } else {
    char line[160];
    std::snprintf(line, sizeof line, "today's engine (-ngl %u of %u layers fits the GPU budget): decode %.2f t/s, prefill %.1f t/s",
                  ngl, hp.n_layer, split_decode, split_prefill);
    std::cout << "model: " << opt.model << " (" << hp.arch << ", " << hp.n_layer << " layers, context " << d_opt.n_ctx
              << ")\nGPU budget from " << gpu_note << "; RAM budget from " << ram_note << "\n"
              << tiers::plan_text(demand, plan, po) << line << (po.links.assumed() ? " (assumed links)" : "") << "\n";
  }
  return 0;
}

}  // namespace strata::app
