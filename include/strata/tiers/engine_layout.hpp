// The placements the engine executes, in the planner's terms: the leading `n_gpu_layers` blocks
// run on the Vulkan backend (with the token embedding; the output norm and head too when every
// block is there), the rest on the CPU backend (runtime/engine: one stage each), and inside GPU
// blocks the routed experts of chosen layers are computed by the CPU (the Vulkan backend's MoE
// hand-off: router on the GPU, experts on the CPU threads, their sum back to the GPU).
// fixed_layout() is what -ngl, --cpu-moe, --n-cpu-moe and expert -ot rules ask for;
// plan_engine_layout() (--fit, tiers/fit.hpp) picks the layout with the lowest predicted decode
// time that fits the budgets. CPU blocks the RAM budget cannot hold are read from the file every step (disk-backed,
// tiers/disk_tier.hpp).
// Dense layer streaming: in chosen GPU blocks the dense FFN (ffn_gate/up/down) lives in pinned
// host memory and is copied, block by block, into a ring of two device-local slots ahead of its
// use (runtime/vulkan/layer_stream.cpp); attention, norms and KV stay resident.
// Expert streaming: GPU blocks whose routed experts the CPU computes may stream them, every
// expert, through a second ring in prompt steps (runtime/vulkan/expert_stream.cpp): the design's
// per-phase rule, decode on the CPU where the experts live, prefill uploading them once per batch.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"
#include "strata/tiers/cost.hpp"
#include "strata/tiers/demand.hpp"
#include "strata/tiers/disk_tier.hpp"
#include "strata/tiers/link_schedule.hpp"
#include "strata/tiers/overrides.hpp"
#include "strata/tiers/planner.hpp"

namespace strata::tiers {

struct engine_layout {
  std::uint32_t n_gpu_layers = 0;  // leading blocks on the GPU
  std::vector<char> cpu_experts;   // per block: routed experts computed by the CPU (always, off the GPU)
  // Per GPU block: routed experts GPU-cached (gpu-cached: they live in RAM, the GPU computes them
  // from expert_slots slots filled on a miss; runtime/vulkan/expert_cache.cpp).
  std::vector<char> cached_experts;
  std::uint32_t expert_slots = 0;
  // The cache's lookup form (the Vulkan backend's default, runtime/vulkan/expert_cache_lookup.cpp):
  // the GPU maps routed experts to slots itself and reads a miss from host memory over the link,
  // so a cached block needs no host round trip and prompt steps stay on the GPU. false: the split
  // form (a round trip per cached block and step; prompts routing more experts than slots on the CPU).
  bool expert_lookup = true;
  // Decode steps hand each cached block to the host after its router, and a block-step whose
  // routed experts miss the slots runs on the CPU (runtime/vulkan/expert_cache_misses.cpp; prompt
  // steps keep the form above). --expert-misses cpu|gpu, or the planner's choice (fit.hpp).
  bool expert_cpu_misses = false;
  // Prompt steps (more than 16 tokens) copy each cached block's experts whole into a device-local
  // staging pair (the largest block's gate + up and down, counted on the GPU) before its kernels,
  // which then read a miss there instead of over the link (runtime/vulkan/expert_cache_stage.cpp):
  // the planner's choice for large experts where the budget holds it (choose_expert_stage).
  bool expert_cache_stage = false;
  // Per GPU block: dense FFN streamed through the ring (gpu-streamed: lives in RAM, the GPU
  // computes it from a ring slot; --stream-layers, or --fit).
  std::vector<char> streamed_ffn;
  // The per-phase choice for those FFNs: steps of at most this many tokens (decode) compute them
  // on the CPU, where they live (a hand-off each way per block), longer steps (prefill) stream
  // them; 0: every step streams. stream_cpu_tokens() picks it from the link speeds.
  std::uint32_t stream_cpu_tokens = 0;
  // In those CPU-phase steps, this many of the streamed FFNs (spread evenly, never two adjacent:
  // link_layers()) are copied over the link into the ring and computed by the GPU instead, each
  // copy running while the CPU computes streamed FFNs before its block (tiers/link_schedule.hpp):
  // the link and the host's DRAM both carry weights at once. stream_link_blocks() picks it; 0: all on the CPU.
  std::uint32_t stream_link_blocks = 0;
  // Per GPU block whose routed experts the CPU computes (cpu_experts): in steps of more than
  // expert_cpu_tokens tokens they stream through the expert ring and the GPU computes them
  // instead (at least 1: decode always hands off; expert_cpu_tokens() picks it).
  std::vector<char> streamed_experts;
  std::uint32_t expert_cpu_tokens = 1;
  // Tensors of CPU blocks read from the model file every step through a ring of block slots
  // (disk-backed; tiers/disk_tier.hpp, chosen by choose_layout after the rest of the layout).
  disk_tier disk;

  bool ffn_streamed(std::uint32_t il) const noexcept {
    return il < n_gpu_layers && il < streamed_ffn.size() && streamed_ffn[il];
  }
  std::vector<std::uint32_t> streamed_layers() const {
    std::vector<std::uint32_t> out;
    for (std::uint32_t il = 0; il < n_gpu_layers; ++il)
      if (ffn_streamed(il)) out.push_back(il);
    return out;
  }

  // The streamed blocks whose FFN the link carries in CPU-phase steps (stream_link_blocks of them).
  std::vector<std::uint32_t> link_layers() const;
  // Per block: 1 where link_layers() has it.
  std::vector<char> link_mask(std::uint32_t n_layer) const {
    std::vector<char> m(n_layer, 0);
    if (stream_link_blocks)
      for (const std::uint32_t il : link_layers()) m.at(il) = 1;
    return m;
  }

  bool experts_cached(std::uint32_t il) const noexcept {
    return il < n_gpu_layers && il < cached_experts.size() && cached_experts[il] && !experts_on_cpu(il);
  }
  std::vector<std::uint32_t> cached_layers() const {
    std::vector<std::uint32_t> out;
    for (std::uint32_t il = 0; il < n_gpu_layers; ++il)
      if (experts_cached(il)) out.push_back(il);
    return out;
  }

  bool experts_on_cpu(std::uint32_t il) const noexcept {
    return il >= n_gpu_layers || (il < cpu_experts.size() && cpu_experts[il]);
  }
  // GPU blocks whose routed experts the CPU computes (what the Vulkan backend hands off).
  std::vector<std::uint32_t> handoff_layers() const {
    std::vector<std::uint32_t> out;
    for (std::uint32_t il = 0; il < n_gpu_layers && il < cpu_experts.size(); ++il)
      if (cpu_experts[il]) out.push_back(il);
    return out;
  }

  bool experts_streamed(std::uint32_t il) const noexcept {
    return il < n_gpu_layers && il < cpu_experts.size() && cpu_experts[il] && il < streamed_experts.size() &&
           streamed_experts[il];
  }
  // Hand-off blocks whose experts stream in prompt steps.
  std::vector<std::uint32_t> expert_streamed_layers() const {
    std::vector<std::uint32_t> out;
    for (std::uint32_t il = 0; il < n_gpu_layers; ++il)
      if (experts_streamed(il)) out.push_back(il);
    return out;
  }
};

// Which `n` of `m` streamed blocks (by index) the link carries in CPU-phase steps: evenly spread,
// the k-th at (2k + 1) m / 2n. With n <= m / 2 two of them are never adjacent and a CPU-computed
// block comes first, so each copy has CPU work before its block to run beside
// (tiers/link_schedule.hpp places it on those blocks' hand-offs). Larger n is refused naming the limit.
inline std::vector<std::uint32_t> spread_link_blocks(std::uint32_t m, std::uint32_t n) {
  if (n > m / 2)
    throw error("--stream-link " + std::to_string(n) + ": at most half of the " + std::to_string(m) +
                " streamed blocks (" + std::to_string(m / 2) + ") can be carried by the link, each after a CPU-computed one");
  std::vector<std::uint32_t> out(n);
  for (std::uint32_t k = 0; k < n; ++k) out[k] = std::uint32_t((2ull * k + 1) * m / (2ull * n));
  return out;
}

inline std::vector<std::uint32_t> engine_layout::link_layers() const {
  const std::vector<std::uint32_t> streamed = streamed_layers();
  std::vector<std::uint32_t> out;
  for (const std::uint32_t i : spread_link_blocks(std::uint32_t(streamed.size()), stream_link_blocks)) out.push_back(streamed[i]);
  return out;
}

// -ngl N in the layout's terms: n_gpu_layers >= n_layer (or < 0) is every block, 0 none.
inline engine_layout layer_split_layout(const model_demand& d, std::int64_t n_gpu_layers) {
  engine_layout l;
  l.n_gpu_layers = n_gpu_layers < 0 || n_gpu_layers >= std::int64_t(d.n_layer) ? d.n_layer : std::uint32_t(n_gpu_layers);
  l.cpu_experts.assign(d.n_layer, 0);
  return l;
}

// The two rates (B/s) while both read DRAM (the link beside the CPU in decode): each link's rate
// times its side-by-side share.
inline double shared_cpu_read(const link_speeds& links) { return links.cpu_read * links.cpu_read_beside_copies; }
inline double shared_copy_rate(const link_speeds& links) { return links.host_to_gpu * links.copies_beside_cpu_read; }

// The link's bytes per byte of a CPU-computed FFN: how much of a copy one hand-off can hide
// (the decode step's CPU reads its FFN while the copies run, both at their side-by-side rates;
// runtime/vulkan/layer_stream.cpp schedules with it).
inline double link_bytes_per_cpu_byte(const link_speeds& links) {
  return links.cpu_read > 0 ? shared_copy_rate(links) / shared_cpu_read(links) : 0;
}

// The layer-streaming ring places each tensor at this boundary (the backend at least this).
inline constexpr std::uint64_t ring_align = 256;

namespace detail {

// Whether tensor t runs on the GPU under layout l (the token embedding and the head follow the
// first and the last GPU block: the stages' rule).
inline bool on_gpu(const model_demand& d, const engine_layout& l, const tensor_demand& t) {
  if (l.n_gpu_layers == 0) return false;
  if (t.layer >= 0) {
    const auto il = std::uint32_t(t.layer);
    if (il >= l.n_gpu_layers) return false;
    if (t.kind == tensor_kind::dense_ffn && l.ffn_streamed(il)) return false;
    return t.kind != tensor_kind::routed_experts || (!l.experts_on_cpu(il) && !l.experts_cached(il));
  }
  return t.kind == tensor_kind::embedding || l.n_gpu_layers == d.n_layer;
}

// A tied head (token_embd as the output matrix) is loaded by the embedding's GPU stage too
// when the head runs on the CPU: its bytes then count on both sides.
inline std::uint64_t tied_copy_on_gpu(const model_demand& d, const engine_layout& l) {
  if (l.n_gpu_layers == 0 || l.n_gpu_layers == d.n_layer) return 0;
  for (const tensor_demand& t : d.tensors)
    if (t.kind == tensor_kind::head && t.name.starts_with("token_embd")) return t.bytes;
  return 0;
}

// GPU-cached routed experts: the bytes of the slots (expert_slots of the tensor's n_expert).
inline bool cached_on_gpu(const engine_layout& l, const tensor_demand& t) {
  return t.kind == tensor_kind::routed_experts && t.layer >= 0 && l.experts_cached(std::uint32_t(t.layer));
}
inline std::uint64_t slot_bytes(const engine_layout& l, const tensor_demand& t) {
  return t.n_expert ? t.bytes / t.n_expert * std::min(l.expert_slots, t.n_expert) : 0;
}
// A GPU-cached expert tensor in the cost model: computed on the GPU, its misses priced by the
// routing prior (tiers/routing_prior.hpp: a trained router's skew, the slots holding the
// most-routed experts; a long prompt still reads every expert the slots lack). The split form
// computes steps of `batch` tokens expected to route more distinct experts than slots on the CPU.
inline tensor_placement cached_placement(const engine_layout& l, const tensor_demand& t, std::uint32_t prefill_batch) {
  const std::uint32_t slots = std::min(l.expert_slots, t.n_expert);
  const double E = t.n_expert ? t.n_expert : 1;
  const double miss = t.n_expert && t.n_expert_used ? 1.0 - cache_hit_rate(t.n_expert, t.n_expert_used, slots) : 1.0;
  tensor_placement p{home_tier::ram, exec_unit::gpu, exec_unit::gpu, miss};
  p.cache_slots = slots;
  p.routed_on_gpu = l.expert_lookup;
  p.misses_on_cpu = l.expert_cpu_misses;
  p.staged_prefill = l.expert_cache_stage;
  if (!l.expert_lookup && E * t.share_touched(prefill_batch) > slots) p.prefill = exec_unit::cpu;
  return p;
}

// The expert cache's prefetch predictors on the GPU: each GPU-cached block after the first is
// predicted from the cached block before it with an f32 copy of its router (experts x hidden;
// runtime/vulkan/expert_cache.cpp), plus the scores of up to 8 tokens.
inline std::uint64_t prefetch_predictor_bytes(const model_demand& d, const engine_layout& l) {
  const auto cached = l.cached_layers();
  if (cached.size() < 2) return 0;
  std::uint64_t bytes = 0, widest = 0;
  for (const tensor_demand& t : d.tensors) {
    if (t.kind == tensor_kind::router && t.layer > std::int32_t(cached.front()) && l.experts_cached(std::uint32_t(t.layer)))
      bytes += std::uint64_t(t.elements) * 4;
    if (t.kind == tensor_kind::routed_experts) widest = std::max<std::uint64_t>(widest, t.n_expert);
  }
  return bytes ? bytes + 8 * widest * 4 : 0;
}

// The decode router's load-time products on the GPU (runtime/vulkan/router_product.cpp, on by
// default): for each MoE block whose experts are GPU-resident, R' (experts x hidden) and M = R' W_o
// (experts x the O projection's input) in f32, plus their parts for up to 8 tokens. The engine
// builds them only where the O projection is an integer matvec; counting them everywhere errs on
// the safe side.
inline std::uint64_t router_product_bytes(const model_demand& d, const engine_layout& l) {
  const double hidden = double(d.hidden_bytes) / 4;
  if (hidden <= 0) return 0;
  std::vector<double> router(d.n_layer, 0), o_proj(d.n_layer, 0);
  std::vector<char> experts_here(d.n_layer, 0);
  for (const tensor_demand& t : d.tensors) {
    if (t.layer < 0 || std::uint32_t(t.layer) >= d.n_layer) continue;
    const auto il = std::uint32_t(t.layer);
    if (t.kind == tensor_kind::router) router[il] = t.elements;
    if (t.kind == tensor_kind::attention && t.name.ends_with("attn_output.weight")) o_proj[il] = t.elements;
    // GPU-cached experts too: the lookup form (the Vulkan backend's default) runs their routers from the products.
    if (t.kind == tensor_kind::routed_experts && (on_gpu(d, l, t) || cached_on_gpu(l, t))) experts_here[il] = 1;
  }
  double floats = 0, widest = 0;
  for (std::uint32_t il = 0; il < d.n_layer; ++il) {
    if (!experts_here[il] || router[il] <= 0 || o_proj[il] <= 0) continue;
    const double experts = router[il] / hidden, k = o_proj[il] / hidden;
    floats += experts * (hidden + k);
    widest = std::max(widest, experts);
  }
  return floats > 0 ? std::uint64_t((floats + 8 * 2 * widest) * 4) : 0;
}

// A streamed dense FFN tensor (the ring's copies; runtime/vulkan/layer_stream.cpp).
inline bool streamed_on_gpu(const engine_layout& l, const tensor_demand& t) {
  return t.kind == tensor_kind::dense_ffn && t.layer >= 0 && l.ffn_streamed(std::uint32_t(t.layer));
}

// Bytes of a tensor in a ring slot (each placed at a ring_align boundary).
inline std::uint64_t ring_place(std::uint64_t bytes) { return (bytes + ring_align - 1) / ring_align * ring_align; }

// A routed-expert tensor streamed in prompt steps (the expert ring; runtime/vulkan/expert_stream.cpp).
inline bool expert_streamed_on_gpu(const engine_layout& l, const tensor_demand& t) {
  return t.kind == tensor_kind::routed_experts && t.layer >= 0 && l.experts_streamed(std::uint32_t(t.layer));
}
// Its ring item: 0 gate + up, 1 down (the backend's split of a block).
inline int expert_item(const tensor_demand& t) { return t.name.find("ffn_down_exps") != std::string::npos ? 1 : 0; }

}  // namespace detail

// The expert cache's prompt staging (engine_layout::expert_cache_stage): the largest cached
// block's gate + up and its down, as the host copies lay them out.
inline std::uint64_t cache_stage_bytes(const model_demand& d, const engine_layout& l) {
  if (!l.expert_cache_stage) return 0;
  std::vector<std::uint64_t> per[2] = {std::vector<std::uint64_t>(d.n_layer, 0), std::vector<std::uint64_t>(d.n_layer, 0)};
  for (const tensor_demand& t : d.tensors)
    if (detail::cached_on_gpu(l, t) && std::uint32_t(t.layer) < d.n_layer) per[detail::expert_item(t)][std::uint32_t(t.layer)] += t.bytes;
  const auto top = [](const std::vector<std::uint64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); };
  return top(per[0]) + top(per[1]);
}

// The ring of the streamed blocks: two slots, each the largest streamed block's dense FFN.
inline constexpr std::uint32_t ring_slots = 2;
inline std::uint64_t ring_slot_bytes(const model_demand& d, const engine_layout& l) {
  std::vector<std::uint64_t> per(d.n_layer, 0);
  for (const tensor_demand& t : d.tensors)
    if (detail::streamed_on_gpu(l, t)) per[std::uint32_t(t.layer)] += detail::ring_place(t.bytes);
  return per.empty() ? 0 : *std::max_element(per.begin(), per.end());
}
inline std::uint64_t ring_bytes(const model_demand& d, const engine_layout& l) {
  return ring_slots * ring_slot_bytes(d, l);
}
// The expert ring's two slots: the largest gate + up of a streamed block, and the largest down.
// With `all`, as if every MoE block's experts streamed (what --fit reserves before choosing).
inline std::pair<std::uint64_t, std::uint64_t> expert_ring_slots(const model_demand& d, const engine_layout& l,
                                                                 bool all = false) {
  std::vector<std::uint64_t> per[2] = {std::vector<std::uint64_t>(d.n_layer, 0), std::vector<std::uint64_t>(d.n_layer, 0)};
  for (const tensor_demand& t : d.tensors)
    if (all ? t.kind == tensor_kind::routed_experts && t.layer >= 0 && std::uint32_t(t.layer) < d.n_layer
            : detail::expert_streamed_on_gpu(l, t))
      per[detail::expert_item(t)][std::uint32_t(t.layer)] += detail::ring_place(t.bytes);
  const auto top = [](const std::vector<std::uint64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); };
  return {top(per[0]), top(per[1])};
}
inline std::uint64_t expert_ring_bytes(const model_demand& d, const engine_layout& l, bool all = false) {
  const auto [a, b] = expert_ring_slots(d, l, all);
  return a + b;
}
// Expert bytes a streaming (prompt) step copies into the expert ring: every expert of each block.
inline std::uint64_t expert_streamed_bytes(const model_demand& d, const engine_layout& l) {
  std::uint64_t b = 0;
  for (const tensor_demand& t : d.tensors) b += detail::expert_streamed_on_gpu(l, t) ? t.bytes : 0;
  return b;
}
// Weight bytes every step copies into the ring (a prompt step's tokens share them).
inline std::uint64_t streamed_bytes(const model_demand& d, const engine_layout& l) {
  std::uint64_t b = 0;
  for (const tensor_demand& t : d.tensors) b += detail::streamed_on_gpu(l, t) ? t.bytes : 0;
  return b;
}


namespace detail {

// One hand-off's seconds: CPU work of `cpu_s` (timed at cpu_read) beside `copied` bytes of copies.
// Both run at their side-by-side shares until one is done, then the other alone at its full rate.
inline double side_by_side_seconds(double cpu_s, double copied, const link_speeds& links) {
  const double s_cpu = links.cpu_read_beside_copies, copies_shared = shared_copy_rate(links);
  const double cpu_end = cpu_s / s_cpu, copy_end = copied / copies_shared;
  return cpu_end <= copy_end ? cpu_end + (copied - copies_shared * cpu_end) / links.host_to_gpu
                             : copy_end + (cpu_s - s_cpu * copy_end);
}

// A step that computes the streamed FFNs on the CPU but for the link's blocks: the time the
// link's copies add to the chain, scheduled as the Vulkan backend records them
// (tiers/link_schedule.hpp): a hand-off runs its CPU work beside its pieces' copies
// (side_by_side_seconds).
inline double link_copy_excess(const model_demand& d, const engine_layout& l, const std::vector<tensor_placement>& p,
                               const link_speeds& links, std::uint32_t batch, const std::vector<std::size_t>& order) {
  std::vector<std::vector<std::size_t>> ffn(d.n_layer);
  std::vector<std::uint64_t> bytes(d.n_layer, 0);
  for (const std::size_t i : order)
    if (const tensor_demand& t = d.tensors[i]; streamed_on_gpu(l, t)) {
      ffn[std::uint32_t(t.layer)].push_back(i);
      bytes[std::uint32_t(t.layer)] += ring_place(t.bytes);
    }
  const std::vector<char> linked = l.link_mask(d.n_layer);
  const std::vector<std::uint32_t> streamed = l.streamed_layers();
  std::vector<link_block> blocks;
  std::vector<double> cpu_s;  // per block: the CPU's seconds on it in the step
  for (const std::uint32_t il : streamed) {
    blocks.push_back({bytes[il], bool(linked[il]), double(bytes[il]) * link_bytes_per_cpu_byte(links)});
    cpu_s.push_back(linked[il] ? 0 : (evaluate(d, p, links, batch, ffn[il]).chain_s - double(d.n_layer) * links.block_s / batch) * batch);
  }
  const auto pieces = schedule_link_copies(blocks, ring_align);
  double excess = 0;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    double copied = 0;
    for (const link_piece& q : pieces[j]) copied += double(q.bytes);
    if (copied > 0) excess += side_by_side_seconds(cpu_s[j], copied, links) - cpu_s[j];
  }
  return excess / batch;
}

// evaluate() for an engine layout: the ring's copies are recorded in the GPU stage's submit, so
// they overlap its kernels but not the CPU stage's blocks (a split layout runs the GPU part, then
// the CPU part): there the upload time the GPU's reads do not cover adds to the chain. In a step
// whose streamed FFNs the CPU computes but for the link's blocks (stream_link_blocks), the copies
// sit between the hand-offs' halves: they run beside the CPU's FFNs and nothing else.
inline phase_cost engine_cost(const model_demand& d, const engine_layout& l, const std::vector<tensor_placement>& p,
                              const link_speeds& links, std::uint32_t batch, const std::vector<std::size_t>& order) {
  phase_cost c = evaluate(d, p, links, batch, order);
  if (c.upload_s <= 0) return c;
  if (l.stream_link_blocks && batch <= l.stream_cpu_tokens)
    c.seconds_per_token = std::max(c.chain_s + link_copy_excess(d, l, p, links, batch, order), c.nvme_s);
  else if (l.n_gpu_layers < d.n_layer)
    c.seconds_per_token = std::max(c.chain_s + std::max(0.0, c.upload_s - c.gpu_read_bytes / links.gpu_read), c.nvme_s);
  return c;
}

}  // namespace detail

// The layout as a placement plan (per tensor: GPU-resident or CPU-computed; CPU weights beyond
// the RAM budget, or those of l.disk when set, are disk-backed), with memory per tier and the
// predicted decode and prefill cost.
inline placement_plan layout_plan(const model_demand& d, const engine_layout& l, const link_speeds& links,
                                  std::uint64_t ram_budget, std::uint32_t prefill_batch) {
  placement_plan p;
  p.tensors.resize(d.tensors.size());
  p.forced.resize(d.tensors.size());
  p.order = execution_order(d);
  const bool any_cpu = l.n_gpu_layers < d.n_layer || !l.handoff_layers().empty();
  p.gpu_scratch = l.n_gpu_layers ? d.scratch_bytes : 0;
  p.ram_scratch = any_cpu ? d.scratch_bytes : 0;
  p.gpu_kv = std::uint64_t(l.n_gpu_layers) * d.kv_bytes_per_layer;
  p.ram_kv = std::uint64_t(d.n_layer - l.n_gpu_layers) * d.kv_bytes_per_layer;
  p.gpu_weights = detail::tied_copy_on_gpu(d, l);
  p.gpu_ring = ring_bytes(d, l) + expert_ring_bytes(d, l) + cache_stage_bytes(d, l);
  p.gpu_weights += detail::prefetch_predictor_bytes(d, l) + detail::router_product_bytes(d, l);
  const std::vector<char> linked = l.link_mask(d.n_layer);
  std::uint64_t ram_left = ram_budget > p.ram_kv + p.ram_scratch ? ram_budget - p.ram_kv - p.ram_scratch : 0;
  for (const std::size_t i : p.order) {
    const tensor_demand& t = d.tensors[i];
    if (detail::on_gpu(d, l, t)) {
      p.tensors[i] = {home_tier::gpu, exec_unit::gpu, exec_unit::gpu};
      p.gpu_weights += t.bytes;
    } else if (detail::cached_on_gpu(l, t)) {
      // gpu-cached: lives in RAM, computed on the GPU from its slots. Twice its bytes: the pinned
      // copy the uploads read and the CPU backend's copy for steps beyond the slots.
      p.tensors[i] = detail::cached_placement(l, t, prefill_batch);
      p.gpu_weights += detail::slot_bytes(l, t);
      p.ram_weights += 2 * t.bytes;
      ram_left -= std::min(ram_left, 2 * t.bytes);
    } else if (detail::streamed_on_gpu(l, t)) {
      // gpu-streamed: its pinned copy in RAM, every byte over the link once per step; with a
      // per-phase CPU share, the CPU's view of the weights too (as for the expert cache), except
      // in the blocks the link carries in that phase as well.
      const bool link = linked[std::uint32_t(t.layer)];
      const auto on_cpu = [&](std::uint32_t batch) { return batch <= l.stream_cpu_tokens && !link; };
      p.tensors[i] = {home_tier::ram, on_cpu(1) ? exec_unit::cpu : exec_unit::gpu,
                      on_cpu(prefill_batch) ? exec_unit::cpu : exec_unit::gpu};
      const std::uint64_t b = l.stream_cpu_tokens && !link ? 2 * t.bytes : t.bytes;
      p.ram_weights += b;
      ram_left -= std::min(ram_left, b);
    } else if (detail::expert_streamed_on_gpu(l, t)) {
      // CPU-computed in steps of <= expert_cpu_tokens tokens, streamed whole in longer ones; in
      // RAM twice (the pinned copy the ring reads and the CPU backend's).
      const exec_unit decode = l.expert_cpu_tokens >= 1 ? exec_unit::cpu : exec_unit::gpu;
      const exec_unit prefill = prefill_batch <= l.expert_cpu_tokens ? exec_unit::cpu : exec_unit::gpu;
      p.tensors[i] = {home_tier::ram, decode, prefill, 1.0, true};
      p.ram_weights += 2 * t.bytes;
      ram_left -= std::min(ram_left, 2 * t.bytes);
    } else if (l.disk.on_disk.size() == d.tensors.size() ? !l.disk.on_disk[i] : t.bytes <= ram_left) {
      // The engine's disk tier, where the layout has one (whole CPU blocks from the last down),
      // else the RAM budget filled in execution order.
      p.tensors[i] = {home_tier::ram, exec_unit::cpu, exec_unit::cpu};
      p.ram_weights += t.bytes;
      ram_left -= std::min(ram_left, t.bytes);
    } else {
      p.tensors[i] = {home_tier::disk, exec_unit::cpu, exec_unit::cpu};
      p.disk_weights += t.bytes;
    }
  }
  p.decode = detail::engine_cost(d, l, p.tensors, links, 1, p.order);
  p.prefill = detail::engine_cost(d, l, p.tensors, links, prefill_batch, p.order);
  return p;
}

// The per-phase choice for the streamed FFNs of l: the longest step (up to max_batch tokens)
// for which the cost model predicts computing them on the CPU faster than streaming them, the
// rest of the layout unchanged. The CPU reads the bytes once per step and multiplies every
// token, with two hand-offs per block; the link copies the bytes once per step, overlapping the
// GPU's work. The CPU's cost grows with the tokens and the link's does not, so short (decode)
// steps favour the CPU unless the link (with the overlap) beats it: then 0, every step streams.
namespace detail {

// The longest step (1..max_batch; 0 when even one token is faster streamed) for which computing
// the tensors `sel` picks on the CPU beats streaming them, in layout s where they always stream.
template <class Select>
std::uint32_t cpu_phase_tokens(const model_demand& d, const engine_layout& s, const link_speeds& links,
                               std::uint32_t max_batch, Select sel) {
  const placement_plan streamed = layout_plan(d, s, links, std::numeric_limits<std::uint64_t>::max() / 4, 1);
  std::vector<tensor_placement> on_cpu = streamed.tensors;
  for (std::size_t i = 0; i < d.tensors.size(); ++i)
    if (sel(d.tensors[i])) on_cpu[i] = {home_tier::ram, exec_unit::cpu, exec_unit::cpu};
  const auto cpu_faster = [&](std::uint32_t batch) {
    return detail::engine_cost(d, s, on_cpu, links, batch, streamed.order).seconds_per_token <
           detail::engine_cost(d, s, streamed.tensors, links, batch, streamed.order).seconds_per_token;
  };
  if (!cpu_faster(1)) return 0;
  if (cpu_faster(max_batch)) return max_batch;
  std::uint32_t lo = 1, hi = max_batch;  // the CPU wins at lo, the link at hi
  while (hi - lo > 1) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    (cpu_faster(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace detail

inline std::uint32_t stream_cpu_tokens(const model_demand& d, const engine_layout& l, const link_speeds& links,
                                       std::uint32_t max_batch) {
  if (streamed_bytes(d, l) == 0 || max_batch == 0) return 0;
  engine_layout s = l;
  s.stream_cpu_tokens = 0;
  return detail::cpu_phase_tokens(d, s, links, max_batch, [&](const tensor_demand& t) { return detail::streamed_on_gpu(l, t); });
}

// How many streamed FFNs the link carries in l's CPU-phase steps: the count (up to half of
// them) with the fastest predicted decode, the CPU's streamed FFNs and the link's copies
// overlapping (engine_cost). 0 where no step computes them on the CPU. The model does not know
// whether the copies' DRAM reads slow the CPU's: bench/RESULTS.md measures it.
inline std::uint32_t stream_link_blocks(const model_demand& d, const engine_layout& l, const link_speeds& links) {
  if (l.stream_cpu_tokens == 0 || streamed_bytes(d, l) == 0) return 0;
  engine_layout s = l;
  const auto m = std::uint32_t(l.streamed_layers().size());
  std::uint32_t pick = 0;
  double best = -1;
  for (std::uint32_t n = 0; n <= m / 2; ++n) {
    s.stream_link_blocks = n;
    const double t = layout_plan(d, s, links, std::numeric_limits<std::uint64_t>::max() / 4, 1).decode.seconds_per_token;
    if (best < 0 || t < best * (1 - 1e-9)) best = t, pick = n;
  }
  return pick;
}

// The same choice for streamed routed experts: the CPU reads the experts a step routes (k/n of
// them per token, 1 - (1 - k/n)^B of them for B tokens) and pays two hand-offs per block; the
// ring copies every expert once per step, overlapping the GPU's work (max, not sum). At least 1:
// decode always hands off (uploading every expert per token never beats reading k of them where
// they live; the expert cache is the GPU's decode path). max_batch: streaming never pays.
inline std::uint32_t expert_cpu_tokens(const model_demand& d, const engine_layout& l, const link_speeds& links,
                                       std::uint32_t max_batch) {
  if (expert_streamed_bytes(d, l) == 0 || max_batch == 0) return std::max<std::uint32_t>(max_batch, 1);
  engine_layout s = l;
  s.expert_cpu_tokens = 0;
  const std::uint32_t t =
      detail::cpu_phase_tokens(d, s, links, max_batch, [&](const tensor_demand& x) { return detail::expert_streamed_on_gpu(l, x); });
  return std::max<std::uint32_t>(t, 1);
}

// The expert streaming of a layout whose GPU blocks hand experts to the CPU: every such block
// streams them in prompt steps when the GPU budget holds the expert ring beside the rest of l
// and streaming is predicted faster for some step of up to max_batch tokens; else l unchanged.
// `why` (optional) says which of the two it was not.
inline engine_layout with_streamed_experts(const model_demand& d, engine_layout l, const link_speeds& links,
                                           std::uint64_t gpu_budget, std::uint32_t max_batch, std::string* why = nullptr);

// Which overrides a layout can follow: routed-expert tensors to the CPU (or disk: the CPU reads
// them from the mapped file) inside GPU blocks, anything on the GPU that the layout puts there.
// Returns the blocks whose experts a rule sends to the CPU; throws naming the first rule and
// tensor the engine cannot execute (the blocks themselves are -ngl's or the planner's).
// Disk rules on tensors of blocks the CPU runs (from first_cpu_block) are the disk tier's
// (tiers/disk_tier.hpp) and pass here.
inline std::vector<char> expert_overrides(const model_demand& d, const std::vector<override_rule>& rules,
                                          std::uint32_t first_cpu_block = std::numeric_limits<std::uint32_t>::max()) {
  std::vector<char> cpu(d.n_layer, 0);
  for (const tensor_demand& t : d.tensors) {
    for (const override_rule& r : rules) {
      if (!std::regex_search(t.name, r.regex)) continue;
      if (r.where == forced_tier::disk && t.layer >= 0 && std::uint32_t(t.layer) >= first_cpu_block) break;
      const bool experts = t.kind == tensor_kind::routed_experts && t.layer >= 0 && std::uint32_t(t.layer) < d.n_layer;
      if (experts && r.where != forced_tier::gpu) cpu[std::uint32_t(t.layer)] = 1;
      else if (r.where != forced_tier::gpu)
        throw error("override '" + r.pattern + "=" + std::string(forced_name(r.where)) + "' matches '" + t.name +
                    "': the engine moves only routed experts (ffn_*_exps) off the GPU by rule; whole blocks go "
                    "with -ngl, or let --fit place them");
      break;  // the first matching rule decides
    }
  }
  return cpu;
}

// -ngl N plus override rules: the blocks -ngl puts on the GPU, with the experts the rules send
// to the CPU. A rule forcing a tensor of a CPU block (or the head off a full GPU run) to the GPU
// is an error: the engine has no way to run it there.
// expert_slots > 0 (--expert-cache): the routed experts of every GPU block the rules leave on the
// GPU are GPU-cached with that many slots per block. stream_layers > 0 (--stream-layers): the
// dense FFN of the last that many GPU blocks with one is streamed through the ring.
inline engine_layout fixed_layout(const model_demand& d, std::int64_t n_gpu_layers, const std::vector<override_rule>& rules,
                                  std::uint32_t expert_slots = 0, std::uint32_t stream_layers = 0) {
  engine_layout l = layer_split_layout(d, n_gpu_layers);
  l.cpu_experts = expert_overrides(d, rules, l.n_gpu_layers);
  if (expert_slots) {
    l.expert_slots = expert_slots;
    l.cached_experts.assign(d.n_layer, 0);
    for (const tensor_demand& t : d.tensors)
      if (t.kind == tensor_kind::routed_experts && t.layer >= 0 && std::uint32_t(t.layer) < l.n_gpu_layers) {
        if (expert_slots > t.n_expert)
          throw error("--expert-cache " + std::to_string(expert_slots) + ": '" + t.name + "' has " +
                      std::to_string(t.n_expert) + " experts; the slots per layer must be 1.." + std::to_string(t.n_expert));
        l.cached_experts[std::uint32_t(t.layer)] = !l.cpu_experts[std::uint32_t(t.layer)];
      }
  }
  if (stream_layers) {
    std::vector<std::uint32_t> dense;  // GPU blocks with a dense FFN
    for (const tensor_demand& t : d.tensors)
      if (t.kind == tensor_kind::dense_ffn && t.layer >= 0 && std::uint32_t(t.layer) < l.n_gpu_layers &&
          (dense.empty() || dense.back() != std::uint32_t(t.layer)))
        dense.push_back(std::uint32_t(t.layer));
    std::sort(dense.begin(), dense.end());
    dense.erase(std::unique(dense.begin(), dense.end()), dense.end());
    if (stream_layers > dense.size())
      throw error("--stream-layers " + std::to_string(stream_layers) + ": -ngl " + std::to_string(l.n_gpu_layers) +
                  " puts " + std::to_string(dense.size()) + " blocks with a dense FFN (ffn_gate/ffn_up/ffn_down) on the "
                  "GPU; only those can stream");
    l.streamed_ffn.assign(d.n_layer, 0);
    for (std::size_t i = dense.size() - stream_layers; i < dense.size(); ++i) l.streamed_ffn[dense[i]] = 1;
  }
  for (const tensor_demand& t : d.tensors)
    if (const auto f = forced_for(t.name, rules); f == forced_tier::gpu && detail::streamed_on_gpu(l, t))
      throw error("override forces '" + t.name + "' to the GPU, but --stream-layers streams it; lower --stream-layers");
    else if (f == forced_tier::gpu && !detail::on_gpu(d, l, t))
      throw error("override forces '" + t.name + "' to the GPU, but -ngl " + std::to_string(l.n_gpu_layers) +
                  " runs it on the CPU; raise -ngl or use --fit");
  return l;
}

// GPU bytes of a layout: resident weights, the KV of GPU blocks and the activation scratch.
inline std::uint64_t layout_gpu_bytes(const model_demand& d, const engine_layout& l) {
  if (l.n_gpu_layers == 0) return 0;
  std::uint64_t b = d.scratch_bytes + std::uint64_t(l.n_gpu_layers) * d.kv_bytes_per_layer + detail::tied_copy_on_gpu(d, l) +
                    ring_bytes(d, l) + expert_ring_bytes(d, l) + cache_stage_bytes(d, l);
  for (const tensor_demand& t : d.tensors)
    if (detail::on_gpu(d, l, t)) b += t.bytes;
    else if (detail::cached_on_gpu(l, t)) b += detail::slot_bytes(l, t);
  return b;
}

inline engine_layout with_streamed_experts(const model_demand& d, engine_layout l, const link_speeds& links,
                                           std::uint64_t gpu_budget, std::uint32_t max_batch, std::string* why) {
  const std::vector<std::uint32_t> blocks = l.handoff_layers();
  if (blocks.empty()) return l;
  engine_layout s = l;
  s.streamed_experts.assign(d.n_layer, 0);
  for (const std::uint32_t il : blocks) s.streamed_experts[il] = 1;
  if (const std::uint64_t need = layout_gpu_bytes(d, s); need > gpu_budget) {
    const auto [a, b] = expert_ring_slots(d, s);
    if (why)
      *why = "not streamed: the GPU budget " + format_byte_size(gpu_budget) + " does not hold the expert ring (" +
             format_byte_size(a) + " + " + format_byte_size(b) + ") beside the layout's " +
             format_byte_size(need - a - b);
    return l;
  }
  s.expert_cpu_tokens = expert_cpu_tokens(d, s, links, max_batch);
  if (s.expert_cpu_tokens >= max_batch) {
    if (why) *why = "not streamed: the CPU is predicted faster for every step of up to " + std::to_string(max_batch) + " tokens";
    return l;
  }
  return s;
}

}  // namespace strata::tiers
