// Expert streaming in the engine layouts (tiers/engine_layout.hpp): CPU-computed routed experts
// of GPU blocks streamed through the expert ring in prompt steps (the per-phase threshold, the
// ring's two slots, bytes per token per phase, the budget check) and --fit's choice of it.
#include <doctest/doctest.h>

#include <string>

#include "strata/tiers/engine_layout.hpp"
#include "strata/tiers/fit.hpp"
#include "synthetic_demand.hpp"

using namespace strata::tiers;

namespace {

// MoE blocks of 8 MiB attention and 96 MiB of experts (gate, up, down 32 MiB each), 32 of 4 used.
model_demand moe(std::uint32_t n_layer) { return synthetic(n_layer, 8, 96, 32, 4); }

engine_layout cpu_moe(const model_demand& d) {
  std::vector<override_rule> rules;
  add_cpu_moe_rules(true, 0, rules);
  return fixed_layout(d, -1, rules);
}

}  // namespace

TEST_CASE("expert streaming: CPU experts stream in prompt steps through a ring of one block's experts, decode stays on the CPU") {
  const model_demand d = moe(4);
  const link_speeds links = assumed_desktop_links();
  const engine_layout base = cpu_moe(d);
  REQUIRE(base.handoff_layers() == std::vector<std::uint32_t>{0, 1, 2, 3});
  const engine_layout l = with_streamed_experts(d, base, links, 1ull << 40, 512);
  REQUIRE(l.expert_streamed_layers() == std::vector<std::uint32_t>{0, 1, 2, 3});
  CHECK(l.handoff_layers() == base.handoff_layers());  // decode still hands off
  CHECK(l.expert_cpu_tokens >= 1);
  CHECK(l.expert_cpu_tokens < 512);
  CHECK(l.expert_cpu_tokens == expert_cpu_tokens(d, l, links, 512));
  // Slot 0: gate + up of a block; slot 1: its down.
  CHECK(expert_ring_slots(d, l) == std::pair<std::uint64_t, std::uint64_t>{64 * MiB, 32 * MiB});
  CHECK(expert_ring_bytes(d, l) == 96 * MiB);
  CHECK(expert_streamed_bytes(d, l) == 4 * 96 * MiB);
  const placement_plan p = layout_plan(d, l, links, 1ull << 40, 512);
  CHECK(p.gpu_ring == 96 * MiB);
  CHECK(layout_gpu_bytes(d, l) == p.gpu_total());
  CHECK(layout_gpu_bytes(d, l) == layout_gpu_bytes(d, base) + 96 * MiB);
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    const tensor_demand& t = d.tensors[i];
    if (t.kind != tensor_kind::routed_experts) continue;
    CAPTURE(t.name);
    CHECK(label(p.tensors[i]) == "cpu-computed");
    CHECK(p.tensors[i].decode == exec_unit::cpu);
    CHECK(p.tensors[i].prefill == exec_unit::gpu);
  }
  CHECK(p.ram_weights >= 2 * 4 * 96 * MiB);  // the pinned copies beside the CPU's
  // Decode: nothing over the link but hand-offs; prefill: every expert once per 512 tokens,
  // no host sync, the upload overlapping the chain (max, not sum).
  CHECK(p.decode.host_to_gpu_bytes == doctest::Approx(0));
  CHECK(p.decode.handoffs == 8);
  CHECK(p.prefill.handoffs == 0);
  CHECK(p.prefill.host_to_gpu_bytes == doctest::Approx(4.0 * 96 * MiB / 512));
  CHECK(p.prefill.seconds_per_token == doctest::Approx(std::max(p.prefill.chain_s, p.prefill.upload_s)));
  const placement_plan q = layout_plan(d, base, links, 1ull << 40, 512);
  CHECK(p.decode.seconds_per_token == doctest::Approx(q.decode.seconds_per_token));
  CHECK(p.prefill.seconds_per_token < q.prefill.seconds_per_token);
}

TEST_CASE("expert streaming: the threshold follows the link, a budget short of the ring keeps the layout, and the reason names the sizes") {
  const model_demand d = moe(4);
  const engine_layout base = cpu_moe(d);
  link_speeds slow = assumed_desktop_links(), fast = slow;
  slow.host_to_gpu = 1e8;
  fast.host_to_gpu = 1e11;
  const std::uint32_t ts = with_streamed_experts(d, base, slow, 1ull << 40, 4096).expert_cpu_tokens;
  const std::uint32_t tf = with_streamed_experts(d, base, fast, 1ull << 40, 4096).expert_cpu_tokens;
  CHECK(tf >= 1);
  CHECK(tf < ts);
  // A link so slow the CPU wins every step up to the batch: nothing streams.
  link_speeds crawl = slow;
  crawl.host_to_gpu = 1e5;
  std::string why;
  CHECK(with_streamed_experts(d, base, crawl, 1ull << 40, 512, &why).expert_streamed_layers().empty());
  CHECK(why.find("the CPU is predicted faster for every step of up to 512 tokens") != std::string::npos);
  // One byte short of the ring.
  const std::uint64_t need = layout_gpu_bytes(d, base) + 96 * MiB;
  CHECK(with_streamed_experts(d, base, fast, need, 512).expert_streamed_layers().size() == 4);
  const engine_layout s = with_streamed_experts(d, base, fast, need - 1, 512, &why);
  CHECK(s.expert_streamed_layers().empty());
  CHECK(s.handoff_layers() == base.handoff_layers());
  CHECK(why.find("does not hold the expert ring (64.00 MiB + 32.00 MiB)") != std::string::npos);
  // Without CPU experts there is nothing to stream.
  CHECK(with_streamed_experts(d, fixed_layout(d, -1, {}), fast, 1ull << 40, 512).expert_streamed_layers().empty());
}

// qwen3-30b-a3b's proportions (48 blocks, 128 experts, top-8; the experts ~90% of the bytes):
// under a budget that holds about 2/3 of the experts and no expert cache, --fit trades one more block's experts on
// the CPU for the ring when prefill gains more than decode loses (the 5% rule), and spreads the
// CPU blocks over the GPU blocks so their copies overlap the resident blocks' compute.
TEST_CASE("expert streaming: --fit --no-expert-cache reserves the ring, spreads the CPU blocks and streams them in prompt steps") {
  const model_demand d = synthetic(48, 6, 96, 128, 8);
  plan_options o;
  o.cache_experts = false;  // (with the cache --fit caches every block's experts: planner_test)
  o.links = assumed_desktop_links();
  o.ram_budget = 1ull << 40;
  o.prefill_batch = 512;
  o.gpu_budget = 200 * MiB + 48 * (6 * MiB + 1 * MiB + (1 << 20) / 4) + 32 * 96 * MiB;
  const engine_layout l = plan_engine_layout(d, o);
  CHECK(l.n_gpu_layers == 48);
  const auto h = l.handoff_layers();
  MESSAGE("--fit: " << h.size() << " CPU-expert blocks, " << l.expert_streamed_layers().size()
                    << " streamed in steps of more than " << l.expert_cpu_tokens << " tokens");
  REQUIRE(!h.empty());
  CHECK(layout_gpu_bytes(d, l) <= o.gpu_budget);
  if (!l.expert_streamed_layers().empty()) {
    CHECK(l.expert_streamed_layers() == h);
    CHECK(h.front() > 0);             // spread, not the leading blocks
    CHECK(h.back() - h.front() > h.size());
  }
  o.stream_experts = false;  // --no-stream-experts: the leading blocks' experts on the CPU, no ring
  const engine_layout n = plan_engine_layout(d, o);
  CHECK(n.expert_streamed_layers().empty());
  CHECK(n.handoff_layers().front() == 0);
}
