// Which tensors of the CPU's decoder blocks are disk-backed (issue 14 item 5): read from the
// model file every step into a ring of block slots (runtime/tiers/block_stream.hpp) instead of
// staying in RAM. `-ot REGEX=disk` rules force tensors of CPU blocks there; then, when the CPU's
// weights, KV and scratch exceed the RAM budget, whole blocks from the last CPU block down go to
// disk until the resident blocks plus the ring fit: RAM is the cache for the drive, the blocks
// that fit stay resident and the rest stream. Only blocks (blk.N.*) stream; the embedding, the
// output norm and the head stay resident (a rule sending them to disk is an error).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"
#include "strata/tiers/demand.hpp"
#include "strata/tiers/overrides.hpp"

namespace strata::tiers {

inline constexpr std::uint32_t disk_ring_slots = 2;

struct disk_tier {
  std::vector<char> on_disk;       // parallel to model_demand::tensors
  std::uint64_t disk_bytes = 0;    // read from the drive per step
  std::uint64_t slot_bytes = 0;    // the largest disk-backed block, with O_DIRECT alignment
  std::uint32_t slots = 0;         // ring slots (at most the number of disk-backed blocks)
  std::vector<std::uint32_t> blocks;  // blocks with disk-backed tensors, ascending
  bool forced_by_rule = false;     // a -ot ...=disk rule put tensors there
  std::uint64_t ring_bytes() const noexcept { return slot_bytes * slots; }
  bool empty() const noexcept { return blocks.empty(); }
};

namespace detail {
// Aligned bytes of one block's disk-backed tensors in a slot: each tensor may add a page at each
// end (the reader reads 4 KiB-aligned spans).
inline std::uint64_t slot_estimate(std::uint64_t bytes, std::uint64_t tensors) { return bytes + tensors * 8192; }
}  // namespace detail

// The CPU runs blocks [first_cpu_block, d.n_layer). `ram_total` is what the layout keeps in RAM
// with every tensor resident (weights, KV, scratch: placement_plan::ram_total()); `ram_budget`
// the cap. Throws naming the budget when even every CPU block on disk does not fit, and naming the
// rule and tensor when a disk rule matches a tensor that is not in a CPU block.
inline disk_tier plan_disk_tier(const model_demand& d, std::uint32_t first_cpu_block,
                                const std::vector<override_rule>& rules, std::uint64_t ram_budget,
                                std::uint64_t ram_total, std::uint32_t slots = disk_ring_slots) {
  disk_tier out;
  out.on_disk.assign(d.tensors.size(), 0);
  const auto cpu_block = [&](const tensor_demand& t) {
    return t.layer >= 0 && std::uint32_t(t.layer) >= first_cpu_block && std::uint32_t(t.layer) < d.n_layer;
  };
  std::uint64_t cpu_block_bytes = 0;
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    const tensor_demand& t = d.tensors[i];
    if (cpu_block(t)) cpu_block_bytes += t.bytes;
    for (const override_rule& r : rules) {
      if (!std::regex_search(t.name, r.regex)) continue;
      if (r.where == forced_tier::disk) {
        if (t.layer < 0)
          throw error("override '" + r.pattern + "=disk' matches '" + t.name +
                      "': only tensors of decoder blocks (blk.N.*) can be disk-backed");
        if (cpu_block(t)) out.on_disk[i] = 1, out.forced_by_rule = true;
      }
      break;  // the first matching rule decides (GPU blocks' rules are the layout's: engine_layout.hpp)
    }
  }
  const std::uint64_t other = ram_total - std::min(ram_total, cpu_block_bytes);  // KV, scratch, non-block weights
  // Sizes per block of what is on disk, and the RAM the choice needs: resident tensors + ring.
  std::vector<std::uint64_t> disk_b(d.n_layer, 0), disk_n(d.n_layer, 0);
  const auto needed = [&] {
    std::fill(disk_b.begin(), disk_b.end(), 0);
    std::fill(disk_n.begin(), disk_n.end(), 0);
    std::uint64_t resident = 0;
    for (std::size_t i = 0; i < d.tensors.size(); ++i) {
      const tensor_demand& t = d.tensors[i];
      if (!cpu_block(t)) continue;
      if (out.on_disk[i]) disk_b[std::size_t(t.layer)] += t.bytes, ++disk_n[std::size_t(t.layer)];
      else resident += t.bytes;
    }
    std::uint64_t slot = 0;
    std::uint32_t n_blocks = 0;
    for (std::uint32_t il = 0; il < d.n_layer; ++il)
      if (disk_n[il]) slot = std::max(slot, detail::slot_estimate(disk_b[il], disk_n[il])), ++n_blocks;
    out.slot_bytes = slot;
    out.slots = std::min(slots, n_blocks);
    return other + resident + out.ring_bytes();
  };
  std::uint32_t il = d.n_layer;
  while (needed() > ram_budget) {
    if (il == first_cpu_block)
      throw error("--ram-budget " + format_byte_size(ram_budget) + " does not hold the CPU's KV cache, scratch and " +
                  "resident weights (" + format_byte_size(other) + ") plus the disk tier's ring (" +
                  std::to_string(out.slots) + " slots of " + format_byte_size(out.slot_bytes) +
                  ") even with every CPU block on disk; raise --ram-budget or --gpu-budget, or lower -c");
    --il;  // the last resident block goes to disk whole
    for (std::size_t i = 0; i < d.tensors.size(); ++i)
      if (d.tensors[i].layer == std::int32_t(il)) out.on_disk[i] = 1;
  }
  for (std::uint32_t b = 0; b < d.n_layer; ++b)
    if (disk_n[b]) out.blocks.push_back(b), out.disk_bytes += disk_b[b];
  return out;
}

}  // namespace strata::tiers
