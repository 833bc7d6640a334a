// The engine's placement of a model (strata/runtime/placement.hpp): demand, budgets, links and
// the layout, with the errors a layout beyond a budget gets.
#include "strata/runtime/placement.hpp"

#include <limits>

#include "model_config.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/kernels/cpu/kv_storage.hpp"
#include "strata/runtime/device_memory.hpp"
#include "strata/runtime/link_probe.hpp"
#include "strata/tiers/fit.hpp"

namespace strata::rt {
namespace {

constexpr std::uint64_t unlimited = std::numeric_limits<std::uint64_t>::max() / 4;

std::string blocks_text(std::uint32_t n) {
  return n == 1 ? "block 0" : "blocks 0-" + std::to_string(n - 1);
}

}  // namespace

placement_inputs placement_for(const std::filesystem::path& model, const gguf::reader& r, const arch::hparams& hp,
                               const engine_options& opt, bool gpu, bool defaults) {
  placement_inputs in;
  const std::uint32_t batch = prompt_step_tokens(model, r, hp, opt, gpu);  // opt.n_batch where given
  const kv::kv_config kv = kv_config_for(hp, opt, hp.n_layer);
  tiers::demand_options d;
  d.n_ctx = kv.n_slots();
  d.kv_bytes_per_element = double(kernels::cpu::kv_codec(opt.type_k, hp.head_dim).head_bytes() +
                                  kernels::cpu::kv_codec(opt.type_v, hp.head_dim).head_bytes()) /
                           (2.0 * hp.head_dim);
  d.max_batch = batch;
  d.max_outputs = opt.max_outputs;
  in.demand = tiers::demand_from_gguf(r, hp, d);

  auto& po = in.plan;
  const bool want_defaults = defaults || opt.fit;
  if (!gpu) {
    in.gpu_budget_source = "the CPU backend: no GPU";
  } else if (opt.gpu_budget) {
    po.gpu_budget = engine_gpu_budget(opt.gpu_budget);
    const std::uint64_t reserve = opt.gpu_budget - po.gpu_budget;
    in.gpu_budget_source = reserve ? "--gpu-budget " + format_byte_size(opt.gpu_budget) + " less " + format_byte_size(reserve) +
                                         " kept for the driver's own memory (its context and recorded command buffers)"
                                   : "--gpu-budget";
  } else if (!want_defaults) {
    po.gpu_budget = unlimited;
    in.gpu_budget_source = "no --gpu-budget: unlimited";
  } else if (const auto g = gpu_memory(opt.device)) {
    po.gpu_budget = default_gpu_budget(g->available);
    in.gpu_budget_source = "'" + g->device + "': " + format_byte_size(g->available) + " free of " +
                           format_byte_size(g->total) +
                           (g->from_budget_ext ? " (VK_EXT_memory_budget)" : " (heap size; no VK_EXT_memory_budget)") +
                           " minus a margin";
  } else {
    throw error("no Vulkan device to read the free GPU memory of; give --gpu-budget SIZE");
  }
  if (opt.ram_budget) {
    po.ram_budget = opt.ram_budget;
    in.ram_budget_source = "--ram-budget";
  } else if (!want_defaults) {
    po.ram_budget = unlimited;
    in.ram_budget_source = "no --ram-budget: unchecked";
  } else if (const auto a = host_available_memory()) {
    po.ram_budget = default_ram_budget(*a);
    in.ram_budget_source = "MemAvailable " + format_byte_size(*a) + " minus a margin";
  } else {
    throw error("/proc/meminfo has no MemAvailable; give --ram-budget SIZE");
  }
  for (const std::string& rule : opt.override_tensor) tiers::parse_override_rules(rule, po.overrides);
  tiers::add_cpu_moe_rules(opt.cpu_moe, opt.n_cpu_moe, po.overrides);
  po.prefill_batch = batch;
  po.stream_experts = opt.stream_experts;
  po.cache_experts = opt.cache_experts;
  po.expert_cpu_misses = opt.expert_cpu_misses;
  probe_options probe;
  probe.disk_file = model;
  probe.threads = opt.threads;
  probe.gpu = gpu;
  probe.device = opt.device;
  const std::filesystem::path cache = link_cache_path(probe);
  if (opt.links) po.links = *opt.links;
  else if (auto cached = cache.empty() ? std::nullopt : load_cached_links(cache)) po.links = std::move(*cached);
  return in;
}

tiers::engine_layout choose_layout(const placement_inputs& in, const engine_options& opt, bool gpu) {
  const tiers::model_demand& d = in.demand;
  const tiers::plan_options& po = in.plan;
  tiers::engine_layout l;
  if (opt.expert_cache && !opt.cache_experts) throw error("--expert-cache with --no-expert-cache: give one of them");
  if (opt.expert_cache && *opt.expert_cache == 0)
    throw error("--expert-cache 0: the expert cache needs at least one slot per MoE layer");
  if (opt.expert_cache && !gpu) throw error("--expert-cache needs the Vulkan backend (GPU expert slots)");
  if (opt.expert_cache && opt.fit)
    throw error("--expert-cache with --fit: --fit chooses the expert cache and its slots itself; give -ngl with "
                "--expert-cache SLOTS to force it");
  if (opt.stream_layers && !gpu) throw error("--stream-layers needs the Vulkan backend (the ring is GPU memory)");
  if (opt.stream_layers && opt.fit)
    throw error("--stream-layers with --fit: --fit chooses the streamed blocks itself; give -ngl with --stream-layers N "
                "to force it");
  if (!gpu) l = tiers::layer_split_layout(d, 0);
  else if (opt.fit) l = tiers::plan_engine_layout(d, po);
  else {
    l = tiers::fixed_layout(d, opt.n_gpu_layers, po.overrides, opt.expert_cache.value_or(0), opt.stream_layers);
    tiers::choose_expert_misses(d, l, po);
    l.stream_cpu_tokens = tiers::stream_cpu_tokens(d, l, po.links, po.prefill_batch);  // the per-phase choice
    if (!opt.stream_link) l.stream_link_blocks = tiers::stream_link_blocks(d, l, po.links);  // else the user's, below
    // CPU experts stream in prompt steps by default when the budget holds their ring, and a
    // cache's prompt steps stage its experts where the budget holds the pair; with no --gpu-budget
    // the device's free memory (less the margin) must hold them.
    tiers::plan_options room = po;
    if (room.gpu_budget == unlimited && (!l.handoff_layers().empty() || !l.cached_layers().empty()))
      if (const auto g = gpu_memory(opt.device)) room.gpu_budget = default_gpu_budget(g->available);
    if (opt.stream_experts && !l.handoff_layers().empty())
      l = tiers::with_streamed_experts(d, std::move(l), po.links, room.gpu_budget, po.prefill_batch);
    tiers::choose_expert_stage(d, l, room);
  }

  if (opt.expert_cpu_misses && l.cached_layers().empty())
    throw error(std::string("--expert-misses ") + (*opt.expert_cpu_misses ? "cpu" : "gpu") +
                ": no MoE layer's experts are GPU-cached; give -ngl with --expert-cache SLOTS, or --fit where it caches them");

  if (opt.stream_link) {  // the user's count over the planner's
    const std::string flag = "--stream-link " + std::to_string(*opt.stream_link);
    if (!gpu) throw error(flag + " needs the Vulkan backend (the ring is GPU memory)");
    if (*opt.stream_link && l.streamed_layers().empty())
      throw error(flag + ": no block's dense FFN is streamed; give -ngl with --stream-layers N, or --fit where it streams");
    if (*opt.stream_link && l.stream_cpu_tokens == 0)
      throw error(flag + ": every step streams the FFNs through the ring already (the link speeds predict it faster "
                  "than the CPU), so no step computes them on the CPU for the link to run beside");
    l.stream_link_blocks = *opt.stream_link;
    (void)l.link_layers();  // more than half the streamed blocks: refused naming the limit
  }

  const tiers::placement_plan p = tiers::layout_plan(d, l, po.links, unlimited, po.prefill_batch);
  const std::string what = "-ngl " + std::to_string(l.n_gpu_layers) +
                           (l.handoff_layers().empty() ? "" : " with the experts of " +
                                                                  std::to_string(l.handoff_layers().size()) +
                                                                  " MoE blocks on the CPU") +
                           (l.cached_layers().empty() ? "" : " and the experts of " + std::to_string(l.cached_layers().size()) +
                                                                 " MoE blocks GPU-cached") +
                           (l.streamed_layers().empty() ? "" : " and the dense FFN of " +
                                                                   std::to_string(l.streamed_layers().size()) +
                                                                   " blocks streamed") +
                           (l.expert_streamed_layers().empty() ? "" : " (the experts of " +
                                                                          std::to_string(l.expert_streamed_layers().size()) +
                                                                          " CPU blocks streamed in prompt steps)");
  // Weights and KV are known exactly; the activation scratch the ledger checks as it allocates.
  if (gpu && l.n_gpu_layers && p.gpu_weights + p.gpu_kv + p.gpu_ring > po.gpu_budget)
    throw error("--gpu-budget " + format_byte_size(opt.gpu_budget ? opt.gpu_budget : po.gpu_budget) +
                (opt.gpu_budget && opt.gpu_budget != po.gpu_budget
                     ? " (" + format_byte_size(po.gpu_budget) + " for the engine after the driver's reserve)"
                     : std::string()) +
                " does not hold what " + what + " puts on the GPU: " +
                "weights " + format_byte_size(p.gpu_weights) + " and the KV cache of " + blocks_text(l.n_gpu_layers) +
                " (" + format_byte_size(p.gpu_kv) + ")" +
                (tiers::ring_bytes(d, l) ? " and the layer-streaming ring (" + std::to_string(tiers::ring_slots) + " slots of " +
                                  format_byte_size(tiers::ring_slot_bytes(d, l)) + ")"
                            : std::string()) +
                (tiers::expert_ring_bytes(d, l) ? " and the expert-streaming ring (" +
                                                      format_byte_size(tiers::expert_ring_slots(d, l).first) + " + " +
                                                      format_byte_size(tiers::expert_ring_slots(d, l).second) + ")"
                                                : std::string()) +
                "; lower -ngl, move experts with --n-cpu-moe / --cpu-moe, stream dense FFNs with --stream-layers, or "
                "use --fit to place the model within the budget");
  // What the CPU cannot hold in RAM streams from the drive (its blocks, whole, from the last
  // down), or what -ot ...=disk sends there; the rest of the CPU side must fit.
  l.disk = tiers::plan_disk_tier(d, l.n_gpu_layers, po.overrides, po.ram_budget, p.ram_total());
  return l;
}

std::uint32_t prompt_step_tokens(const std::filesystem::path& model, const gguf::reader& r, const arch::hparams& hp,
                                 const engine_options& opt, bool gpu) {
  if (opt.n_batch) return opt.n_batch;
  prompt_step_facts f;
  f.plain_kv = !kv::is_compressed(opt.type_k) && !kv::is_compressed(opt.type_v);
  const auto g = gpu && f.plain_kv ? gpu_memory(opt.device) : std::nullopt;
  f.real_gpu = g && !g->is_cpu;
  if (!f.real_gpu) return short_prompt_step;
  engine_options big = opt;
  big.n_batch = long_prompt_step;
  try {
    const placement_inputs in = placement_for(model, r, hp, big, true);
    const tiers::engine_layout l = choose_layout(in, big, true);
    f.whole_on_gpu = l.n_gpu_layers >= hp.n_layer && l.handoff_layers().empty() && l.cached_layers().empty() &&
                     l.streamed_layers().empty() && l.expert_streamed_layers().empty();
    const tiers::placement_plan p = tiers::layout_plan(in.demand, l, in.plan.links, unlimited, long_prompt_step);
    f.long_step_bytes = p.gpu_weights + p.gpu_kv + p.gpu_ring + in.demand.scratch_bytes;
    f.budget = default_gpu_budget(g->available);
    if (opt.gpu_budget || opt.fit) f.budget = std::min(f.budget, in.plan.gpu_budget);
  } catch (const error&) {  // the long step's layout does not fit some budget: the short one
    return short_prompt_step;
  }
  return choose_prompt_step(f);
}

}  // namespace strata::rt
