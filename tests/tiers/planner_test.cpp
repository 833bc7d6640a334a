// Placement planner on synthetic models (dense and MoE, tiny budgets, overrides), against a
// brute-force search on small models, and on a fixture GGUF.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>

#include "strata/arch/all.hpp"
#include "strata/tiers/engine_layout.hpp"
#include "strata/tiers/fit.hpp"
#include "strata/tiers/planner.hpp"
#include "strata/tiers/report.hpp"
#include "synthetic_demand.hpp"

using namespace strata::tiers;

namespace {

std::uint64_t total_bytes(const model_demand& d) {
  std::uint64_t s = 0;
  for (const auto& t : d.tensors) s += t.bytes;
  return s;
}

const tensor_placement& placement_of(const model_demand& d, const placement_plan& p, const std::string& name) {
  for (std::size_t i = 0; i < d.tensors.size(); ++i)
    if (d.tensors[i].name == name) return p.tensors[i];
  FAIL("no tensor " << name);
  return p.tensors.front();
}

void check_budgets(const placement_plan& p, const plan_options& o) {
  CHECK(p.gpu_total() <= o.gpu_budget);
  CHECK(p.ram_total() <= o.ram_budget);
}

}  // namespace

TEST_CASE("planner: a budget that holds everything puts everything on the GPU") {
  const model_demand d = synthetic(8, 32, 96);
  plan_options o{.gpu_budget = 64ull << 30, .ram_budget = 64ull << 30};
  const placement_plan p = plan_placement(d, o);
  for (const auto& t : p.tensors) CHECK(label(t) == std::string("gpu-resident"));
  CHECK(p.decode.cpu_read_bytes == 0);
  CHECK(p.decode.host_to_gpu_bytes == 0);
  CHECK(p.decode.handoffs == 0);
  CHECK(p.gpu_kv == 8 * MiB);
  check_budgets(p, o);
}

TEST_CASE("planner: no GPU, or a GPU budget below one layer, still runs everything on the CPU") {
  const model_demand d = synthetic(4, 32, 96);
  for (const std::uint64_t gpu : {std::uint64_t(0), 2 * MiB, 10 * MiB}) {
    CAPTURE(gpu);
    plan_options o{.gpu_budget = gpu, .ram_budget = 64ull << 30};
    const placement_plan p = plan_placement(d, o);
    std::uint64_t resident = 0;
    for (std::size_t i = 0; i < d.tensors.size(); ++i)
      if (p.tensors[i].home == home_tier::gpu) resident += d.tensors[i].bytes;
    CHECK(resident == p.gpu_weights);
    CHECK(p.decode.tokens_per_second() > 0);
    CHECK(p.prefill.tokens_per_second() > 0);
    check_budgets(p, o);
    if (gpu == 0) {
      CHECK(p.gpu_total() == 0);
      CHECK(p.decode.gpu_read_bytes == 0);
    }
  }
}

TEST_CASE("planner: dense model, partial budget: attention of every layer before any FFN") {
  const model_demand d = synthetic(8, 32, 96);  // 8 x (32 + 96) MiB
  // Room for the scratch, every attention with its KV, and a few FFNs.
  plan_options o{.gpu_budget = 4 * MiB + 8 * 33 * MiB + 300 * MiB, .ram_budget = 64ull << 30};
  const placement_plan p = plan_placement(d, o);
  int ffn_resident = 0;
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    const auto& t = d.tensors[i];
    if (t.kind == tensor_kind::attention) CHECK(p.tensors[i].home == home_tier::gpu);
    if (t.kind == tensor_kind::dense_ffn && p.tensors[i].home == home_tier::gpu) ++ffn_resident;
  }
  CHECK(ffn_resident > 0);
  CHECK(ffn_resident < 24);
  // Decode computes cold dense weights on the CPU (60 GB/s DRAM beats a 24 GB/s upload)...
  CHECK(label(placement_of(d, p, "blk.7.ffn_up.weight")) == std::string("cpu-computed"));
  // ...prefill uploads them once per batch of 512.
  CHECK(placement_of(d, p, "blk.7.ffn_up.weight").prefill == exec_unit::gpu);
  CHECK(p.gpu_ring > 0);
  check_budgets(p, o);
}

TEST_CASE("planner: MoE keeps attention and routers resident, experts spill first, MoE decodes faster than dense") {
  const model_demand moe = synthetic(8, 32, 960, 128, 8);
  const model_demand dense = synthetic(8, 32, 960);
  CHECK(total_bytes(moe) > total_bytes(dense));
  // Room for attention, routers and head, and for an upload ring, but for no layer's experts.
  plan_options o{.gpu_budget = 1ull << 30, .ram_budget = 64ull << 30};
  const placement_plan pm = plan_placement(moe, o);
  const placement_plan pd = plan_placement(dense, o);
  for (std::size_t i = 0; i < moe.tensors.size(); ++i) {
    const auto& t = moe.tensors[i];
    if (t.kind == tensor_kind::attention || t.kind == tensor_kind::router || t.kind == tensor_kind::head)
      CHECK(pm.tensors[i].home == home_tier::gpu);
  }
  // k/n = 1/16 of the experts per token: decode reads far fewer bytes than the dense model.
  CHECK(pm.decode.tokens_per_second() > 4 * pd.decode.tokens_per_second());
  // A prefill batch of 512 touches every expert: uploading them once per batch beats the CPU
  // until the upload link is as busy as the compute chain, so most layers upload, not all.
  int uploaded = 0;
  for (std::size_t i = 0; i < moe.tensors.size(); ++i)
    if (moe.tensors[i].kind == tensor_kind::routed_experts) {
      CHECK(pm.tensors[i].decode == exec_unit::cpu);
      uploaded += pm.tensors[i].prefill == exec_unit::gpu;
    }
  CHECK(uploaded >= 12);
  CHECK(pm.gpu_ring > 0);
  CHECK(pm.prefill.upload_s == doctest::Approx(pm.prefill.chain_s).epsilon(0.35));
  check_budgets(pm, o);
  check_budgets(pd, o);
}

TEST_CASE("planner: weights beyond the RAM budget are disk-backed and read from NVMe") {
  const model_demand d = synthetic(8, 32, 96);
  plan_options o{.gpu_budget = 0, .ram_budget = 600 * MiB};
  const placement_plan p = plan_placement(d, o);
  CHECK(p.disk_weights > 0);
  CHECK(p.decode.nvme_bytes > 0);
  CHECK(p.ram_total() <= o.ram_budget);
  // The embedding (one row per token) is the least valuable in RAM.
  CHECK(label(placement_of(d, p, "token_embd.weight")) == std::string("disk-backed"));
  CHECK(p.decode.seconds_per_token >= p.decode.nvme_bytes / o.links.nvme_qd32);
}

TEST_CASE("planner: overrides -ot, --cpu-moe, --n-cpu-moe") {
  const model_demand d = synthetic(4, 32, 960, 128, 8);
  SUBCASE("--cpu-moe keeps every routed expert computed on the CPU despite room") {
    plan_options o{.gpu_budget = 64ull << 30, .ram_budget = 64ull << 30};
    add_cpu_moe_rules(true, 0, o.overrides);
    const placement_plan p = plan_placement(d, o);
    for (std::size_t i = 0; i < d.tensors.size(); ++i) {
      const bool exps = d.tensors[i].kind == tensor_kind::routed_experts;
      CHECK(label(p.tensors[i]) == std::string(exps ? "cpu-computed" : "gpu-resident"));
    }
    CHECK(p.decode.handoffs == 8);  // to the CPU and back in each of 4 layers
  }
  SUBCASE("--n-cpu-moe 2: only the first two layers' experts") {
    plan_options o{.gpu_budget = 64ull << 30, .ram_budget = 64ull << 30};
    add_cpu_moe_rules(false, 2, o.overrides);
    const placement_plan p = plan_placement(d, o);
    CHECK(label(placement_of(d, p, "blk.1.ffn_up_exps.weight")) == std::string("cpu-computed"));
    CHECK(label(placement_of(d, p, "blk.2.ffn_up_exps.weight")) == std::string("gpu-resident"));
    CHECK(label(placement_of(d, p, "blk.1.attn_q.weight")) == std::string("gpu-resident"));
  }
  SUBCASE("-ot: the first matching rule wins; disk; gpu beyond the budget is an error") {
    plan_options o{.gpu_budget = 64ull << 30, .ram_budget = 64ull << 30};
    parse_override_rules(R"(blk\.0\.ffn_up=disk,ffn_up=cpu)", o.overrides);
    const placement_plan p = plan_placement(d, o);
    CHECK(label(placement_of(d, p, "blk.0.ffn_up_exps.weight")) == std::string("disk-backed"));
    CHECK(label(placement_of(d, p, "blk.1.ffn_up_exps.weight")) == std::string("cpu-computed"));
    CHECK(label(placement_of(d, p, "blk.1.ffn_gate_exps.weight")) == std::string("gpu-resident"));
    CHECK(plan_text(d, p, o).find("[-ot disk]") != std::string::npos);

    plan_options small{.gpu_budget = 1ull << 30, .ram_budget = 64ull << 30};
    parse_override_rules("exps=gpu", small.overrides);
    CHECK_THROWS_WITH_AS(plan_placement(d, small), doctest::Contains("--gpu-budget 1.00 GiB"), strata::error);
  }
  SUBCASE("bad rules are refused naming the rule") {
    std::vector<override_rule> r;
    CHECK_THROWS_WITH_AS(parse_override_rules("exps=vram", r), doctest::Contains("'exps=vram'"), strata::error);
    CHECK_THROWS_WITH_AS(parse_override_rules("exps", r), doctest::Contains("REGEX=gpu|cpu|disk"), strata::error);
    CHECK_THROWS_WITH_AS(parse_override_rules("ex(ps=cpu", r), doctest::Contains("bad regex 'ex(ps'"), strata::error);
    parse_override_rules("A=GPU,b=Cpu", r);
    CHECK(r.size() == 2);
  }
}

TEST_CASE("planner: never over a budget, and within 2% of the best GPU subset (under the design's rule) found by brute force") {
  std::mt19937 rng(7);
  const model_demand d = synthetic(3, 24, 72, 16, 2);  // 3 layers: 3 groups each + embedding + head
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    plan_options o{.gpu_budget = std::uniform_int_distribution<std::uint64_t>(0, 600)(rng) * MiB,
                   .ram_budget = std::uniform_int_distribution<std::uint64_t>(300, 800)(rng) * MiB};
    CAPTURE(o.gpu_budget);
    CAPTURE(o.ram_budget);
    placement_plan p;
    try {
      p = plan_placement(d, o);
    } catch (const strata::error& e) {
      // Only a RAM budget too small for the CPU's KV and scratch may be refused.
      CHECK(std::string(e.what()).find("--ram-budget") != std::string::npos);
      continue;
    }
    check_budgets(p, o);
    // Brute force: every subset of groups resident (each group = one layer's attention, its
    // router, its experts, or a non-layer tensor), the rest computed on the CPU from RAM.
    std::vector<std::vector<std::size_t>> groups;
    std::vector<std::uint64_t> resident;
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < d.tensors.size(); ++i) {
      const auto& t = d.tensors[i];
      const std::string key = std::to_string(t.layer) + (t.kind == tensor_kind::norm && t.layer >= 0
                                                             ? std::string("attention")
                                                             : std::string(kind_name(t.kind)));
      auto it = std::find(keys.begin(), keys.end(), key);
      if (it == keys.end()) {
        keys.push_back(key);
        groups.emplace_back();
        resident.push_back(t.kind == tensor_kind::attention || (t.kind == tensor_kind::norm && t.layer >= 0)
                               ? d.kv_bytes_per_layer
                               : 0);
        it = keys.end() - 1;
      }
      const std::size_t g = std::size_t(it - keys.begin());
      groups[g].push_back(i);
      resident[g] += t.bytes;
    }
    // The design's rule keeps norms, attention and routers resident first: when they all fit,
    // search only the subsets holding them.
    std::uint32_t rule = 0;
    std::uint64_t rule_bytes = d.scratch_bytes;
    for (std::size_t g = 0; g < groups.size(); ++g)
      if (d.tensors[groups[g].front()].kind <= tensor_kind::shared_expert)
        rule |= 1u << g, rule_bytes += resident[g];
    if (rule_bytes > o.gpu_budget) continue;
    double best = 1e30;
    for (std::uint32_t mask = 0; mask < (1u << groups.size()); ++mask) {
      if ((mask & rule) != rule) continue;
      std::uint64_t used = d.scratch_bytes;
      std::vector<tensor_placement> q(d.tensors.size());
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (!(mask >> g & 1)) continue;
        used += resident[g];
        for (const std::size_t i : groups[g]) q[i] = {home_tier::gpu, exec_unit::gpu, exec_unit::gpu};
      }
      if (used > o.gpu_budget) continue;
      best = std::min(best, evaluate(d, q, o.links, 1, p.order).seconds_per_token);
    }
    // The planner may also use the disk when RAM is short, which the brute force ignores;
    // compare only when everything fit in RAM.
    if (p.disk_weights == 0) {
      CHECK(p.decode.seconds_per_token <= best * 1.02);
      ++compared;
    }
  }
  CHECK(compared >= 10);
}

TEST_CASE("planner: a fixture GGUF (qwen3moe) gives a demand with every tensor and a plan that reports") {
  const strata::gguf::file f(std::string(STRATA_TEST_FIXTURES) + "/models/qwen3moe-Q4_K_M.gguf");
  const strata::arch::hparams hp = strata::arch::visit(f.gguf().get_string("general.architecture"),
                                                       [&](auto a) { return decltype(a)::load_hparams(f.gguf()); });
  const model_demand d = demand_from_gguf(f.gguf(), hp, {.n_ctx = 256, .max_batch = 64});
  CHECK(d.tensors.size() == f.gguf().tensors().size());
  std::uint64_t file_bytes = 0, exps = 0;
  for (const auto& t : f.gguf().tensors()) file_bytes += t.nbytes;
  for (const auto& t : d.tensors)
    if (t.kind == tensor_kind::routed_experts) {
      ++exps;
      CHECK(t.n_expert == hp.n_expert);
      CHECK(t.n_expert_used == hp.n_expert_used);
    }
  CHECK(exps == 3 * hp.n_layer);
  CHECK(total_bytes(d) == file_bytes);
  CHECK(d.kv_bytes_per_layer == 2ull * 256 * hp.n_embd_kv() * 2);
  plan_options o{.gpu_budget = file_bytes / 2 + d.scratch_bytes, .ram_budget = 1ull << 30, .prefill_batch = 64};
  const placement_plan p = plan_placement(d, o);
  check_budgets(p, o);
  const std::string text = plan_text(d, p, o);
  CHECK(text.find("ASSUMED") != std::string::npos);
  CHECK(text.find("blk 0") != std::string::npos);
  const std::string json = plan_json(d, p, o);
  CHECK(json.find("\"assumed\":true") != std::string::npos);
  CHECK(json.find("\"name\":\"blk.0.ffn_up_exps.weight\"") != std::string::npos);
  CHECK(json.front() == '{');
  CHECK(json.back() == '}');
}

TEST_CASE("engine layouts: -ngl N in the planner's terms") {
  const model_demand d = synthetic(4, 32, 96);
  const link_speeds l = assumed_desktop_links();
  const auto all_gpu = layout_plan(d, layer_split_layout(d, -1), l, 1ull << 40, 64);
  const auto half = layout_plan(d, layer_split_layout(d, 2), l, 1ull << 40, 64);
  const auto none = layout_plan(d, layer_split_layout(d, 0), l, 1ull << 40, 64);
  for (const auto& p : all_gpu.tensors) CHECK(p.home == home_tier::gpu);
  for (const auto& p : none.tensors) CHECK(p.decode == exec_unit::cpu);
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    const auto& t = d.tensors[i];
    const bool gpu = t.layer >= 0 ? t.layer < 2 : t.kind == tensor_kind::embedding;
    CHECK(half.tensors[i].home == (gpu ? home_tier::gpu : home_tier::ram));
  }
  CHECK(half.gpu_kv == 2 * d.kv_bytes_per_layer);
  CHECK(half.ram_kv == 2 * d.kv_bytes_per_layer);
  CHECK(half.gpu_total() == layout_gpu_bytes(d, layer_split_layout(d, 2)));
  // One hand-off (GPU -> CPU after block 1) and times in between the two extremes.
  CHECK(half.decode.handoffs == 1);
  CHECK(half.decode.seconds_per_token > all_gpu.decode.seconds_per_token);
  CHECK(half.decode.seconds_per_token < none.decode.seconds_per_token);
  // RAM too small for the CPU weights: they are read from the mapped file.
  const auto tight = layout_plan(d, layer_split_layout(d, 2), l, half.ram_kv + half.ram_scratch + 130 * MiB, 64);
  CHECK(tight.disk_weights > 0);
  CHECK(tight.ram_total() <= half.ram_kv + half.ram_scratch + 130 * MiB);
}

TEST_CASE("engine layouts: --fit on a dense model takes the most leading blocks that fit, the head only with the last") {
  const model_demand d = synthetic(4, 32, 96);  // blocks of 128 MiB + 32 KiB norms, 1 MiB KV each
  const std::uint64_t block = 128 * MiB + 32 * 1024 + 1 * MiB, base = d.scratch_bytes + 100 * MiB;  // + embedding
  const auto fit = [&](std::uint64_t budget) {
    const engine_layout l = plan_engine_layout(d, {.gpu_budget = budget, .ram_budget = 1ull << 40});
    CHECK(layout_gpu_bytes(d, l) <= budget);
    return l.n_gpu_layers;
  };
  CHECK(fit(0) == 0);
  CHECK(fit(base + block - 1) == 0);
  CHECK(fit(base + block) == 1);
  CHECK(fit(base + 3 * block + 10 * MiB) == 3);
  CHECK(fit(base + 4 * block) == 3);  // the head (100 MiB + norm) does not fit beside block 3
  CHECK(fit(base + 4 * block + 100 * MiB + 16 * 1024) == 4);
  // The KV of the CPU blocks and the scratch must fit the RAM budget.
  CHECK_THROWS_WITH_AS(plan_engine_layout(d, {.gpu_budget = base + block, .ram_budget = 2 * MiB}),
                       doctest::Contains("--ram-budget"), strata::error);
}

TEST_CASE("engine layouts: --fit --no-expert-cache on a MoE model keeps every block on the GPU and computes the experts that do not fit on the CPU") {
  const model_demand d = synthetic(6, 16, 300, 64, 4);  // 100 MiB per expert tensor, 300 per block
  std::uint64_t cores = d.scratch_bytes + 200 * MiB + 16 * 1024;  // + embedding, head, output norm
  for (const auto& t : d.tensors)
    if (t.layer >= 0 && t.kind != tensor_kind::routed_experts) cores += t.bytes;
  cores += 6 * d.kv_bytes_per_layer;
  const plan_options o{.gpu_budget = cores + 2 * 300 * MiB + 50 * MiB, .ram_budget = 1ull << 40, .cache_experts = false};
  const engine_layout l = plan_engine_layout(d, o);
  CHECK(l.n_gpu_layers == 6);
  CHECK(l.handoff_layers() == std::vector<std::uint32_t>{0, 1, 2, 3});  // the last two blocks' experts fit
  CHECK(layout_gpu_bytes(d, l) <= o.gpu_budget);
  const placement_plan p = layout_plan(d, l, o.links, o.ram_budget, 64);
  CHECK(p.decode.handoffs == 8);  // to the CPU and back in each of the first four blocks
  CHECK(p.decode.seconds_per_token < layout_plan(d, layer_split_layout(d, 1), o.links, o.ram_budget, 64).decode.seconds_per_token);
  // --n-cpu-moe 5 through the rules: those blocks' experts stay on the CPU even with room.
  plan_options all = o;
  all.gpu_budget = 1ull << 40;
  add_cpu_moe_rules(false, 5, all.overrides);
  CHECK(plan_engine_layout(d, all).handoff_layers() == std::vector<std::uint32_t>{0, 1, 2, 3, 4});
  // An expert forced to the GPU is placed there first.
  plan_options pin = o;
  parse_override_rules(R"(^blk\.0\.ffn_.*_exps=gpu)", pin.overrides);
  const engine_layout lp = plan_engine_layout(d, pin);
  CHECK(!lp.experts_on_cpu(0));
  CHECK(layout_gpu_bytes(d, lp) <= pin.gpu_budget);
}

// qwen3-30b-a3b's proportions (48 blocks, 128 experts, top-8; the experts ~90% of the bytes) under
// a budget holding ~60% of the experts: with the routing prior's skew a cache of the most-routed
// experts in every block misses ~9% of the pairs, which beats the CPU computing a third of the
// blocks' experts over desktop links.
TEST_CASE("engine layouts: --fit GPU-caches every block's experts when the routing prior says the misses cost less than the CPU") {
  const model_demand d = synthetic(48, 6, 96, 128, 8);
  plan_options o{.ram_budget = 1ull << 40};
  o.gpu_budget = 200 * MiB + 48 * (6 * MiB + 1 * MiB + MiB / 4) + 48 * 96 * MiB * 6 / 10;
  const engine_layout l = plan_engine_layout(d, o);
  CHECK(l.n_gpu_layers == 48);
  CHECK(l.handoff_layers().empty());
  CHECK(l.cached_layers().size() == 48);
  CHECK(l.expert_slots >= 8);
  CHECK(l.expert_slots < 128);
  const placement_plan p = layout_plan(d, l, o.links, o.ram_budget, o.prefill_batch);
  CHECK(p.gpu_total() <= o.gpu_budget);  // slots, KV, scratch and the routers' products
  engine_layout more = l;
  ++more.expert_slots;
  CHECK(layout_plan(d, more, o.links, o.ram_budget, o.prefill_batch).gpu_total() > o.gpu_budget);  // as many as fit
  // Misses over the link: one token reads k / n x the cold mass; a 512-token step nearly every
  // expert the slots lack, once.
  const double experts = 48.0 * 96 * MiB;
  CHECK(p.decode.host_to_gpu_bytes == doctest::Approx(experts * cache_miss_share(128, 8, l.expert_slots, 1)));
  CHECK(p.prefill.host_to_gpu_bytes == doctest::Approx(experts * cache_miss_share(128, 8, l.expert_slots, 512) / 512));
  CHECK(1 - cache_hit_rate(128, 8, l.expert_slots) < 0.12);
  CHECK(p.decode.handoffs == 0);  // the lookup form: no host round trip
  for (std::size_t i = 0; i < d.tensors.size(); ++i)
    if (d.tensors[i].kind == tensor_kind::routed_experts) CHECK(label(p.tensors[i]) == "gpu-cached");
  // --no-expert-cache: a third of the blocks' experts on the CPU, predicted slower.
  plan_options none = o;
  none.cache_experts = false;
  const engine_layout c = plan_engine_layout(d, none);
  CHECK(c.cached_layers().empty());
  CHECK(!c.handoff_layers().empty());
  CHECK(layout_plan(d, c, o.links, o.ram_budget, o.prefill_batch).decode.seconds_per_token > p.decode.seconds_per_token);
  // The same cache with its decode misses on the CPU: those bytes are DRAM reads on the chain and
  // every cached block a round trip (two switches, as a CPU-expert block); prompt steps are priced as before.
  engine_layout cpu_misses = l;
  cpu_misses.expert_cpu_misses = true;
  const placement_plan q = layout_plan(d, cpu_misses, o.links, o.ram_budget, o.prefill_batch);
  CHECK(q.decode.host_to_gpu_bytes == 0.0);
  CHECK(q.decode.cpu_read_bytes == doctest::Approx(p.decode.host_to_gpu_bytes));
  CHECK(q.decode.handoffs == 96);
  CHECK(q.prefill.host_to_gpu_bytes == doctest::Approx(p.prefill.host_to_gpu_bytes));
  CHECK(q.prefill.seconds_per_token == doctest::Approx(p.prefill.seconds_per_token));
  const double miss_bytes = p.decode.host_to_gpu_bytes, hand_s = 96 * (o.links.handoff_s + double(d.hidden_bytes) / o.links.host_to_gpu);
  CHECK(q.decode.chain_s == doctest::Approx(p.decode.chain_s - miss_bytes / (kernel_host_read_share * o.links.host_to_gpu) +
                                            miss_bytes / o.links.cpu_read + hand_s));
}

// Llama 4 Scout's proportions (48 blocks, 16 experts of ~70 MiB, top-1) with 4 slots a block: a
// miss is one whole large expert, which the CPU reads from DRAM faster than the kernels read it
// over the link on a desktop (60 against 0.8 x 24 GB/s), so the planner computes decode misses on
// the CPU; with a link faster than the CPU's reads it keeps them on the GPU. Top-k > 1 never
// takes the CPU form unasked (the engine sends a block-step there only when all its experts
// miss), and --expert-misses forces either.
TEST_CASE("engine layouts: a GPU expert cache's decode misses go to the CPU where the cost model predicts it faster") {
  const model_demand d = synthetic(48, 24, 16 * 70, 16, 1);
  plan_options o{.ram_budget = 1ull << 40};
  o.gpu_budget = 1ull << 40;
  engine_layout l = fixed_layout(d, -1, o.overrides, 4);
  REQUIRE(l.cached_layers().size() == 48);
  choose_expert_misses(d, l, o);
  CHECK(l.expert_cpu_misses);
  engine_layout gpu = l;
  gpu.expert_cpu_misses = false;
  CHECK(layout_plan(d, l, o.links, o.ram_budget, o.prefill_batch).decode.seconds_per_token <
        layout_plan(d, gpu, o.links, o.ram_budget, o.prefill_batch).decode.seconds_per_token);
  plan_options fast_link = o;
  fast_link.links.host_to_gpu = 400e9;
  choose_expert_misses(d, l, fast_link);
  CHECK(!l.expert_cpu_misses);
  plan_options forced = fast_link;
  forced.expert_cpu_misses = true;
  choose_expert_misses(d, l, forced);
  CHECK(l.expert_cpu_misses);
  forced = o;
  forced.expert_cpu_misses = false;
  choose_expert_misses(d, l, forced);
  CHECK(!l.expert_cpu_misses);
  // Top-2 of the same experts: the GPU form unless forced.
  const model_demand d2 = synthetic(48, 24, 16 * 70, 16, 2);
  engine_layout l2 = fixed_layout(d2, -1, o.overrides, 4);
  choose_expert_misses(d2, l2, o);
  CHECK(!l2.expert_cpu_misses);
  // No cache: nothing to choose.
  engine_layout none = fixed_layout(d, -1, o.overrides);
  choose_expert_misses(d, none, forced);
  CHECK(!none.expert_cpu_misses);
  // --fit at a budget holding the blocks and a few slots each caches them, misses on the CPU.
  plan_options fit = o;
  fit.gpu_budget = 200 * MiB + 48 * (24 * MiB + MiB + MiB / 4) + 48 * 4 * 70 * MiB + 64 * MiB;
  const engine_layout f = plan_engine_layout(d, fit);
  CHECK(!f.cached_layers().empty());
  CHECK(f.expert_cpu_misses);
}

// The expert cache's prompt staging (engine_layout::expert_cache_stage, the Vulkan backend's
// expert_cache_stage.cpp): with Llama 4 Scout's proportions (16 experts of ~70 MiB a block) a long
// prompt step routes nearly every expert, so copying each block's experts whole before its
// kernels (one pair of buffers: the largest gate + up and down) beats the kernels' own reads of
// the misses over the link. Chosen where the budget holds the pair; decode is priced as before;
// small experts (the 30B's shape) keep the kernels' reads.
TEST_CASE("engine layouts: a GPU expert cache with large experts stages prompt steps' experts on the GPU where the budget holds them") {
  const model_demand d = synthetic(48, 24, 16 * 70, 16, 1);
  plan_options o{.ram_budget = 1ull << 40};
  o.gpu_budget = 1ull << 40;
  engine_layout l = fixed_layout(d, -1, o.overrides, 4);
  REQUIRE(l.cached_layers().size() == 48);
  choose_expert_stage(d, l, o);
  CHECK(l.expert_cache_stage);
  engine_layout off = l;
  off.expert_cache_stage = false;
  const placement_plan p = layout_plan(d, l, o.links, o.ram_budget, o.prefill_batch);
  const placement_plan q = layout_plan(d, off, o.links, o.ram_budget, o.prefill_batch);
  const std::uint64_t pair = 3 * (16 * 70 * MiB / 3);  // a block's gate + up and down (synthetic's thirds)
  CHECK(p.gpu_total() - q.gpu_total() == pair);
  CHECK(cache_stage_bytes(d, l) == pair);
  CHECK(p.prefill.host_to_gpu_bytes == doctest::Approx(48.0 * 16 * 70 * MiB / o.prefill_batch));  // every expert, once a step
  CHECK(p.prefill.seconds_per_token < q.prefill.seconds_per_token);
  CHECK(p.decode.seconds_per_token == doctest::Approx(q.decode.seconds_per_token));
  // A budget a byte short of the pair: no staging.
  plan_options tight = o;
  tight.gpu_budget = p.gpu_total() - 1;
  choose_expert_stage(d, l, tight);
  CHECK(!l.expert_cache_stage);
  CHECK(cache_stage_bytes(d, l) == 0);
  // Small experts: the kernels' reads.
  const model_demand small = synthetic(48, 16, 96, 128, 8);
  engine_layout s = fixed_layout(small, -1, o.overrides, 16);
  REQUIRE(!s.cached_layers().empty());
  choose_expert_stage(small, s, o);
  CHECK(!s.expert_cache_stage);
  // No cache, or the split form: nothing to stage.
  engine_layout none = fixed_layout(d, -1, o.overrides);
  choose_expert_stage(d, none, o);
  CHECK(!none.expert_cache_stage);
  engine_layout split = fixed_layout(d, -1, o.overrides, 4);
  split.expert_lookup = false;
  choose_expert_stage(d, split, o);
  CHECK(!split.expert_cache_stage);
}

TEST_CASE("engine layouts: fixed layouts follow -ngl and expert rules, and refuse what the engine cannot run") {
  const model_demand d = synthetic(4, 16, 300, 64, 4);
  std::vector<override_rule> rules;
  add_cpu_moe_rules(true, 0, rules);
  engine_layout l = fixed_layout(d, -1, rules);
  CHECK(l.n_gpu_layers == 4);
  CHECK(l.handoff_layers() == std::vector<std::uint32_t>{0, 1, 2, 3});
  rules.clear();
  parse_override_rules(R"(blk\.[23]\.ffn_down_exps=cpu)", rules);  // one of the three: the block's experts go
  CHECK(fixed_layout(d, -1, rules).handoff_layers() == std::vector<std::uint32_t>{2, 3});
  CHECK(fixed_layout(d, 3, rules).handoff_layers() == std::vector<std::uint32_t>{2});  // block 3 is on the CPU anyway
  rules.clear();
  parse_override_rules(R"(attn_q=cpu)", rules);
  CHECK_THROWS_WITH_AS(fixed_layout(d, -1, rules), doctest::Contains("blk.0.attn_q.weight"), strata::error);
  rules.clear();
  parse_override_rules(R"(blk\.3\.=gpu)", rules);
  CHECK_THROWS_WITH_AS(fixed_layout(d, 2, rules), doctest::Contains("-ngl 2"), strata::error);
  CHECK_NOTHROW(fixed_layout(d, 4, rules));
}
