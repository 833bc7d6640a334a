// Placement planner: which tensors live in GPU memory, which in RAM (computed on the CPU or
// uploaded to the GPU per use) and which stay on disk, for a GPU and a RAM budget, measured or
// assumed link speeds and overrides; minimizing the predicted decode time per token (tiers/cost.hpp)
// and then choosing per phase whether non-resident weights are computed where they live or
// uploaded (prefill uploads once per batch, so it favours the GPU; decode favours the CPU).
//
// Unit of decision: the tensors of one (layer, kind, override) group (a layer's attention with its
// KV, its dense FFN, its routed experts, ...), so an `-ot` rule can split any group. GPU memory
// goes to the groups saving the most decode time per byte (ties: tensor_kind's order, then
// earlier layers), RAM to the rest in the same order, the remainder stays on disk.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"
#include "strata/tiers/cost.hpp"
#include "strata/tiers/demand.hpp"
#include "strata/tiers/links.hpp"
#include "strata/tiers/overrides.hpp"

namespace strata::tiers {

struct plan_options {
  std::uint64_t gpu_budget = 0;          // bytes the engine may allocate on the GPU (0: no GPU)
  std::uint64_t ram_budget = 0;          // bytes of weights + CPU KV + CPU scratch in RAM
  link_speeds links = assumed_desktop_links();
  std::vector<override_rule> overrides{};  // -ot, then --cpu-moe / --n-cpu-moe rules
  std::uint32_t prefill_batch = 512;     // tokens per prefill step
  bool stream_experts = true;            // --fit may stream CPU experts in prompt steps (fit.hpp)
  bool cache_experts = true;             // --fit may GPU-cache routed experts (fit.hpp; --no-expert-cache)
  // Where a GPU expert cache's decode misses are computed (--expert-misses cpu|gpu): forced, or
  // unset: the cost model's choice (fit.hpp choose_expert_misses).
  std::optional<bool> expert_cpu_misses{};
};

struct placement_plan {
  std::vector<tensor_placement> tensors;  // parallel to model_demand::tensors
  std::vector<std::optional<forced_tier>> forced;  // the override each tensor got, if any
  std::vector<std::size_t> order;         // execution order
  // GPU memory: weights + KV + scratch + the double-buffered upload ring (<= gpu_budget).
  std::uint64_t gpu_weights = 0, gpu_kv = 0, gpu_scratch = 0, gpu_ring = 0;
  std::uint64_t ram_weights = 0, ram_kv = 0, ram_scratch = 0;
  std::uint64_t disk_weights = 0;
  phase_cost decode, prefill;

  std::uint64_t gpu_total() const noexcept { return gpu_weights + gpu_kv + gpu_scratch + gpu_ring; }
  std::uint64_t ram_total() const noexcept { return ram_weights + ram_kv + ram_scratch; }
};

namespace detail {

struct group {
  std::vector<std::size_t> members;
  tensor_kind kind;
  std::int32_t layer;
  std::optional<forced_tier> forced;
  std::uint64_t bytes = 0;  // weights
  std::uint64_t kv = 0;     // attention groups: the layer's KV lives where attention runs
  double decode_read = 0;   // bytes one decode token reads (weights + KV)
  double touched(const model_demand& d, std::uint32_t batch) const {  // weight bytes one step reads
    double b = 0;
    for (const std::size_t i : members) b += double(d.tensors[i].bytes) * d.tensors[i].share_touched(batch);
    return b;
  }
  double largest_touched(const model_demand& d, std::uint32_t batch) const {  // one tensor's step
    double b = 0;
    for (const std::size_t i : members) b = std::max(b, double(d.tensors[i].bytes) * d.tensors[i].share_touched(batch));
    return b;
  }
};

inline std::vector<group> make_groups(const model_demand& d, const std::vector<std::optional<forced_tier>>& forced) {
  std::map<std::tuple<std::int32_t, int, int>, std::size_t> index;
  std::vector<group> groups;
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    const tensor_demand& t = d.tensors[i];
    // Norms run with their layer's attention (a few KiB; not worth a hand-off of their own).
    const tensor_kind kind = t.kind == tensor_kind::norm && t.layer >= 0 ? tensor_kind::attention : t.kind;
    const auto key = std::make_tuple(t.layer, int(kind), forced[i] ? int(*forced[i]) : -1);
    auto [it, fresh] = index.try_emplace(key, groups.size());
    if (fresh) groups.push_back({{}, kind, t.layer, forced[i]});
    group& g = groups[it->second];
    g.members.push_back(i);
    g.bytes += t.bytes;
    g.decode_read += double(t.bytes) * t.share_touched(1);
  }
  // The KV goes with the layer's first attention group.
  std::vector<char> has_kv(d.n_layer, 0);
  for (group& g : groups)
    if (g.kind == tensor_kind::attention && g.layer >= 0 && std::uint32_t(g.layer) < d.n_layer && !has_kv[g.layer]) {
      has_kv[g.layer] = 1;
      g.kv = d.kv_bytes_per_layer;
      g.decode_read += double(g.kv);
    }
  return groups;
}

// Decode seconds saved per byte of GPU memory if the group is resident rather than computed on
// the CPU from RAM: its per-token read share (1 for dense, k/n for routed experts).
inline double gpu_value(const group& g) {
  const double resident = double(g.bytes + g.kv);
  return resident > 0 ? g.decode_read / resident : 0;
}

inline void sort_by_value(std::vector<group*>& gs) {
  std::stable_sort(gs.begin(), gs.end(), [](const group* a, const group* b) {
    const double va = gpu_value(*a), vb = gpu_value(*b);
    if (va > vb * (1 + 1e-9)) return true;
    if (vb > va * (1 + 1e-9)) return false;
    if (a->kind != b->kind) return a->kind < b->kind;
    return a->layer < b->layer;
  });
}

// The groups (not forced) to keep resident in `capacity` bytes: a 0/1 knapsack maximizing the
// decode bytes read from GPU memory instead of RAM (time saved is proportional to them), by
// dynamic programming over sizes rounded up to capacity/4096 (so the choice always fits). A
// greedy fill by value per byte wastes room when big equal-value groups (the output head) do
// not fit after the small ones. Ties go to tensor_kind's order via a tiny value bonus.
inline std::vector<group*> choose_resident(const std::vector<group*>& by_value, std::uint64_t capacity) {
  constexpr std::uint64_t slots = 4096;
  const std::uint64_t unit = std::max<std::uint64_t>(1, (capacity + slots - 1) / slots);
  const std::size_t cap = std::size_t(capacity / unit);
  std::vector<group*> items;
  for (group* g : by_value)
    if (!g->forced && g->bytes + g->kv <= capacity && g->decode_read > 0) items.push_back(g);
  std::vector<double> best(cap + 1, 0.0);
  std::vector<std::vector<char>> take(items.size(), std::vector<char>(cap + 1, 0));
  for (std::size_t k = 0; k < items.size(); ++k) {
    const group& g = *items[k];
    const std::size_t w = std::size_t((g.bytes + g.kv + unit - 1) / unit);
    const double v = g.decode_read * (1 + 1e-4 * (8 - int(g.kind)));
    for (std::size_t c = cap; c >= w && c != std::size_t(-1); --c)
      if (best[c - w] + v > best[c]) {
        best[c] = best[c - w] + v;
        take[k][c] = 1;
      }
  }
  std::vector<group*> chosen;
  std::size_t c = cap;
  for (std::size_t k = items.size(); k-- > 0;)
    if (take[k][c]) {
      chosen.push_back(items[k]);
      c -= std::size_t((items[k]->bytes + items[k]->kv + unit - 1) / unit);
    }
  return chosen;
}

// Local search on GPU residency with the full decode cost (hand-offs included): move a
// non-resident group in, alone or in exchange for a resident one, while it pays and fits.
// Non-resident groups count as computed on the CPU, as the final placement decides later.
inline void improve_by_swaps(const model_demand& d, const link_speeds& l, const std::vector<std::size_t>& order,
                             const std::vector<group*>& candidates, std::vector<tensor_placement>& p,
                             std::uint64_t& gpu_left, placement_plan& cand) {
  const auto resident = [&](const group* g) { return p[g->members.front()].home == home_tier::gpu; };
  const auto set = [&](group* g, bool gpu) {
    for (const std::size_t i : g->members)
      p[i] = gpu ? tensor_placement{home_tier::gpu, exec_unit::gpu, exec_unit::gpu} : tensor_placement{};
    const std::uint64_t b = g->bytes + g->kv;
    gpu_left = gpu ? gpu_left - b : gpu_left + b;
    cand.gpu_weights = gpu ? cand.gpu_weights + g->bytes : cand.gpu_weights - g->bytes;
    cand.gpu_kv = gpu ? cand.gpu_kv + g->kv : cand.gpu_kv - g->kv;
  };
  if (candidates.size() > 600) return;  // O(n^2) evaluations: only for models of usual size
  double best = evaluate(d, p, l, 1, order).seconds_per_token;
  for (int pass = 0; pass < 3; ++pass) {
    bool improved = false;
    for (group* in : candidates) {
      if (resident(in)) continue;
      const std::uint64_t need = in->bytes + in->kv;
      group* best_out = nullptr;
      bool best_alone = false;
      double best_t = best;
      if (need <= gpu_left) {
        set(in, true);
        const double t = evaluate(d, p, l, 1, order).seconds_per_token;
        if (t < best_t * (1 - 1e-9)) best_t = t, best_alone = true;
        set(in, false);
      }
      for (group* out : candidates) {
        if (!resident(out) || need > gpu_left + out->bytes + out->kv) continue;
        set(out, false);
        set(in, true);
        const double t = evaluate(d, p, l, 1, order).seconds_per_token;
        if (t < best_t * (1 - 1e-9)) best_t = t, best_out = out, best_alone = false;
        set(in, false);
        set(out, true);
      }
      if (best_out) set(best_out, false);
      if (best_out || best_alone) {
        set(in, true);
        best = best_t;
        improved = true;
      }
    }
    if (!improved) break;
  }
}

// Per phase, each non-resident group either runs on the CPU or is uploaded; flip single groups
// while the phase's predicted cost falls (the cost is not separable: uploads share one link).
inline void choose_exec(const model_demand& d, std::vector<tensor_placement>& p, const std::vector<group>& groups,
                        const link_speeds& l, std::uint32_t batch, const std::vector<std::size_t>& order,
                        std::uint64_t max_upload_bytes) {
  const bool decode = batch == 1;
  const auto set = [&](const group& g, exec_unit e) {
    for (const std::size_t i : g.members) (decode ? p[i].decode : p[i].prefill) = e;
  };
  std::vector<const group*> free;
  for (const group& g : groups) {
    const tensor_placement& first = p[g.members.front()];
    if (first.home == home_tier::gpu) continue;
    set(g, exec_unit::cpu);
    // KV of a non-resident attention stays in RAM, so its attention runs on the CPU; a forced
    // `cpu` group decodes on the CPU.
    if (g.kv > 0 || g.kind == tensor_kind::attention) continue;
    if (decode && g.forced == forced_tier::cpu) continue;
    if (g.largest_touched(d, batch) <= double(max_upload_bytes)) free.push_back(&g);
  }
  double best = evaluate(d, p, l, batch, order).seconds_per_token;
  for (int pass = 0; pass < 4; ++pass) {
    bool improved = false;
    for (const group* g : free) {
      const exec_unit cur = decode ? p[g->members.front()].decode : p[g->members.front()].prefill;
      set(*g, cur == exec_unit::cpu ? exec_unit::gpu : exec_unit::cpu);
      const double t = evaluate(d, p, l, batch, order).seconds_per_token;
      if (t < best * (1 - 1e-12)) {
        best = t;
        improved = true;
      } else {
        set(*g, cur);
      }
    }
    if (!improved) break;
  }
}

// Upload ring the streaming groups of `p` need: two of the largest step's worth of bytes.
inline std::uint64_t ring_needed(const model_demand& d, const std::vector<tensor_placement>& p,
                                 const std::vector<group>& groups, std::uint32_t prefill_batch) {
  double largest = 0;  // uploads go tensor by tensor: the ring holds two tensors' steps
  for (const group& g : groups)
    for (const std::size_t i : g.members) {
      const tensor_placement& q = p[i];
      const tensor_demand& t = d.tensors[i];
      if (q.home == home_tier::gpu) continue;
      if (q.decode == exec_unit::gpu) largest = std::max(largest, double(t.bytes) * t.share_touched(1));
      if (q.prefill == exec_unit::gpu) largest = std::max(largest, double(t.bytes) * t.share_touched(prefill_batch));
    }
  return 2 * std::uint64_t(std::ceil(largest));
}

// One placement for a given upload ring (0: nothing streams): GPU, RAM, disk, then execution.
inline placement_plan place(const model_demand& d, const plan_options& o, std::vector<group>& groups,
                            const std::vector<group*>& by_value, std::uint64_t ring, bool gpu_usable,
                            const std::vector<std::size_t>& order) {
  std::vector<tensor_placement> p(d.tensors.size());
  placement_plan cand;
  std::uint64_t gpu_left = gpu_usable ? o.gpu_budget - d.scratch_bytes - ring : 0;
  cand.gpu_scratch = gpu_usable ? d.scratch_bytes : 0;
  const auto place_gpu = [&](group& g) {
    for (const std::size_t i : g.members) p[i] = {home_tier::gpu, exec_unit::gpu, exec_unit::gpu};
    gpu_left -= g.bytes + g.kv;
    cand.gpu_weights += g.bytes;
    cand.gpu_kv += g.kv;
  };
  for (group* g : by_value)
    if (g->forced == forced_tier::gpu) place_gpu(*g);
  if (gpu_usable) {
    const auto resident = [&](const group* g) { return p[g->members.front()].home == home_tier::gpu; };
    // The design's rule: norms, attention with its KV, routers and shared experts first.
    for (group* g : by_value)
      if (!g->forced && g->kind <= tensor_kind::shared_expert && g->bytes + g->kv <= gpu_left) place_gpu(*g);
    std::vector<group*> rest;
    for (group* g : by_value)
      if (!g->forced && !resident(g)) rest.push_back(g);
    for (group* g : choose_resident(rest, gpu_left)) place_gpu(*g);
    for (group* g : rest)  // what the knapsack's rounding left room for
      if (!resident(g) && g->bytes + g->kv <= gpu_left) place_gpu(*g);
    // The knapsack ignores hand-offs: swap pairs while the full decode cost falls.
    improve_by_swaps(d, o.links, order, rest, p, gpu_left, cand);
  }

  // RAM: the CPU's scratch (one batch of activations), then the most-read groups first.
  std::uint64_t ram_left = o.ram_budget;
  cand.ram_scratch = std::min(ram_left, d.scratch_bytes);
  ram_left -= cand.ram_scratch;
  for (group* g : by_value) {
    if (p[g->members.front()].home == home_tier::gpu) continue;
    // KV has nowhere else to go: attention that does not fit is an error below.
    if (g->forced != forced_tier::disk && (g->bytes + g->kv <= ram_left || g->kv > 0)) {
      for (const std::size_t i : g->members) p[i].home = home_tier::ram;
      ram_left -= std::min(ram_left, g->bytes + g->kv);
      cand.ram_weights += g->bytes;
      cand.ram_kv += g->kv;
    } else {
      for (const std::size_t i : g->members) p[i].home = home_tier::disk;
      cand.disk_weights += g->bytes;
      ram_left -= std::min(ram_left, g->kv);  // an attention group forced to disk keeps its KV in RAM
      cand.ram_kv += g->kv;
    }
  }
  if (cand.ram_total() > o.ram_budget)
    throw error("--ram-budget " + format_byte_size(o.ram_budget) + " cannot hold the KV cache of the layers whose " +
                "attention runs on the CPU (" + format_byte_size(cand.ram_kv) + ") plus the activation scratch (" +
                format_byte_size(cand.ram_scratch) + "); raise --ram-budget or --gpu-budget, or lower -c");

  choose_exec(d, p, groups, o.links, 1, order, ring / 2);
  choose_exec(d, p, groups, o.links, o.prefill_batch, order, ring / 2);
  cand.gpu_ring = ring_needed(d, p, groups, o.prefill_batch);
  cand.tensors = std::move(p);
  cand.order = order;
  cand.decode = evaluate(d, cand.tensors, o.links, 1, order);
  cand.prefill = evaluate(d, cand.tensors, o.links, o.prefill_batch, order);
  return cand;
}

}  // namespace detail

// Streaming needs an upload ring, which takes GPU memory from resident weights, so two
// placements are made: A with no ring (nothing streams), and B with the ring the streaming that
// pays in A's placement would need. B wins if it speeds up prefill and costs decode at most 5%:
// decode speed is what the budget is for, prefill is paid once per prompt.
inline placement_plan plan_placement(const model_demand& d, const plan_options& o) {
  const std::vector<std::size_t> order = execution_order(d);
  std::vector<std::optional<forced_tier>> forced(d.tensors.size());
  for (std::size_t i = 0; i < d.tensors.size(); ++i) forced[i] = forced_for(d.tensors[i].name, o.overrides);
  std::vector<detail::group> groups = detail::make_groups(d, forced);

  // Groups forced to the GPU and the GPU scratch must fit, or the budget is an error.
  std::uint64_t forced_gpu = 0;
  for (const auto& g : groups)
    if (g.forced == forced_tier::gpu) forced_gpu += g.bytes + g.kv;
  const bool gpu_usable = o.gpu_budget > d.scratch_bytes;
  if (forced_gpu > 0 && (!gpu_usable || forced_gpu + d.scratch_bytes > o.gpu_budget))
    throw error("--gpu-budget " + format_byte_size(o.gpu_budget) + " cannot hold the tensors forced to the GPU by -ot (" +
                format_byte_size(forced_gpu) + ") plus the activation scratch (" + format_byte_size(d.scratch_bytes) + ")");

  std::vector<detail::group*> by_value;
  for (auto& g : groups) by_value.push_back(&g);
  detail::sort_by_value(by_value);

  placement_plan a = detail::place(d, o, groups, by_value, 0, gpu_usable, order);
  a.forced = forced;
  if (!gpu_usable) return a;
  std::vector<tensor_placement> probe = a.tensors;
  detail::choose_exec(d, probe, groups, o.links, 1, order, UINT64_MAX);
  detail::choose_exec(d, probe, groups, o.links, o.prefill_batch, order, UINT64_MAX);
  const std::uint64_t ring = detail::ring_needed(d, probe, groups, o.prefill_batch);
  if (ring == 0 || ring > o.gpu_budget - d.scratch_bytes - forced_gpu) return a;
  placement_plan b = detail::place(d, o, groups, by_value, ring, gpu_usable, order);
  b.forced = std::move(forced);
  const bool b_wins = b.decode.seconds_per_token <= a.decode.seconds_per_token * 1.05 &&
                      b.prefill.seconds_per_token < a.prefill.seconds_per_token;
  return b_wins ? b : a;
}

}  // namespace strata::tiers
