// The disk tier's choice (tiers/disk_tier.hpp): which CPU blocks stream from the drive under a
// RAM budget (the last ones, whole, until the resident blocks plus the ring fit), -ot ...=disk
// rules, and the errors for budgets and rules it cannot honour.
#include <doctest/doctest.h>

#include <vector>

#include "strata/tiers/disk_tier.hpp"
#include "strata/tiers/engine_layout.hpp"
#include "synthetic_demand.hpp"

using namespace strata::tiers;

namespace {
// RAM with every tensor of blocks [first, n) resident, plus the embedding and head (always
// resident), KV and scratch.
std::uint64_t all_resident(const model_demand& d, std::uint32_t first) {
  std::uint64_t b = d.scratch_bytes + std::uint64_t(d.n_layer - first) * d.kv_bytes_per_layer;
  for (const auto& t : d.tensors)
    if (t.layer < 0 || std::uint32_t(t.layer) >= first) b += t.bytes;
  return b;
}
std::vector<std::uint32_t> iota_blocks(std::uint32_t a, std::uint32_t b) {
  std::vector<std::uint32_t> v;
  for (std::uint32_t i = a; i < b; ++i) v.push_back(i);
  return v;
}
}  // namespace

TEST_CASE("disk tier: nothing streams when the CPU side fits the budget") {
  const model_demand d = synthetic(8, 20, 60);
  const std::uint64_t total = all_resident(d, 0);
  const disk_tier t = plan_disk_tier(d, 0, {}, total, total);
  CHECK(t.empty());
  CHECK(t.disk_bytes == 0);
  CHECK(t.ring_bytes() == 0);
  for (char c : t.on_disk) CHECK(c == 0);
}

TEST_CASE("disk tier: a budget short of the model streams the last blocks, whole, and counts the ring") {
  const model_demand d = synthetic(8, 20, 60);  // 80 MiB + 32 KiB per block
  const std::uint64_t total = all_resident(d, 0), block = 80 * MiB + (32 << 10);
  // 3 blocks' worth short (less 1 MiB): moving blocks saves a block each but the ring costs up
  // to 2 (+ the alignment allowance), so 5 blocks stream.
  const std::uint64_t budget = total - 3 * block + MiB;
  const disk_tier t = plan_disk_tier(d, 0, {}, budget, total);
  CHECK(t.blocks == iota_blocks(3, 8));
  CHECK(t.slots == 2);
  CHECK(t.disk_bytes == 5 * block);
  CHECK(t.slot_bytes >= block);
  CHECK(t.slot_bytes <= block + 8 * 8192);
  CHECK(total - t.disk_bytes + t.ring_bytes() <= budget);
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    CAPTURE(d.tensors[i].name);
    CHECK(bool(t.on_disk[i]) == (d.tensors[i].layer >= 3));
  }
  // Only the CPU's blocks stream: with 4 GPU blocks, the rest of the CPU side is blocks 4-7.
  const std::uint64_t cpu_total = all_resident(d, 4);
  const disk_tier g = plan_disk_tier(d, 4, {}, cpu_total - block + MiB, cpu_total);
  CHECK(g.blocks == iota_blocks(5, 8));
}

TEST_CASE("disk tier: -ot REGEX=disk forces tensors of CPU blocks, first matching rule wins") {
  const model_demand d = synthetic(4, 20, 60);
  std::vector<override_rule> rules;
  parse_override_rules(R"(blk\.2\.ffn_up=cpu,blk\.[12]\.ffn_=disk,blk\.0\.=gpu)", rules);
  const disk_tier t = plan_disk_tier(d, 0, rules, ~0ull >> 2, all_resident(d, 0));
  CHECK(t.forced_by_rule);
  CHECK(t.blocks == std::vector<std::uint32_t>{1, 2});
  CHECK(t.slots == 2);
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    const auto& n = d.tensors[i].name;
    CAPTURE(n);
    const bool want = (n.starts_with("blk.1.ffn_") || n.starts_with("blk.2.ffn_")) && n != "blk.2.ffn_up.weight";
    CHECK(bool(t.on_disk[i]) == want);
  }
  // One block: one slot.
  rules.clear();
  parse_override_rules(R"(blk\.3\.=disk)", rules);
  CHECK(plan_disk_tier(d, 0, rules, ~0ull >> 2, all_resident(d, 0)).slots == 1);
  // A rule on a GPU block's tensor is the layout's business, not the disk tier's.
  CHECK(plan_disk_tier(d, 4, rules, ~0ull >> 2, all_resident(d, 4)).empty());
}

TEST_CASE("disk tier: refusals name the budget or the rule and tensor") {
  const model_demand d = synthetic(4, 20, 60);
  const std::uint64_t total = all_resident(d, 0);
  // The embedding and head (200 MiB) stay resident: a budget below them plus the ring fails.
  CHECK_THROWS_WITH_AS(plan_disk_tier(d, 0, {}, 150 * MiB, total),
                       doctest::Contains("--ram-budget 150.00 MiB does not hold"), strata::error);
  CHECK_THROWS_WITH_AS(plan_disk_tier(d, 0, {}, 150 * MiB, total), doctest::Contains("even with every CPU block on disk"),
                       strata::error);
  std::vector<override_rule> rules;
  parse_override_rules("output=disk", rules);
  CHECK_THROWS_WITH_AS(plan_disk_tier(d, 0, rules, total, total),
                       doctest::Contains("override 'output=disk' matches 'output_norm.weight'"), strata::error);
}

TEST_CASE("disk tier: GPU layouts let disk rules through for CPU blocks only") {
  const model_demand d = synthetic(4, 20, 60);
  std::vector<override_rule> rules;
  parse_override_rules(R"(blk\.3\.attn_q=disk)", rules);
  CHECK_NOTHROW(fixed_layout(d, 3, rules));  // block 3 runs on the CPU
  CHECK_THROWS_WITH_AS(fixed_layout(d, 4, rules), doctest::Contains("'blk.3.attn_q.weight'"), strata::error);
}
