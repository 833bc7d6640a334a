// `strata-run --plan`: where each tensor of the model would live and run for the given budgets
// (issue 14's placement planner), the bytes per token on each link and the predicted speeds.
// Budgets default to what the GPU (VK_EXT_memory_budget) and the host report free, minus margins;
// link speeds come from the probe cache when one exists, else from labelled assumptions.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "modes.hpp"
#include "tier_options.hpp"
#include "strata/arch/all.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/runtime/device_memory.hpp"
#include "strata/runtime/link_probe.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/runtime/placement.hpp"
#include "strata/tiers/report.hpp"
#include "strata/tiers/routing_prior.hpp"

namespace strata::app {
namespace {

// Whether to plan for a GPU: a given --gpu-budget plans for a card of that size (a what-if on any
// machine), else the Vulkan device check of --backend auto (which takes no CPU emulation such as
// lavapipe); why not when not.
bool runs_on_gpu(const run_options& opt, std::string& why_not) {
  if (opt.backend == "cpu") return why_not = "--backend cpu: no GPU", false;
  if (!opt.tiers.gpu_budget.empty()) return true;
  const auto g = rt::gpu_memory(opt.device);
  if (!g) return why_not = "no Vulkan device: no GPU", false;
  if (g->is_cpu && opt.backend != "vulkan")
    return why_not = "only a CPU Vulkan device ('" + g->device + "'; --backend auto does not use it): no GPU", false;
  return true;
}

// " 3,4,7": a block list as the layout line writes it (appended piecewise: `"," + to_string()`
// builds a temporary GCC 12 warns about, -Wrestrict).
template <class Blocks>
void append_blocks(std::string& s, const Blocks& blocks) {
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    s += i ? "," : " ";
    s += std::to_string(blocks[i]);
  }
}

std::string layout_text(const tiers::engine_layout& l, const arch::hparams& hp) {
  std::string s = "-ngl " + std::to_string(l.n_gpu_layers);
  const auto h = l.handoff_layers();
  if (!h.empty()) {
    s += ", routed experts of blocks";
    append_blocks(s, h);
    s += " on the CPU";
  }
  const auto xs = l.expert_streamed_layers();
  if (!xs.empty()) {
    const bool all = xs.size() == h.size();
    if (!all) {
      s += " (those of blocks";
      append_blocks(s, xs);
    }
    s += std::string(all ? " (all" : "") + " streamed through the expert ring in steps of more than " +
         std::to_string(l.expert_cpu_tokens) + " tokens: the GPU computes them there)";
  }
  const auto c = l.cached_layers();
  if (!c.empty()) {
    s += ", routed experts of blocks";
    append_blocks(s, c);
    s += " GPU-cached (" + std::to_string(l.expert_slots) + " slots each";
    if (hp.n_expert && hp.n_expert_used && l.expert_slots < hp.n_expert) {
      // What the cost model assumed: a trained router's skew (tiers/routing_prior.hpp).
      char prior[96];
      std::snprintf(prior, sizeof prior, "; the routing prior expects %.1f%% of a token's routed experts in them",
                    100.0 * tiers::cache_hit_rate(hp.n_expert, hp.n_expert_used, l.expert_slots));
      s += prior;
    }
    if (l.expert_cpu_misses) s += "; a decode step's misses computed on the CPU";
    if (l.expert_cache_stage) s += "; prompt steps copying each cached block's experts to the GPU whole";
    s += ")";
  }
  const auto st = l.streamed_layers();
  if (!st.empty()) {
    s += ", dense FFN of blocks";
    append_blocks(s, st);
    s += l.stream_cpu_tokens ? " streamed through the ring in steps of more than " + std::to_string(l.stream_cpu_tokens) +
                                   " tokens, computed on the CPU in shorter ones (host->GPU bytes and hand-offs below)"
                             : std::string(" streamed through the ring in every step (host->GPU bytes below)");
    if (const auto ln = l.link_layers(); !ln.empty()) {
      s += "; in those shorter steps the link carries blocks";
      append_blocks(s, ln);
      s += " while the CPU computes the others";
    }
  }
  return s;
}

}  // namespace

int run_plan(const run_options& opt) {
  const gguf::file f(opt.model);
  const arch::hparams hp = arch::visit(f->get_string("general.architecture"),
                                       [&](auto a) { return decltype(a)::load_hparams(f.gguf()); });
  rt::engine_options eo;
  eo.threads = opt.threads;
  eo.device = opt.device;
  eo.n_gpu_layers = opt.n_gpu_layers;
  eo.n_ctx = opt.n_ctx ? opt.n_ctx : hp.n_ctx_train;
  eo.n_batch = opt.n_batch;
  eo.max_outputs = 1;
  const kv::kv_cache_types kv_types = kv::parse_kv_cache_types(opt.kv_type, opt.kv_type_k, opt.kv_type_v);
  eo.type_k = kv_types.k;
  eo.type_v = kv_types.v;
  apply(opt.tiers, eo);
  std::string no_gpu;
  const bool gpu = runs_on_gpu(opt, no_gpu);
  eo.n_batch = rt::prompt_step_tokens(opt.model, f.gguf(), hp, eo, gpu);  // -b, or what model::load chooses
  rt::placement_inputs in = rt::placement_for(opt.model, f.gguf(), hp, eo, gpu, /*defaults=*/true);
  if (!gpu) in.gpu_budget_source = no_gpu;
  if (opt.probe) {
    rt::probe_options probe;
    probe.disk_file = opt.model;
    probe.threads = opt.threads;
    probe.gpu = gpu;
    probe.device = opt.device;
    in.plan.links = rt::probe_links(probe);
    if (const auto cache = rt::link_cache_path(probe); !cache.empty()) rt::save_cached_links(cache, in.plan.links);
  }
  const tiers::model_demand& demand = in.demand;
  const tiers::plan_options& po = in.plan;
  const tiers::placement_plan plan = tiers::plan_placement(demand, po);
  // What model::load would run for the same options (-ngl and the overrides, or --fit), or why
  // it would refuse: the engine streams only whole dense FFNs of GPU blocks, one layout for both
  // phases (the planner above may stream any group and switch per phase).
  std::string engine_error;
  std::optional<tiers::engine_layout> layout;
  try {
    layout = rt::choose_layout(in, eo, gpu);
  } catch (const error& e) {
    engine_error = e.what();
  }
  const std::optional<tiers::placement_plan> run =
      layout ? std::optional(tiers::layout_plan(demand, *layout, po.links, po.ram_budget, po.prefill_batch)) : std::nullopt;
  if (opt.json) {
    std::string out = tiers::plan_json(demand, plan, po);
    out.pop_back();  // add where the budgets came from and the engine's layout
    out += ",\"model\":" + json::quote(opt.model) + ",\"n_ctx\":" + std::to_string(eo.n_ctx) +
           ",\"gpu_budget_source\":" + json::quote(in.gpu_budget_source) +
           ",\"ram_budget_source\":" + json::quote(in.ram_budget_source) + ",\"engine\":";
    if (run) {
      out += "{\"fit\":" + std::string(opt.tiers.fit ? "true" : "false") + ",\"n_gpu_layers\":" +
             std::to_string(layout->n_gpu_layers) + ",\"cpu_expert_layers\":[";
      const auto h = layout->handoff_layers();
      for (std::size_t i = 0; i < h.size(); ++i) out += (i ? "," : "") + std::to_string(h[i]);
      out += "],\"cached_expert_layers\":[";
      const auto c = layout->cached_layers();
      for (std::size_t i = 0; i < c.size(); ++i) out += (i ? "," : "") + std::to_string(c[i]);
      out += "],\"streamed_layers\":[";
      const auto st = layout->streamed_layers();
      for (std::size_t i = 0; i < st.size(); ++i) out += (i ? "," : "") + std::to_string(st[i]);
      out += "],\"stream_cpu_tokens\":";
      out += std::to_string(layout->stream_cpu_tokens);
      out += ",\"stream_link_layers\":[";
      const auto ln = layout->link_layers();
      for (std::size_t i = 0; i < ln.size(); ++i) out += (i ? "," : "") + std::to_string(ln[i]);
      out += "]";
      out += ",\"streamed_bytes_per_step\":";
      out += std::to_string(tiers::streamed_bytes(demand, *layout));
      out += ",\"expert_streamed_layers\":[";
      const auto xs = layout->expert_streamed_layers();
      for (std::size_t i = 0; i < xs.size(); ++i) out += (i ? "," : "") + std::to_string(xs[i]);
      out += "],\"expert_cpu_tokens\":" + std::to_string(layout->expert_streamed_layers().empty() ? 0 : layout->expert_cpu_tokens);
      out += ",\"expert_streamed_bytes_per_step\":" + std::to_string(tiers::expert_streamed_bytes(demand, *layout));
      out += ",\"expert_ring_bytes\":" + std::to_string(tiers::expert_ring_bytes(demand, *layout));
      out += ",\"disk_layers\":[";
      for (std::size_t i = 0; i < layout->disk.blocks.size(); ++i) out += (i ? "," : "") + std::to_string(layout->disk.blocks[i]);
      out += "],\"disk_bytes_per_step\":" + std::to_string(layout->disk.disk_bytes) +
             ",\"disk_ring_bytes\":" + std::to_string(layout->disk.ring_bytes());
      out += ",\"expert_slots\":" + std::to_string(layout->expert_slots) +
             ",\"expert_cpu_misses\":" + (layout->expert_cpu_misses ? "true" : "false") +
             ",\"expert_cache_stage\":" + (layout->expert_cache_stage ? "true" : "false") + ",\"plan\":" + tiers::plan_json(demand, *run, po) + "}";
    } else {
      out += "{\"error\":" + json::quote(engine_error) + "}";
    }
    std::cout << out << "}\n";
    return 0;
  }
  std::cout << "model: " << opt.model << " (" << hp.arch << ", " << hp.n_layer << " layers, context " << eo.n_ctx
            << ")\nGPU budget from " << in.gpu_budget_source << "; RAM budget from " << in.ram_budget_source << "\n"
            << tiers::plan_text(demand, plan, po) << "\n";
  if (run)
    std::cout << "the engine runs (" << (opt.tiers.fit ? "--fit" : "-ngl and overrides") << "): " << layout_text(*layout, hp)
              << "\n"
              << (layout->disk.empty()
                      ? std::string()
                      : "disk tier: " + std::to_string(layout->disk.blocks.size()) + " CPU blocks (from block " +
                            std::to_string(layout->disk.blocks.front()) + ") read from the file every step, " +
                            format_byte_size(layout->disk.disk_bytes) + " per step through " +
                            std::to_string(layout->disk.slots) + " ring slots of " +
                            format_byte_size(layout->disk.slot_bytes) + "\n")
              << tiers::plan_text(demand, *run, po);
  else
    std::cout << "the engine would refuse these options: " << engine_error << "\n";
  return 0;
}

}  // namespace strata::app
