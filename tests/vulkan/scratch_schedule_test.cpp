// runtime/vulkan/scratch_schedule.hpp: which weights a prompt step's GEMM expands ahead, learned
// from the order the GEMMs are recorded in, and the two slots' alternation.
#include "../../runtime/vulkan/scratch_schedule.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "support/scoped_env.hpp"
#include "vulkan/vk_harness.hpp"

using strata::gpu::scratch_schedule;
using strata::gpu::scratch_unit;

TEST_CASE("scratch schedule: names split into block and role") {
  CHECK(scratch_schedule::split("blk.12.ffn_up.weight") == std::pair<int, std::string_view>{12, "ffn_up.weight"});
  CHECK(scratch_schedule::split("output.weight") == std::pair<int, std::string_view>{-1, "output.weight"});
  CHECK(scratch_schedule::split("blk.x.attn_q.weight").first == -1);
  CHECK(scratch_schedule::split("blk.3").first == -1);
  CHECK(scratch_schedule::split("blk.-1.attn_q.weight").first == -1);
}

TEST_CASE("scratch schedule: block 0's order predicts the next blocks', across the block boundary") {
  scratch_schedule s;
  const char* roles[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_down.weight"};
  std::uint32_t id = 0;
  for (int b = 0; b < 3; ++b)
    for (const char* r : roles) s.add_weight("blk." + std::to_string(b) + "." + r, id++);
  auto name = [&](int b, int r) { return "blk." + std::to_string(b) + "." + roles[r]; };
  CHECK_FALSE(s.next(name(0, 0)));  // nothing learned yet
  for (int r = 0; r < 5; ++r) s.multiplied(name(0, r));
  using ids = std::pair<std::uint32_t, std::uint32_t>;
  CHECK(s.next(name(1, 0)) == ids{6u, ~0u});  // blk.1.attn_q -> blk.1.attn_k
  CHECK(s.next(name(2, 3)) == ids{14u, ~0u});
  CHECK_FALSE(s.next(name(1, 4)));  // the block boundary is not seen yet
  s.multiplied(name(1, 0));
  CHECK(s.next(name(1, 4)) == ids{10u, ~0u});  // blk.1.ffn_down -> blk.2.attn_q
  CHECK_FALSE(s.next(name(2, 4)));            // blk.3 does not exist
  // A new step's recording forgets the previous weight, not the order.
  s.restart();
  s.multiplied(name(0, 0));
  CHECK(s.next(name(0, 4)) == ids{5u, ~0u});
}

TEST_CASE("scratch schedule: a gate/up pair multiplied as one GEMM is predicted with its up weight") {
  scratch_schedule s;
  std::uint32_t id = 0;
  for (int b = 0; b < 2; ++b)
    for (const char* r : {"attn_output.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"})
      s.add_weight("blk." + std::to_string(b) + "." + r, id++);
  s.multiplied("blk.0.attn_output.weight");
  s.multiplied("blk.0.ffn_gate.weight", "blk.0.ffn_up.weight");
  s.multiplied("blk.0.ffn_down.weight");
  using ids = std::pair<std::uint32_t, std::uint32_t>;
  CHECK(s.next("blk.1.attn_output.weight") == ids{5u, 6u});
  CHECK(s.next("blk.1.ffn_gate.weight") == ids{7u, ~0u});
}

TEST_CASE("scratch schedule: a GEMM takes the slot prepared for exactly its rows, else expands its own") {
  scratch_schedule s;
  s.set_slots(7, 9);
  const scratch_unit a{1, 0, 128}, b{1, 128, 128}, c{2, 0, 256};
  auto [sa, ea] = s.take(a);
  CHECK(ea);
  CHECK(s.prepare(b) != sa);  // the other slot
  auto [sb, eb] = s.take(b);
  CHECK_FALSE(eb);
  CHECK(sb != sa);
  CHECK(s.prepare(c) == sa);  // alternates back
  const scratch_unit c_other{2, 0, 128};
  auto [sc, ec] = s.take(c_other);  // a wrong guess: expanded again, never read as c
  CHECK(ec);
  CHECK(sc == sb);
  auto [sc2, ec2] = s.take(c);  // the guess was dropped by the miss
  CHECK(ec2);
  CHECK(sc2 == sa);
  s.prepare(a);
  s.restart();
  CHECK(s.take(a).second);  // a new step relies on nothing prepared before
}

#ifdef STRATA_HAS_VULKAN
namespace scratch_ahead_case {  // named: the suite builds as unity TUs
namespace vkt = strata::test::vk;
using namespace strata;

// Three dense FFN blocks (x += down(silu(gate x) * up x)) in one prompt step whose GEMMs all go
// through the f16 scratch (STRATA_VK_MM3_SCRATCH_MIN=16): outputs, dispatches and the GEMMs that
// found their weights expanded ahead, with `ahead` slots on or off.
struct chain_run {
  std::vector<float> out;
  std::uint32_t dispatches = 0;
  std::uint64_t hits = 0;
  bool tensor_cores = false;
  bool fused = false;  // gate, up and the SwiGLU as one GEMM
};
constexpr std::uint32_t E = 256, F = 512, tokens = 160, table_rows = 32, blocks = 3;

chain_run run_chain(const vkt::weight_store::infos& w, const gguf::tensor_info& table, const char* ahead,
                    const char* tok_fast = "0") {
  // No f16 weight copies (a backend's default makes them where the GPU has room, and the GEMMs
  // would then read those instead of the scratch this case is about).
  const test::scoped_env scratch("STRATA_VK_MM3_SCRATCH_MIN", "16"), slots("STRATA_VK_MM3_AHEAD", ahead),
      grid("STRATA_VK_MM3_TOKFAST", tok_fast), copies("STRATA_VK_F16_COPIES", "0");
  gpu::backend be;
  chain_run r;
  r.tensor_cores = be.tensor_core_matmul(gguf::type_id::q4_k, E, tokens);
  const auto xt = be.load(table);
  std::vector<gpu::weight> mats;
  for (const auto* t : w) mats.push_back(be.load(*t));
  const auto x = be.alloc(tokens, E), g = be.alloc(tokens, F), u = be.alloc(tokens, F), o = be.alloc(tokens, E);
  be.reserve(tokens, 0);
  auto kv = be.make_kv(vkt::small_kv());
  r.fused = be.fused_swiglu_gemm(gguf::type_id::q4_k, E, F, tokens);  // once the scratch is sized
  auto b = vkt::batch_data::rows(tokens);
  for (std::uint32_t i = 0; i < tokens; ++i) b.tokens[i] = std::int32_t((7 * i + 3) % table_rows);
  const std::uint64_t before = be.scratch_hits();
  r.out = vkt::run_step(be, b, [&] {
    const auto xv = x.view(tokens), gv = g.view(tokens), uv = u.view(tokens), ov = o.view(tokens);
    be.embed(xt, xv);
    for (std::uint32_t blk = 0; blk < blocks; ++blk) {
      be.matmul(mats[3 * blk], xv, gv);
      be.matmul(mats[3 * blk + 1], xv, uv);
      be.swiglu(gv, uv, gv);
      be.matmul(mats[3 * blk + 2], gv, ov);
      be.add(xv, ov, xv);
    }
    return xv;
  });
  r.hits = be.scratch_hits() - before;
  r.dispatches = be.dispatches_per_step();
  return r;
}
}  // namespace scratch_ahead_case

TEST_CASE("vulkan scratch ahead: GEMMs reading weights expanded under the previous GEMM equal the one-slot path bit for bit") {
  using namespace scratch_ahead_case;
  // Declarations, not only the directive: they hide other files' names in a unity TU.
  using scratch_ahead_case::E, scratch_ahead_case::F, scratch_ahead_case::table_rows, scratch_ahead_case::blocks;
  if (!vkt::available()) return;
  std::mt19937 rng(4242);
  vkt::weight_store store;
  const auto xs = vkt::normal_floats(std::size_t(table_rows) * E, rng);
  const auto& table = store.add_f32("test.x", xs, E, table_rows);
  vkt::weight_store::infos w;
  for (std::uint32_t blk = 0; blk < blocks; ++blk) {
    const std::string p = "blk." + std::to_string(blk) + ".";
    w.push_back(&store.add(p + "ffn_gate.weight", gguf::type_id::q4_k, vkt::make_weight(gguf::type_id::q4_k, F, E, rng, 0.05f).bytes, E, F));
    w.push_back(&store.add(p + "ffn_up.weight", gguf::type_id::q4_k, vkt::make_weight(gguf::type_id::q4_k, F, E, rng, 0.05f).bytes, E, F));
    w.push_back(&store.add(p + "ffn_down.weight", gguf::type_id::q6_k, vkt::make_weight(gguf::type_id::q6_k, E, F, rng, 0.05f).bytes, F, E));
  }
  // Whole matrices, then slots of 128 KiB (64 Ki halves: every matrix in two slices of 256 / 128 rows).
  for (const char* slot_kb : {"", "128"}) {
    const std::string slot_name = *slot_kb ? slot_kb : "whole";
    CAPTURE(slot_name);
    std::optional<test::scoped_env> small;
    if (*slot_kb) small.emplace("STRATA_VK_SCRATCH_SLOT_KB", slot_kb);
    const chain_run one = run_chain(w, table, "0"), two = run_chain(w, table, "1");
    if (!two.tensor_cores) {
      MESSAGE("no tensor-core GEMM on this device: the scratch is not used");
      CHECK(two.hits == 0);
      continue;
    }
    CHECK(one.hits == 0);
    // Block 0 teaches the order, block 1's first GEMM the step across blocks; then every GEMM
    // finds its rows expanded. Gate and up as one SwiGLU GEMM (mm3_swiglu_ok) over both in one
    // slot: block 1's down and block 2's pair and down, and every part after a pair's first (a
    // slot sized for the largest matrix holds 256 rows of each, the small one 128) and every
    // slice after a down's first (small slot: two). Apart: block 1's up and down and all of
    // block 2's; with slices, every second slice.
    CAPTURE(two.fused);
    if (two.fused) CHECK(two.hits == (*slot_kb ? 3u + 3u * 3u + 3u : 3u + 3u));
    else CHECK(two.hits == (*slot_kb ? 5u + 9u : 5u));
    CHECK(two.dispatches == one.dispatches);  // no expansion wasted, none repeated
    CHECK(two.out == one.out);
    // Token tiles fastest in the grid (TOK_FAST) changes which workgroup runs when, not a sum.
    const chain_run tf = run_chain(w, table, "1", "2");
    CHECK(tf.out == one.out);
    // Nor do the prompt steps' fusions (STRATA_VK_MM_FUSE=1 turns them off): gate, up and the
    // SwiGLU as one GEMM, the residual add in the down GEMM's store.
    chain_run apart;
    {
      const test::scoped_env fuse("STRATA_VK_MM_FUSE", "1");
      apart = run_chain(w, table, "1");
    }
    // (Fewer dispatches with whole matrices; with the small slot each of a pair's parts takes
    // two expansions, more than the separate GEMMs' slices and SwiGLU save.)
    if (!*slot_kb) CHECK(apart.dispatches > two.dispatches);
    CHECK(apart.out == one.out);
  }
}
#endif
