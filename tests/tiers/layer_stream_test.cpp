// Dense layer streaming in the engine layouts (tiers/engine_layout.hpp): --stream-layers N in the
// planner's terms (placement, ring, bytes per token per phase), its refusals, and --fit's choice
// between streaming and computing the blocks that do not fit on the CPU, by the link speeds, and
// the per-phase choice inside a streamed layout (decode steps on the CPU, prompt steps streamed).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "strata/tiers/engine_layout.hpp"
#include "strata/tiers/fit.hpp"
#include "strata/tiers/link_schedule.hpp"
#include "synthetic_demand.hpp"

using namespace strata::tiers;

TEST_CASE("layer streaming: --stream-layers N streams the dense FFN of the last N GPU blocks through a 2-slot ring") {
  const model_demand d = synthetic(4, 32, 96);
  const link_speeds links = assumed_desktop_links();
  const engine_layout l = fixed_layout(d, -1, {}, 0, 3);
  CHECK(l.n_gpu_layers == 4);
  CHECK(l.streamed_layers() == std::vector<std::uint32_t>{1, 2, 3});
  CHECK(ring_slot_bytes(d, l) == 96 * MiB);
  CHECK(ring_bytes(d, l) == 2 * 96 * MiB);
  CHECK(streamed_bytes(d, l) == 3 * 96 * MiB);
  const placement_plan p = layout_plan(d, l, links, 1ull << 40, 512);
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    const tensor_demand& t = d.tensors[i];
    CAPTURE(t.name);
    const bool streamed = t.kind == tensor_kind::dense_ffn && t.layer >= 1;
    CHECK(label(p.tensors[i]) == (streamed ? "gpu-streamed" : "gpu-resident"));
    CHECK(p.tensors[i].prefill == exec_unit::gpu);
  }
  CHECK(p.gpu_ring == 2 * 96 * MiB);
  CHECK(p.ram_weights == 3 * 96 * MiB);  // the pinned copies
  CHECK(layout_gpu_bytes(d, l) == p.gpu_total());
  // Every streamed byte crosses the link once per step: per token all of it in decode, a
  // 512th of it in a 512-token prompt step; the upload overlaps the chain (max, not sum).
  CHECK(p.decode.host_to_gpu_bytes == doctest::Approx(3.0 * 96 * MiB));
  CHECK(p.prefill.host_to_gpu_bytes == doctest::Approx(3.0 * 96 * MiB / 512));
  CHECK(p.decode.handoffs == 0);
  CHECK(p.decode.seconds_per_token == doctest::Approx(std::max(p.decode.chain_s, p.decode.upload_s)));
  CHECK(p.decode.upload_s == doctest::Approx(3.0 * 96 * MiB / links.host_to_gpu));
  // With -ngl 2 the last two GPU blocks stream; the CPU blocks keep theirs.
  CHECK(fixed_layout(d, 2, {}, 0, 2).streamed_layers() == std::vector<std::uint32_t>{0, 1});
}

TEST_CASE("layer streaming: --stream-layers refuses more blocks than the GPU holds and rules forcing a streamed FFN to the GPU") {
  const model_demand d = synthetic(4, 32, 96);
  CHECK_THROWS_WITH_AS(fixed_layout(d, 2, {}, 0, 3), doctest::Contains("--stream-layers 3: -ngl 2 puts 2 blocks"),
                       strata::error);
  std::vector<override_rule> rules;
  parse_override_rules("blk\\.3\\.ffn_up=gpu", rules);
  CHECK_THROWS_WITH_AS(fixed_layout(d, -1, rules, 0, 1),
                       doctest::Contains("'blk.3.ffn_up.weight' to the GPU, but --stream-layers streams it"), strata::error);
  CHECK_NOTHROW(fixed_layout(d, -1, rules, 0, 0));
}

TEST_CASE("layer streaming: --fit streams what does not fit when the link beats the CPU, else computes it on the CPU") {
  const model_demand d = synthetic(4, 32, 96);
  // Room for everything but one block's FFN: 4 attention blocks with KV, embedding, head,
  // scratch and 3 FFNs, so streaming keeps one FFN resident beside a 2-slot ring of two.
  const std::uint64_t attn_blocks = 4 * (32 * MiB + 32 * 1024 + 1 * MiB);
  const std::uint64_t budget = d.scratch_bytes + 200 * MiB + 16 * 1024 + attn_blocks + 3 * 96 * MiB;
  plan_options o{.gpu_budget = budget, .ram_budget = 1ull << 40};
  // Desktop links: PCIe (24 GB/s) is slower than the CPU's DRAM read (60 GB/s), and streaming
  // would cost decode more than 5%: the blocks that do not fit run on the CPU.
  const engine_layout cpu = plan_engine_layout(d, o);
  CHECK(cpu.streamed_layers().empty());
  CHECK(cpu.n_gpu_layers < 4);
  CHECK(layout_gpu_bytes(d, cpu) <= budget);
  // A link faster than the CPU's read (a PCIe 5 card on a slow-memory host): stream.
  o.links.host_to_gpu = 64e9;
  o.links.cpu_read = 30e9;
  const engine_layout s = plan_engine_layout(d, o);
  CHECK(s.n_gpu_layers == 4);
  CHECK(s.streamed_layers() == std::vector<std::uint32_t>{1, 2, 3});
  CHECK(layout_gpu_bytes(d, s) <= budget);
  const auto ps = layout_plan(d, s, o.links, o.ram_budget, o.prefill_batch);
  const auto pc = layout_plan(d, cpu, o.links, o.ram_budget, o.prefill_batch);
  CHECK(ps.decode.seconds_per_token < pc.decode.seconds_per_token);
  CHECK(ps.prefill.seconds_per_token < pc.prefill.seconds_per_token);
  // The per-phase choice inside a streamed layout: with desktop links the CPU reads a block's
  // FFN faster than PCIe copies it, so decode computes the streamed FFNs on the CPU and prefill
  // streams them; but the link carries one of the four meanwhile (block 2, its copy split over
  // the hand-offs of blocks 0 and 1). Here attention is most of a block (96 MiB vs a 32 MiB FFN),
  // so keeping every block's attention on the GPU and streaming the FFNs beats leaving whole
  // blocks to the CPU.
  {
    const model_demand d2 = synthetic(4, 96, 32);
    const std::uint64_t attn2 = 4 * (96 * MiB + 32 * 1024 + 1 * MiB);
    plan_options o2{.gpu_budget = d2.scratch_bytes + 200 * MiB + 16 * 1024 + attn2 + 2 * 32 * MiB + MiB, .ram_budget = 1ull << 40};
    const engine_layout l2 = plan_engine_layout(d2, o2);
    CHECK(l2.n_gpu_layers == 4);
    CHECK(l2.streamed_layers() == std::vector<std::uint32_t>{0, 1, 2, 3});
    CHECK(l2.stream_cpu_tokens >= 1);
    CHECK(l2.stream_cpu_tokens < o2.prefill_batch);
    const placement_plan p2 = layout_plan(d2, l2, o2.links, o2.ram_budget, o2.prefill_batch);
    CHECK(l2.stream_link_blocks == 1);
    CHECK(l2.link_layers() == std::vector<std::uint32_t>{2});
    for (std::size_t i = 0; i < d2.tensors.size(); ++i)
      if (d2.tensors[i].kind == tensor_kind::dense_ffn) {
        CHECK(p2.tensors[i].decode == (d2.tensors[i].layer == 2 ? exec_unit::gpu : exec_unit::cpu));
        CHECK(p2.tensors[i].prefill == exec_unit::gpu);
      }
    CHECK(p2.decode.host_to_gpu_bytes == doctest::Approx(32.0 * MiB / 3 * 3));  // block 2's FFN
    CHECK(p2.decode.handoffs == 6);  // to the CPU and back around each CPU-computed FFN
    CHECK(p2.prefill.host_to_gpu_bytes == doctest::Approx(4.0 * 32 * MiB / 512));
    CHECK(p2.ram_weights == (2 * 3 + 1) * 3 * (32 * MiB / 3));  // the pinned copies and the CPU's of blocks 0, 1, 3
    // Block 0's hand-off hides what the link moves while the CPU reads that FFN (24/60 of it);
    // block 1's, the last before block 2, takes the rest and outlasts its CPU work (0.56 ms at
    // 60 GB/s): the chain pays the difference. Side by side both read DRAM at 0.8 of their rates
    // (the desktop's assumed shares): block 0's hand-off lasts cpu0 / 0.8, block 1's runs both
    // at their shares for cpu0 / 0.8, then the rest of the copy alone.
    std::vector<std::size_t> ffn0;
    for (std::size_t i = 0; i < d2.tensors.size(); ++i)
      if (d2.tensors[i].kind == tensor_kind::dense_ffn && d2.tensors[i].layer == 0) ffn0.push_back(i);
    const double cpu0 = evaluate(d2, p2.tensors, o2.links, 1, ffn0).chain_s - 4 * o2.links.block_s;
    const std::uint64_t B = ring_slot_bytes(d2, l2);
    const double share = o2.links.cpu_read_beside_copies;
    REQUIRE(share == 0.8);
    REQUIRE(o2.links.copies_beside_cpu_read == share);
    const std::uint64_t first_piece = std::uint64_t(double(B) * o2.links.host_to_gpu / o2.links.cpu_read) / ring_align * ring_align;
    const double rest = double(B - first_piece) / o2.links.host_to_gpu;
    REQUIRE(rest > cpu0);
    CHECK(double(first_piece) / o2.links.host_to_gpu == doctest::Approx(cpu0).epsilon(1e-3));  // hidden, to the ring's rounding
    const double block0 = cpu0 / share, block1 = cpu0 / share + (rest - cpu0);
    CHECK(p2.decode.seconds_per_token == doctest::Approx(p2.decode.chain_s + (block0 - cpu0) + (block1 - cpu0)).epsilon(1e-4));
    engine_layout all_cpu = l2;
    all_cpu.stream_link_blocks = 0;
    const auto pa = layout_plan(d2, all_cpu, o2.links, o2.ram_budget, o2.prefill_batch);
    CHECK(pa.decode.host_to_gpu_bytes == 0);
    CHECK(pa.decode.handoffs == 8);
    CHECK(p2.decode.seconds_per_token < pa.decode.seconds_per_token);
    // At most half of the streamed blocks, and never one first: refused naming the limit.
    all_cpu.stream_link_blocks = 3;
    CHECK_THROWS_WITH_AS(all_cpu.link_layers(), doctest::Contains("at most half of the 4 streamed blocks (2)"), strata::error);
    all_cpu.stream_link_blocks = 2;
    CHECK(all_cpu.link_layers() == std::vector<std::uint32_t>{1, 3});
    // A link as slow as a tenth of the CPU: it carries nothing.
    link_speeds slow_link = o2.links;
    slow_link.host_to_gpu = o2.links.cpu_read / 10;
    CHECK(stream_link_blocks(d2, l2, slow_link) == 0);
    const auto split = layout_plan(d2, layer_split_layout(d2, 3), o2.links, o2.ram_budget, o2.prefill_batch);
    CHECK(p2.decode.seconds_per_token < split.decode.seconds_per_token);
    // stream_cpu_tokens: the CPU's time grows with the step's tokens, the link's does not.
    link_speeds fast = o2.links;
    fast.host_to_gpu = 1e12;
    CHECK(stream_cpu_tokens(d2, l2, fast, 512) == 0);
    link_speeds slow_cpu = o2.links;
    slow_cpu.cpu_flops /= 4;
    CHECK(stream_cpu_tokens(d2, l2, slow_cpu, 512) < l2.stream_cpu_tokens);
  }
  // A budget without room for the ring beside even one block's attention: no streaming,
  // whatever the links.
  o.links.host_to_gpu = 1e12;
  o.gpu_budget = d.scratch_bytes + 100 * MiB + attn_blocks / 4 + 96 * MiB;
  CHECK(plan_engine_layout(d, o).n_gpu_layers == 1);
  CHECK(plan_engine_layout(d, o).streamed_layers().empty());
}

namespace {

// Llama 3.1 70B's shapes in Q4_K_M (Q6_K for V, every other ffn_down and the head; 4.5 / 6.56
// bits per weight), 4096 tokens of f16 KV.
model_demand llama_70b() {
  model_demand d;
  d.n_layer = 80;
  d.kv_bytes_per_layer = 2ull * 4096 * 1024 * 2;
  d.scratch_bytes = 600 * MiB;
  d.hidden_bytes = 8192 * 4;
  const double q4 = 144.0 / 256, q6 = 210.0 / 256;
  const auto put = [&](std::string name, tensor_kind kind, int layer, double rows, double cols, double bpw) {
    add(d, std::move(name), kind, layer, std::uint64_t(rows * cols * bpw));
    d.tensors.back().elements = rows * cols;
    if (kind == tensor_kind::embedding) d.tensors.back().rows_total = 128256;
  };
  put("token_embd.weight", tensor_kind::embedding, -1, 128256, 8192, q4);
  for (int il = 0; il < 80; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    put(b + "attn_norm.weight", tensor_kind::norm, il, 1, 8192, 4);
    put(b + "attn_q.weight", tensor_kind::attention, il, 8192, 8192, q4);
    put(b + "attn_k.weight", tensor_kind::attention, il, 1024, 8192, q4);
    put(b + "attn_v.weight", tensor_kind::attention, il, 1024, 8192, q6);
    put(b + "attn_output.weight", tensor_kind::attention, il, 8192, 8192, q4);
    put(b + "ffn_norm.weight", tensor_kind::norm, il, 1, 8192, 4);
    put(b + "ffn_gate.weight", tensor_kind::dense_ffn, il, 28672, 8192, q4);
    put(b + "ffn_up.weight", tensor_kind::dense_ffn, il, 28672, 8192, q4);
    put(b + "ffn_down.weight", tensor_kind::dense_ffn, il, 8192, 28672, il % 2 ? q4 : q6);
  }
  put("output_norm.weight", tensor_kind::norm, -1, 1, 8192, 4);
  put("output.weight", tensor_kind::head, -1, 128256, 8192, q6);
  return d;
}

}  // namespace

// The 70B dense target at 12 GiB with desktop links: every block's attention and KV fit, so
// --fit keeps (nearly) all 80 blocks on the GPU and streams most FFNs: decode computes them on the
// CPU but for about one in four the link carries meanwhile (faster than the best -ngl split's
// predicted decode and than the CPU alone), prefill copies them once per 512-token step (many
// times the split's predicted prefill, which runs the CPU's blocks token by token).
TEST_CASE("layer streaming: --fit on Llama 3.1 70B shapes at 12 GiB streams the FFNs, per phase") {
  const model_demand d = llama_70b();
  const plan_options o{.gpu_budget = 12ull << 30, .ram_budget = 120ull << 30};
  const engine_layout l = plan_engine_layout(d, o);
  CHECK(l.n_gpu_layers == 80);
  CHECK(l.streamed_layers().size() > 60);
  CHECK(l.stream_cpu_tokens >= 1);
  CHECK(l.stream_cpu_tokens < 512);
  CHECK(layout_gpu_bytes(d, l) <= o.gpu_budget);
  const placement_plan p = layout_plan(d, l, o.links, o.ram_budget, o.prefill_batch);
  double best_split = 0, split_prefill = 0;
  for (std::uint32_t n = 0; n <= 80; ++n) {
    const engine_layout s = layer_split_layout(d, n);
    if (n && layout_gpu_bytes(d, s) > o.gpu_budget) continue;
    const placement_plan q = layout_plan(d, s, o.links, o.ram_budget, o.prefill_batch);
    if (q.decode.tokens_per_second() > best_split) best_split = q.decode.tokens_per_second(), split_prefill = q.prefill.tokens_per_second();
  }
  MESSAGE("70B at 12G: streamed " << l.streamed_layers().size() << " FFNs, CPU in steps of <= " << l.stream_cpu_tokens
                                  << " tokens: decode " << p.decode.tokens_per_second() << " t/s, prefill "
                                  << p.prefill.tokens_per_second() << " t/s; best -ngl split " << best_split << " / "
                                  << split_prefill << " t/s (assumed desktop links)");
  CHECK(p.decode.tokens_per_second() > best_split);
  CHECK(p.prefill.tokens_per_second() > 10 * split_prefill);
  const auto linked = l.link_layers();
  MESSAGE("the link carries " << linked.size() << " of them in decode (" << p.decode.host_to_gpu_bytes / 1e9 << " GB a token)");
  CHECK(linked.size() * 5 > l.streamed_layers().size());  // ~24 GB/s beside ~60 GB/s of DRAM reads
  CHECK(linked.size() * 3 < l.streamed_layers().size());
  CHECK(p.decode.host_to_gpu_bytes > 0);
  CHECK(p.prefill.host_to_gpu_bytes > 0);
  engine_layout cpu_only = l;
  cpu_only.stream_link_blocks = 0;
  CHECK(p.decode.seconds_per_token < layout_plan(d, cpu_only, o.links, o.ram_budget, o.prefill_batch).decode.seconds_per_token);
}

// A hand-off's CPU work beside the link's copies: both read DRAM at their side-by-side shares until
// one is done, then the other alone at its full rate.
TEST_CASE("layer streaming: a hand-off beside copies runs both at their shares until one ends") {
  link_speeds l{.host_to_gpu = 50, .cpu_read = 100, .cpu_read_beside_copies = 0.5, .copies_beside_cpu_read = 0.6};
  // Copies end first (10 bytes at 30 B/s), then the CPU's rest alone: 1/3 + (1 - 0.5/3).
  CHECK(detail::side_by_side_seconds(1, 10, l) == doctest::Approx(1.0 / 3 + 1 - 0.5 / 3));
  // The CPU ends first (2 s at half speed), then the copies' rest alone: 2 + (100 - 60) / 50.
  CHECK(detail::side_by_side_seconds(1, 100, l) == doctest::Approx(2.8));
  // No contention: the longer of the two.
  l.cpu_read_beside_copies = l.copies_beside_cpu_read = 1;
  CHECK(detail::side_by_side_seconds(1, 10, l) == doctest::Approx(1));
  CHECK(detail::side_by_side_seconds(1, 100, l) == doctest::Approx(2));
  CHECK(link_bytes_per_cpu_byte(l) == doctest::Approx(0.5));
  l.copies_beside_cpu_read = 0.5;
  CHECK(link_bytes_per_cpu_byte(l) == doctest::Approx(0.25));
}

// The same model at 24 GiB with the H100 host's probed links (PCIe 5: 50.7 GB/s of copies, DRAM
// read by 16 threads at 69 GB/s): the link carries a third of the streamed FFNs in decode, for
// a predicted 1.44x the CPU-only decode of the same layout; among streamed layouts within 5% of
// the fastest decode --fit keeps the one with all 80 blocks (the head's prefill on the GPU).
TEST_CASE("layer streaming: 70B at 24 GiB with H100 links puts the link beside the CPU and keeps the prefill") {
  const model_demand d = llama_70b();
  plan_options o{.gpu_budget = 24ull << 30, .ram_budget = 120ull << 30};
  o.links.gpu_read = 3113.5e9, o.links.host_to_gpu = 50.7e9, o.links.cpu_read = 69e9;
  o.links.cpu_read_beside_copies = o.links.copies_beside_cpu_read = 1;  // not yet probed there
  const engine_layout l = plan_engine_layout(d, o);
  CHECK(l.n_gpu_layers == 80);
  CHECK(l.stream_cpu_tokens >= 1);
  const auto n = l.link_layers().size(), m = l.streamed_layers().size();
  CHECK(n * 4 > m);
  CHECK(n * 2 <= m);
  const placement_plan p = layout_plan(d, l, o.links, o.ram_budget, o.prefill_batch);
  engine_layout cpu_only = l;
  cpu_only.stream_link_blocks = 0;
  const placement_plan q = layout_plan(d, cpu_only, o.links, o.ram_budget, o.prefill_batch);
  MESSAGE("70B at 24G, H100 links: " << m << " FFNs streamed, " << n << " on the link in decode: " << p.decode.tokens_per_second()
                                     << " t/s (the CPU alone " << q.decode.tokens_per_second() << "), prefill "
                                     << p.prefill.tokens_per_second() << " t/s");
  CHECK(p.decode.tokens_per_second() > 1.4 * q.decode.tokens_per_second());
  CHECK(p.prefill.tokens_per_second() > 300);
}

// A RAM budget below the streamed FFNs' host copies: only whole CPU blocks can be disk-backed, so
// --fit must pick a layout whose other RAM (streamed FFNs, head, KV, scratch) plus the disk ring
// fits (the H200's 70B at --gpu-budget 24G --ram-budget 8G chose 36 GiB of streamed FFNs, and the
// engine refused it); with no layout that fits, the error is the disk tier's, naming the budget.
TEST_CASE("layer streaming: --fit under a RAM budget the streamed FFNs exceed picks CPU blocks on disk") {
  const model_demand d = llama_70b();
  const plan_options o{.gpu_budget = 24ull << 30, .ram_budget = 8ull << 30};
  const engine_layout l = plan_engine_layout(d, o);
  CHECK(l.streamed_layers().empty());
  CHECK(l.n_gpu_layers < 80);
  const placement_plan p = layout_plan(d, l, o.links, 1ull << 62, o.prefill_batch);
  const disk_tier t = plan_disk_tier(d, l.n_gpu_layers, {}, o.ram_budget, p.ram_total());
  CHECK_FALSE(t.empty());
  const plan_options tiny{.gpu_budget = 24ull << 30, .ram_budget = 64ull << 20};
  CHECK_THROWS_WITH_AS(plan_engine_layout(d, tiny), doctest::Contains("--ram-budget 64.00 MiB"), strata::error);
}

// Uploads overlap the GPU stage's kernels but not the CPU stage's blocks: with -ngl below the
// block count, a streaming phase pays the upload time the GPU's reads do not cover on top.
TEST_CASE("layer streaming: with CPU blocks the uploads the GPU's work does not hide add to the step") {
  const model_demand d = llama_70b();
  engine_layout l = fixed_layout(d, 50, {}, 0, 10);
  const placement_plan p = layout_plan(d, l, assumed_desktop_links(), 1ull << 40, 512);
  const phase_cost& c = p.decode;
  CHECK(c.upload_s > c.gpu_read_bytes / assumed_desktop_links().gpu_read);
  CHECK(c.seconds_per_token == doctest::Approx(c.chain_s + c.upload_s - c.gpu_read_bytes / assumed_desktop_links().gpu_read));
  CHECK(c.seconds_per_token > std::max(c.chain_s, c.upload_s));
}

// The link's copies in a CPU-phase step (tiers/link_schedule.hpp): each hand-off filled with what
// the link moves while the CPU works, oldest copy first, the rest of a copy on the last hand-off
// before its block, never before the linked block two ranks back (its slot's last reader).
TEST_CASE("layer streaming: the link's copies fill the CPU blocks' hand-offs in slot order") {
  // C L C C L C L: block sizes 1000 (aligned to 10), a CPU block hides 400 bytes of copy.
  std::vector<link_block> b(7, {1000, false, 400});
  b[1].linked = b[4].linked = b[6].linked = true;
  const auto s = schedule_link_copies(b, 10);
  REQUIRE(s.size() == 7);
  // Rank 0 (block 1): only block 0 comes before it, which takes it all.
  REQUIRE(s[0].size() == 1);
  CHECK(s[0][0].block == 1);
  CHECK(s[0][0].bytes == 1000);
  // Rank 1 (block 4, slot 1): blocks 2 and 3; rank 2 (block 6, slot 0 after block 1): 2, 3, 5.
  REQUIRE(s[2].size() == 1);
  CHECK(s[2][0].block == 4);
  CHECK(s[2][0].offset == 0);
  CHECK(s[2][0].bytes == 400);
  REQUIRE(s[3].size() == 1);  // the last hand-off before block 4: the rest, nothing of rank 2 (no room)
  CHECK(s[3][0].block == 4);
  CHECK(s[3][0].offset == 400);
  CHECK(s[3][0].bytes == 600);
  REQUIRE(s[5].size() == 1);
  CHECK(s[5][0].block == 6);
  CHECK(s[5][0].bytes == 1000);
  for (const int linked : {1, 4, 6}) CHECK(s[std::size_t(linked)].empty());
  // With room to spare, each copy goes as early as its slot allows: rank 1 whole on block 2's
  // hand-off (the 5 bytes left there are below the alignment), rank 2 on block 3's.
  for (auto& x : b) x.capacity = 1005;
  const auto t = schedule_link_copies(b, 10);
  REQUIRE(t[2].size() == 1);
  CHECK(t[2][0].block == 4);
  CHECK(t[2][0].bytes == 1000);
  REQUIRE(t[3].size() == 1);
  CHECK(t[3][0].block == 6);
  CHECK(t[3][0].bytes == 1000);
  CHECK(t[5].empty());
  // A linked block first, or three in a row, has no hand-off for its copy.
  std::vector<link_block> first(3, {1000, false, 400});
  first[0].linked = true;
  CHECK_THROWS_WITH_AS(schedule_link_copies(first, 10), doctest::Contains("has no CPU-computed streamed block before it"),
                       strata::error);
}
