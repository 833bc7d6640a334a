// --fit: the engine layout (tiers/engine_layout.hpp) with the lowest predicted decode time that
// fits the GPU and RAM budgets, searched over the count of leading GPU blocks and, per count, the
// placements of routed experts (resident, CPU-computed, GPU-cached, streamed in prompt steps) and
// of streamed dense FFNs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"
#include "strata/tiers/engine_layout.hpp"

namespace strata::tiers {

namespace detail {

// Lowers l.expert_slots until everything the layout puts on the GPU (slots, router products,
// prefetch predictors, KV, scratch) fits the budget; false when that leaves fewer than `least`
// (the experts one token uses).
inline bool fit_slots(const model_demand& d, engine_layout& l, const plan_options& o, std::uint32_t least) {
  const std::uint64_t no_limit = std::numeric_limits<std::uint64_t>::max() / 4;
  std::uint64_t per_slot = 0;
  for (const tensor_demand& t : d.tensors)
    if (cached_on_gpu(l, t) && t.n_expert) per_slot += t.bytes / t.n_expert;
  while (l.expert_slots >= least && l.expert_slots > 0) {
    const std::uint64_t need = layout_plan(d, l, o.links, no_limit, o.prefill_batch).gpu_total();
    if (need <= o.gpu_budget) return true;
    const std::uint64_t over = per_slot ? (need - o.gpu_budget + per_slot - 1) / per_slot : l.expert_slots;
    l.expert_slots -= std::uint32_t(std::min<std::uint64_t>(l.expert_slots, std::max<std::uint64_t>(over, 1)));
  }
  return false;
}

}  // namespace detail

// Where a GPU expert cache's decode misses are computed: --expert-misses, else the form the cost
// model predicts faster (the kernels reading them over the link, or the CPU from DRAM with a
// hand-off a cached block). The CPU form is offered only where every cached block routes one
// expert a token: the engine sends a block-step to the CPU when all the experts it routes miss,
// which the model prices as every miss on the CPU - exact for top-1 (Llama 4), optimistic above.
inline void choose_expert_misses(const model_demand& d, engine_layout& l, const plan_options& o) {
  l.expert_cpu_misses = false;
  if (l.cached_layers().empty()) return;
  if (o.expert_cpu_misses) {
    l.expert_cpu_misses = *o.expert_cpu_misses;
    return;
  }
  for (const tensor_demand& t : d.tensors)
    if (t.kind == tensor_kind::routed_experts && detail::cached_on_gpu(l, t) && t.n_expert_used != 1) return;
  const double on_gpu = layout_plan(d, l, o.links, o.ram_budget, o.prefill_batch).decode.seconds_per_token;
  engine_layout c = l;
  c.expert_cpu_misses = true;
  const double on_cpu = layout_plan(d, c, o.links, o.ram_budget, o.prefill_batch).decode.seconds_per_token;
  l.expert_cpu_misses = on_cpu < on_gpu * (1 - 1e-9);
}

// Whether a GPU expert cache's prompt steps stage each block's experts on the GPU first
// (engine_layout::expert_cache_stage): for the lookup form with large experts (a slab of an expert
// tensor over large_expert_slab: Llama 4 Scout's 23.6 MB, where the kernels' own reads of a long
// prompt's misses ran at ~15 GB/s on the H100; the 30B's 0.9 MB slabs keep the kernels' reads,
// which measured 2,094 t/s at 12 GiB), where the budget holds the staging pair and the cost model
// predicts faster prefill with it.
inline void choose_expert_stage(const model_demand& d, engine_layout& l, const plan_options& o) {
  l.expert_cache_stage = false;
  if (l.cached_layers().empty() || !l.expert_lookup) return;
  std::uint64_t slab = 0;
  for (const tensor_demand& t : d.tensors)
    if (detail::cached_on_gpu(l, t) && t.n_expert) slab = std::max<std::uint64_t>(slab, t.bytes / t.n_expert);
  if (slab <= large_expert_slab) return;
  engine_layout c = l;
  c.expert_cache_stage = true;
  const placement_plan with = layout_plan(d, c, o.links, o.ram_budget, o.prefill_batch);
  if (with.gpu_total() > o.gpu_budget) return;
  const placement_plan without = layout_plan(d, l, o.links, o.ram_budget, o.prefill_batch);
  l.expert_cache_stage = with.prefill.seconds_per_token < without.prefill.seconds_per_token * (1 - 1e-9);
}

// --fit: for every count of leading GPU blocks whose non-expert tensors (and KV) fit the GPU
// budget, the remaining room holds routed experts from the last GPU block down (each block's
// experts whole: one hand-off per block either way; the CPU ones are then the first blocks, as
// with --n-cpu-moe), and the layout with the lowest predicted decode time wins (ties: more GPU
// blocks). Override rules are followed (experts to the CPU; a tensor forced to the GPU excludes
// layouts that cannot hold it). A GPU budget too small for one block gives the all-CPU layout.
// The KV of CPU blocks plus the activation scratch must fit --ram-budget.
// MoE models also get, per count of GPU blocks, two GPU-cached layouts: the experts that did not
// fit cached in the room left, and every block's experts cached (--expert-cache N's form) with the
// slots the room holds; their misses are priced by the routing prior (tiers/routing_prior.hpp),
// read over the link or computed on the CPU (choose_expert_misses).
// Dense models also get, per count of GPU blocks, the layout that streams the dense FFNs that do
// not fit (attention, norms and KV resident; the ring's two slots counted; FFNs resident from the
// first block on while they fit). The engine runs one layout for both phases, so the planner's
// per-phase rule decides between the best streamed and the best unstreamed layout: streaming
// wins when it predicts faster decode (the link beats the CPU's read of those bytes), or faster
// prefill (weights cross the link once per batch) at no more than 5% decode cost.
inline engine_layout plan_engine_layout(const model_demand& d, const plan_options& o) {
  const std::vector<char> forced_cpu = expert_overrides(d, o.overrides);
  std::vector<std::uint64_t> core(d.n_layer, 0), experts(d.n_layer, 0);
  std::vector<char> experts_forced_gpu(d.n_layer, 0);
  std::vector<std::uint32_t> n_expert(d.n_layer, 0), n_used(d.n_layer, 0);
  std::uint64_t embedding = 0, tail = 0;
  std::int64_t need_gpu_through = -1;  // a non-expert tensor of this block is forced to the GPU
  bool head_forced_gpu = false;
  // Dense FFN per block: bytes, bytes in a ring slot, forced to the GPU (then never streamed).
  std::vector<std::uint64_t> ffn(d.n_layer, 0), ffn_slot(d.n_layer, 0);
  std::vector<char> ffn_forced_gpu(d.n_layer, 0);
  bool any_experts = false;
  for (const tensor_demand& t : d.tensors) {
    const bool forced_gpu = forced_for(t.name, o.overrides) == forced_tier::gpu;
    if (t.layer >= 0 && std::uint32_t(t.layer) < d.n_layer) {
      const auto il = std::uint32_t(t.layer);
      if (t.kind == tensor_kind::dense_ffn) {
        ffn[il] += t.bytes;
        ffn_slot[il] += detail::ring_place(t.bytes);
        ffn_forced_gpu[il] |= char(forced_gpu);
      }
      if (t.kind == tensor_kind::routed_experts) {
        any_experts = true;
        experts[il] += t.bytes;
        n_expert[il] = t.n_expert;
        n_used[il] = t.n_expert_used;
        experts_forced_gpu[il] |= char(forced_gpu);
      } else {
        core[il] += t.bytes;
        if (forced_gpu) need_gpu_through = std::max<std::int64_t>(need_gpu_through, il);
      }
    } else if (t.kind == tensor_kind::embedding) {
      embedding += t.bytes;
      if (forced_gpu) need_gpu_through = std::max<std::int64_t>(need_gpu_through, 0);
    } else {
      tail += t.bytes;
      head_forced_gpu |= forced_gpu;
    }
  }
  const std::uint64_t tied = detail::tied_copy_on_gpu(d, layer_split_layout(d, 1));
  engine_layout best = layer_split_layout(d, 0);
  double best_t = -1;
  struct candidate {
    engine_layout layout;
    double decode, prefill;  // predicted seconds per token
  };
  std::vector<candidate> streamed;  // per count of GPU blocks, the layout that streams
  // Whether the engine can run a layout within the RAM budget: only whole CPU blocks can be
  // disk-backed (disk_tier.hpp), so what else it keeps in RAM (streamed FFNs' and CPU experts'
  // host copies, the head, KV, scratch) plus the disk tier's ring must fit. ram_why: the reason
  // the all-CPU layout cannot run, the error when no layout can.
  std::string ram_why;
  const auto runnable = [&](const engine_layout& x) {
    try {
      const placement_plan px = layout_plan(d, x, o.links, std::numeric_limits<std::uint64_t>::max() / 4, o.prefill_batch);
      (void)plan_disk_tier(d, x.n_gpu_layers, o.overrides, o.ram_budget, px.ram_total());
      return true;
    } catch (const error& e) {
      if (x.n_gpu_layers == 0) ram_why = e.what();
      return false;
    }
  };
  const std::uint64_t xring = any_experts ? expert_ring_bytes(d, layer_split_layout(d, 0), true) : 0;
  const auto n_used_max = [&](const std::vector<std::uint32_t>& blocks) {
    std::uint32_t k = 1;
    for (const std::uint32_t il : blocks) k = std::max(k, n_used[il]);
    return k;
  };
  for (std::uint32_t n = 0; n <= d.n_layer; ++n) {
    if (std::int64_t(n) <= need_gpu_through || (head_forced_gpu && n < d.n_layer)) continue;
    engine_layout l = layer_split_layout(d, n);
    l.cpu_experts = forced_cpu;
    bool fits = true;  // the blocks' tensors fit unstreamed
    if (n > 0) {
      std::uint64_t used = d.scratch_bytes + embedding + (n == d.n_layer ? tail : tied);
      for (std::uint32_t il = 0; il < n; ++il) used += core[il] + d.kv_bytes_per_layer;
      fits = used <= o.gpu_budget;
      for (std::uint32_t il = 0; il < n && fits; ++il)
        if (experts_forced_gpu[il]) {
          l.cpu_experts[il] = 0;
          used += experts[il];
          fits = used <= o.gpu_budget;
        }
      for (std::uint32_t il = n; il-- > 0 && fits;) {
        if (experts_forced_gpu[il] || forced_cpu[il] || experts[il] == 0) continue;
        if (used + experts[il] <= o.gpu_budget) used += experts[il];
        else l.cpu_experts[il] = 1;
      }
    }
    // The same blocks' experts GPU-cached instead (not those rules send to the CPU): as many
    // slots per block as the room left holds for all of them, at least the experts one token uses.
    std::optional<engine_layout> cached;
    if (n > 0 && fits && o.cache_experts) {
      std::uint64_t used = d.scratch_bytes + embedding + (n == d.n_layer ? tail : tied);
      for (std::uint32_t il = 0; il < n; ++il) used += core[il] + d.kv_bytes_per_layer + (l.cpu_experts[il] ? 0 : experts[il]);
      std::uint64_t per_slot = 0;
      std::uint32_t slots = ~0u;
      for (std::uint32_t il = 0; il < n; ++il)
        if (l.cpu_experts[il] && !forced_cpu[il] && experts[il] && n_expert[il] > 1) {
          per_slot += experts[il] / n_expert[il];
          slots = std::min(slots, n_expert[il] - 1);
        }
      if (per_slot && used < o.gpu_budget) {
        slots = std::uint32_t(std::min<std::uint64_t>(slots, (o.gpu_budget - used) / per_slot));
        bool enough = true;
        for (std::uint32_t il = 0; il < n; ++il)
          if (l.cpu_experts[il] && !forced_cpu[il] && experts[il] && n_expert[il] > 1) enough &= slots >= n_used[il];
        if (enough && slots > 0) {
          cached = l;
          cached->expert_slots = slots;
          cached->cached_experts.assign(d.n_layer, 0);
          for (std::uint32_t il = 0; il < n; ++il)
            if (l.cpu_experts[il] && !forced_cpu[il] && experts[il] && n_expert[il] > 1) {
              cached->cpu_experts[il] = 0;
              cached->cached_experts[il] = 1;
            }
          if (!detail::fit_slots(d, *cached, o, n_used_max(cached->cached_layers()))) cached.reset();
        }
      }
    }
    // Every GPU block's experts GPU-cached instead (what --expert-cache N asks), with as many slots
    // as the room beside the blocks' other tensors holds. Under a trained router's skew (the
    // routing prior) half the experts take ~90% of the pairs, so such a cache can beat resident
    // experts in some blocks and the CPU in the rest.
    std::optional<engine_layout> all_cached;
    if (n > 0 && fits && any_experts && o.cache_experts) {
      std::uint64_t used = d.scratch_bytes + embedding + (n == d.n_layer ? tail : tied), per_slot = 0;
      std::uint32_t slots = ~0u;
      engine_layout x = layer_split_layout(d, n);
      x.cpu_experts = forced_cpu;
      x.cached_experts.assign(d.n_layer, 0);
      for (std::uint32_t il = 0; il < n; ++il) {
        used += core[il] + d.kv_bytes_per_layer;
        if (experts_forced_gpu[il]) {
          x.cpu_experts[il] = 0;
          used += experts[il];
        } else if (!forced_cpu[il] && experts[il] && n_expert[il] > 1) {
          per_slot += experts[il] / n_expert[il];
          slots = std::min(slots, n_expert[il] - 1);
          x.cached_experts[il] = 1;
        }
      }
      if (per_slot && used < o.gpu_budget) {
        x.expert_slots = std::uint32_t(std::min<std::uint64_t>(slots, (o.gpu_budget - used) / per_slot));
        if (detail::fit_slots(d, x, o, n_used_max(x.cached_layers()))) all_cached = std::move(x);
      }
    }
    // The CPU experts streamed in prompt steps: the expert ring reserved first (so about one
    // block's experts more go to the CPU), and the CPU blocks spread evenly over the GPU blocks
    // (not the first ones): each block's copy then overlaps the resident blocks computing between
    // two streamed ones, which the cost model's max(chain, link) assumes.
    if (n > 0 && fits && xring && o.stream_experts) {
      std::uint64_t used = d.scratch_bytes + embedding + (n == d.n_layer ? tail : tied) + xring, movable = 0;
      std::vector<std::uint32_t> free_blocks;  // blocks whose experts the planner may move
      for (std::uint32_t il = 0; il < n; ++il) {
        used += core[il] + d.kv_bytes_per_layer;
        if (experts_forced_gpu[il]) used += experts[il];
        else if (!forced_cpu[il] && experts[il]) free_blocks.push_back(il), used += experts[il], movable += experts[il];
      }
      if (used - movable <= o.gpu_budget) {
        engine_layout x = layer_split_layout(d, n);
        const auto F = free_blocks.size();
        for (std::size_t m = 0; m <= F; ++m) {
          x.cpu_experts = forced_cpu;
          for (std::uint32_t il = 0; il < n; ++il) x.cpu_experts[il] &= char(!experts_forced_gpu[il]);
          std::uint64_t moved = 0;
          for (std::size_t i = 0; i < m; ++i) {
            const std::uint32_t il = free_blocks[(2 * i + 1) * F / (2 * m)];
            x.cpu_experts[il] = 1;
            moved += experts[il];
          }
          if (used - moved <= o.gpu_budget) break;
        }
        x = with_streamed_experts(d, std::move(x), o.links, o.gpu_budget, o.prefill_batch);
        if (!x.expert_streamed_layers().empty() && runnable(x)) {
          const placement_plan px = layout_plan(d, x, o.links, o.ram_budget, o.prefill_batch);
          streamed.push_back({std::move(x), px.decode.seconds_per_token, px.prefill.seconds_per_token});
        }
      }
    }
    if (n > 0 && !any_experts) {
      std::uint64_t base = d.scratch_bytes + embedding + (n == d.n_layer ? tail : tied);
      for (std::uint32_t il = 0; il < n; ++il) base += core[il] - ffn[il] + d.kv_bytes_per_layer + (ffn_forced_gpu[il] ? ffn[il] : 0);
      // ring_after[i]: the ring if blocks i.. (not forced) stream.
      std::vector<std::uint64_t> ring_after(n + 1, 0);
      for (std::uint32_t il = n; il-- > 0;)
        ring_after[il] = std::max(ring_after[il + 1], ffn_forced_gpu[il] ? 0 : ring_slots * ffn_slot[il]);
      engine_layout s = layer_split_layout(d, n);
      s.cpu_experts = forced_cpu;
      s.streamed_ffn.assign(d.n_layer, 0);
      std::uint64_t used = base;
      std::uint32_t first = 0;  // blocks before it keep their FFN resident
      while (first < n && (ffn_forced_gpu[first] || used + ffn[first] + ring_after[first + 1] <= o.gpu_budget))
        used += ffn_forced_gpu[first] ? 0 : ffn[first], ++first;
      bool any = false;
      for (std::uint32_t il = first; il < n; ++il)
        if (!ffn_forced_gpu[il] && ffn[il]) s.streamed_ffn[il] = 1, any = true;
      if (any && used + ring_after[first] <= o.gpu_budget && runnable(s)) {
        s.stream_cpu_tokens = stream_cpu_tokens(d, s, o.links, o.prefill_batch);
        s.stream_link_blocks = stream_link_blocks(d, s, o.links);
        const placement_plan ps = layout_plan(d, s, o.links, o.ram_budget, o.prefill_batch);
        streamed.push_back({std::move(s), ps.decode.seconds_per_token, ps.prefill.seconds_per_token});
      }
    }
    if (!fits || !runnable(l)) continue;  // only streaming fits this many blocks, or RAM does not hold the rest
    const double t = layout_plan(d, l, o.links, o.ram_budget, o.prefill_batch).decode.seconds_per_token;
    if (best_t < 0 || t <= best_t * (1 + 1e-9)) best = std::move(l), best_t = t;
    for (std::optional<engine_layout>* c : {&cached, &all_cached})
      if (*c && runnable(**c)) {
        choose_expert_misses(d, **c, o);
        choose_expert_stage(d, **c, o);
        const double tc = layout_plan(d, **c, o.links, o.ram_budget, o.prefill_batch).decode.seconds_per_token;
        if (tc < best_t * (1 - 1e-9)) best = std::move(**c), best_t = tc;
      }
  }
  // The per-phase rule between the layouts: the streamed layout with the fastest decode if it
  // beats the unstreamed one, else the one with the fastest prefill among those within 5% of it.
  const candidate* pick = nullptr;
  for (const candidate& c : streamed)
    if ((best_t < 0 || c.decode < best_t * (1 - 1e-9)) && (!pick || c.decode < pick->decode)) pick = &c;
  // The same 5% among dense streamed layouts that beat it: Llama 3.1 70B at 24 GiB, all 80 blocks
  // with 47 FFNs streamed predicts 2.6% slower decode than 79 blocks and the head on the CPU, and
  // 2.6x the prefill.
  if (const double fastest = pick ? pick->decode : 0; pick && !pick->layout.streamed_layers().empty())
    for (const candidate& c : streamed)
      if (!c.layout.streamed_layers().empty() && c.decode <= fastest * 1.05 &&
          (best_t < 0 || c.decode < best_t * (1 - 1e-9)) && c.prefill < pick->prefill)
        pick = &c;
  if (!pick && best_t >= 0) {
    double fastest = layout_plan(d, best, o.links, o.ram_budget, o.prefill_batch).prefill.seconds_per_token * (1 - 1e-9);
    for (const candidate& c : streamed)
      if (c.decode <= best_t * 1.05 && c.prefill < fastest) pick = &c, fastest = c.prefill;
  }
  if (pick) best = pick->layout, best_t = pick->decode;
  if (best_t < 0 && !ram_why.empty()) throw error(ram_why);
  if (best_t < 0)
    throw error("--gpu-budget " + format_byte_size(o.gpu_budget) + " cannot hold the tensors the overrides force to the GPU "
                "with their blocks and the activation scratch (" + format_byte_size(d.scratch_bytes) + ")");
  const placement_plan p = layout_plan(d, best, o.links, o.ram_budget, o.prefill_batch);
  if (p.ram_kv + p.ram_scratch > o.ram_budget)
    throw error("--ram-budget " + format_byte_size(o.ram_budget) + " cannot hold the KV cache of the blocks on the CPU (" +
                format_byte_size(p.ram_kv) + ") plus the activation scratch (" + format_byte_size(p.ram_scratch) +
                "); raise --ram-budget or --gpu-budget, or lower -c");
  return best;
}

}  // namespace strata::tiers
