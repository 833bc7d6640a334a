// The planner's cost model: predicted seconds per token of one placement for a step of B tokens
// (decode: B = 1; prefill: B = the batch). The hidden state walks the layers in order, so the
// GPU's and the CPU's compute add up (one token's work is a chain), while copies that can be
// issued ahead - host->GPU uploads of dense weights, NVMe reads - overlap that chain on their own
// links: a step costs max(chain, upload link busy, NVMe busy) (design.md: max, not sum, when
// prefetched). Routed experts are known only once their layer's router ran, so their uploads
// and reads sit on the chain. (The GPU expert cache's router-driven prefetch moves the uploads of
// predicted experts off the chain; the model does not count it: its recall depends on the
// model's weights and is measured, not assumed.)
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "strata/tiers/demand.hpp"
#include "strata/tiers/links.hpp"
#include "strata/tiers/routing_prior.hpp"

namespace strata::tiers {

enum class home_tier { gpu, ram, disk };  // where the bytes live between uses
enum class exec_unit { gpu, cpu };        // who multiplies by them

struct tensor_placement {
  home_tier home = home_tier::ram;
  exec_unit decode = exec_unit::cpu;
  exec_unit prefill = exec_unit::cpu;
  // GPU-computed weights homed off the GPU: the share of their reads that crosses the link (1:
  // streamed; a GPU expert cache: its expected decode miss rate, the rest read from the slots).
  double miss_rate = 1.0;
  // Streamed whole through a ring (layer_stream, expert_stream): every byte crosses the link once
  // per step whatever the routing, and the copy is known before the step (no host sync).
  bool upload_whole = false;
  // Routed experts the GPU maps to its slots itself (the expert cache's lookup form): a miss is
  // read over the link by the kernels, with no host round trip for the router's choice.
  bool routed_on_gpu = false;
  // A GPU expert cache's slots per block (0: none): its misses in a step of B tokens follow the
  // routing prior (tiers/routing_prior.hpp), the slots holding the most-routed experts.
  std::uint32_t cache_slots = 0;
  // Such a cache whose decode misses the CPU computes (the Vulkan backend's STRATA_VK_CACHE_CPU_MISSES):
  // those bytes are read from DRAM on the chain, and each cached block pays a round trip a step.
  bool misses_on_cpu = false;
  // Such a cache whose prompt steps of more than cache_stage_tokens tokens copy the block's
  // experts whole into a staging pair first (the Vulkan backend's expert_cache_stage.cpp): in
  // those steps every byte crosses the link once, as a copy, before the block's kernels.
  bool staged_prefill = false;
};
// The staged prompt steps' threshold (runtime/vulkan/expert_cache_state.hpp cache_stage_tokens).
inline constexpr std::uint32_t cache_stage_tokens = 16;

// What the four placements are called: resident, streamed, CPU-computed, disk-backed.
inline std::string_view label(const tensor_placement& p) {
  if (p.home == home_tier::gpu) return "gpu-resident";
  if (p.home == home_tier::disk) return "disk-backed";
  if (p.decode == exec_unit::gpu) return p.cache_slots || p.miss_rate < 1.0 ? "gpu-cached" : "gpu-streamed";
  return "cpu-computed";
}

struct phase_cost {
  std::uint32_t batch = 1;
  double seconds_per_token = 0;
  double chain_s = 0;            // GPU + CPU compute and unprefetchable copies, per token
  double upload_s = 0;           // host->GPU link busy per token
  double nvme_s = 0;             // NVMe busy per token
  // Bytes per token on each link.
  double gpu_read_bytes = 0, host_to_gpu_bytes = 0, cpu_read_bytes = 0, nvme_bytes = 0;
  double handoffs = 0;           // GPU <-> CPU switches per step

  double tokens_per_second() const noexcept { return seconds_per_token > 0 ? 1.0 / seconds_per_token : 0; }
};

// The share of the host->GPU copy rate a kernel reaching into host memory gets (the expert
// cache's lookup form reading a missed expert): the per-pair matvecs of short steps, and the
// grouped kernels of prompt steps over large experts (a slab of an expert tensor above
// large_expert_slab), which read them far slower: Llama 4 Scout's 23.6 MB slabs at 12 GiB on the
// H100 read 111.7 MB of misses a token at 139.3 t/s, 15.6 GB/s of a 50.8 GB/s link (session 60;
// predicted 312 t/s at 0.8). Small experts' prompt steps keep 0.8.
inline constexpr double kernel_host_read_share = 0.8;
inline constexpr double kernel_prompt_read_share_large = 0.31;
inline constexpr std::uint64_t large_expert_slab = 4ull << 20;

namespace detail {

// Execution order inside a step: embedding, then each block (its norms and attention, router,
// routed experts, then the shared expert or dense FFN, as graph/decoder.hpp calls them), then
// the output norm and head. (File order puts the router among the expert tensors in some GGUFs,
// which would count hand-offs that do not happen.)
inline long exec_rank(const tensor_demand& t) {
  if (t.layer < 0) return t.kind == tensor_kind::embedding ? -1 : 1L << 40;
  const int step = t.kind == tensor_kind::attention || t.kind == tensor_kind::norm ? 0
                   : t.kind == tensor_kind::router                                  ? 1
                   : t.kind == tensor_kind::routed_experts                          ? 2
                                                                                    : 3;
  return long(t.layer) * 16 + step;
}

}  // namespace detail

// Tensors in execution order (indices into d.tensors); the cost walk and the report use it.
inline std::vector<std::size_t> execution_order(const model_demand& d) {
  std::vector<std::size_t> order(d.tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return detail::exec_rank(d.tensors[a]) < detail::exec_rank(d.tensors[b]);
  });
  return order;
}

// Predicted cost of `p` (parallel to d.tensors) for steps of `batch` tokens. KV is read where
// each layer's attention runs.
inline phase_cost evaluate(const model_demand& d, const std::vector<tensor_placement>& p, const link_speeds& l,
                           std::uint32_t batch, const std::vector<std::size_t>& order) {
  phase_cost c;
  c.batch = batch;
  const bool decode = batch == 1;
  const double B = batch;
  std::vector<char> kv_counted(d.n_layer, 0);
  int last = -1;  // exec unit of the previous non-norm tensor
  std::int32_t synced_layer = -1;  // GPU experts homed off the GPU: the host maps them once per block
  for (const std::size_t i : order) {
    const tensor_demand& t = d.tensors[i];
    const tensor_placement& pl = p[i];
    const exec_unit ex = decode ? pl.decode : pl.prefill;
    double bytes = double(t.bytes) * t.share_touched(batch) / B;  // per token
    const double flops = 2.0 * t.elements * t.share_per_token();
    // Attention reads this layer's KV wherever it runs (counted once per layer).
    double kv = 0;
    if (t.kind == tensor_kind::attention && t.layer >= 0 && std::uint32_t(t.layer) < d.n_layer &&
        !kv_counted[t.layer]) {
      kv_counted[t.layer] = 1;
      kv = double(d.kv_bytes_per_layer);
    }
    // Known only after the router (unless the whole tensor streams ahead of it); in prompt steps
    // too where the expert kernels read misses from host memory themselves (the lookup form):
    // nothing copies them ahead of the kernels (session 55: pp512 2,094 t/s measured, 3,880
    // predicted with the misses off the chain).
    const bool on_chain = t.kind == tensor_kind::routed_experts && !pl.upload_whole && (decode || pl.routed_on_gpu);
    if (pl.home == home_tier::disk) {
      c.nvme_bytes += bytes;
      if (on_chain) c.chain_s += bytes / l.nvme_qd32;
    }
    if (ex == exec_unit::gpu) {
      c.gpu_read_bytes += bytes + kv;
      c.chain_s += std::max((bytes + kv) / l.gpu_read, flops / l.gpu_flops);
      if (pl.home != home_tier::gpu) {
        const double up = pl.upload_whole ? double(t.bytes) / B
                          : pl.cache_slots && t.n_expert && t.n_expert_used
                              ? double(t.bytes) * cache_miss_share(t.n_expert, t.n_expert_used, pl.cache_slots, batch) / B
                              : bytes * pl.miss_rate;
        const bool misses_on_cpu = decode && pl.misses_on_cpu && pl.cache_slots;
        if (pl.staged_prefill && batch > cache_stage_tokens) {  // the whole tensor copied, then the kernels
          const double whole = double(t.bytes) / B;
          c.host_to_gpu_bytes += whole;
          c.chain_s += whole / l.host_to_gpu;
        } else if (misses_on_cpu) {  // the CPU computes the misses from DRAM
          c.cpu_read_bytes += up;
          c.chain_s += up / l.cpu_read;
        } else {
          c.host_to_gpu_bytes += up;
          // The lookup form's kernels read a missed expert from host memory themselves, slower than
          // a copy: ~40 GB/s of miss reads (session 53, H200) against ~49 GB/s of probed copies (H100 host).
          // Grouped steps (the engine's rule: more than two pairs an expert) read large experts slowly.
          const bool grouped_large = !decode && t.n_expert && t.bytes / t.n_expert > large_expert_slab &&
                                     B * t.n_expert_used > 2.0 * t.n_expert;
          const double share = grouped_large ? kernel_prompt_read_share_large : kernel_host_read_share;
          if (on_chain) c.chain_s += up / (pl.routed_on_gpu ? share * l.host_to_gpu : l.host_to_gpu);
        }
        // Routed experts uploaded by id, or their misses sent to the CPU: the host reads the
        // router's choice (a round trip). The misses' hand-off drains the GPU, waits for the host
        // and starts it again, as a CPU-expert block's does: two switches (Scout at 24 / 12 GiB
        // on the H100, session 59: one priced 71.1 / 39.9 t/s against 54.7 / 32.7 measured, two
        // 60.7 / 36.4).
        if (t.kind == tensor_kind::routed_experts && !pl.upload_whole && (!pl.routed_on_gpu || misses_on_cpu) &&
            t.layer != synced_layer) {
          synced_layer = t.layer;
          c.handoffs += misses_on_cpu ? 2 : 1;
        }
      }
    } else {
      c.cpu_read_bytes += bytes + kv;
      c.chain_s += std::max((bytes + kv) / l.cpu_read, flops / l.cpu_flops);
    }
    if (t.kind != tensor_kind::norm) {
      if (last >= 0 && last != int(ex)) c.handoffs += 1;
      last = int(ex);
    }
  }
  // A hand-off: one synchronisation per step plus the batch's hidden states over the link.
  c.chain_s += c.handoffs * (l.handoff_s + B * double(d.hidden_bytes) / l.host_to_gpu) / B;
  c.chain_s += double(d.n_layer) * l.block_s / B;
  c.upload_s = c.host_to_gpu_bytes / l.host_to_gpu;
  c.nvme_s = c.nvme_bytes / l.nvme_qd32;
  c.seconds_per_token = std::max({c.chain_s, c.upload_s, c.nvme_s});
  return c;
}

}  // namespace strata::tiers
