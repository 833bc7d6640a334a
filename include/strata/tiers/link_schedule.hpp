// Where the link's copies run in a step that computes the streamed dense FFNs on the CPU but for
// a few the link carries (engine_layout::stream_link_blocks; runtime/vulkan/layer_stream.cpp):
// each copy rides the hand-offs of CPU-computed blocks, running while the CPU computes them, and
// a hand-off lasts the longer of the two. A linked block's copy may start once the slot it fills
// (ring slot rank % 2) is free, i.e. after the linked block two ranks back, and must land before
// its own block. The schedule fills each hand-off up to what the link moves during its CPU work,
// oldest copy first, and puts what is left of a copy on the last hand-off before its block. The
// cost model and the backend share it, so the prediction prices the copies as they are recorded.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::tiers {

struct link_block {
  std::uint64_t bytes = 0;  // the block's dense FFN as it fills a ring slot
  bool linked = false;      // the link carries it; else the CPU computes it
  double capacity = 0;      // CPU blocks: bytes the link moves while the CPU computes this one
};

struct link_piece {
  std::uint32_t block = 0;  // the linked block (index into the blocks given)
  std::uint64_t offset = 0, bytes = 0;
};

// Per block, the pieces its hand-off carries (empty for linked blocks). Pieces start at multiples
// of `align`. Throws where a linked block has no CPU-computed block since the one two ranks back
// (the first streamed block linked, or three linked in a row).
inline std::vector<std::vector<link_piece>> schedule_link_copies(std::span<const link_block> blocks, std::uint64_t align) {
  std::vector<std::vector<link_piece>> out(blocks.size());
  std::vector<std::uint32_t> links;  // linked blocks by rank
  for (std::uint32_t j = 0; j < blocks.size(); ++j)
    if (blocks[j].linked) links.push_back(j);
  std::vector<std::uint64_t> done(links.size(), 0);  // bytes of each copy scheduled
  std::vector<std::uint32_t> next_cpu(blocks.size() + 1, std::uint32_t(blocks.size()));  // the first CPU block after j
  for (std::uint32_t j = std::uint32_t(blocks.size()); j-- > 0;)
    next_cpu[j] = j + 1 < blocks.size() && !blocks[j + 1].linked ? j + 1 : next_cpu[j + 1];
  std::size_t first = 0;  // linked blocks passed: the rank of the next one, and the oldest copy that may be incomplete
  for (std::uint32_t j = 0; j < blocks.size(); ++j) {
    if (blocks[j].linked) {
      const std::size_t r = first;  // every earlier copy is complete (checked at its block), so this is j's rank
      if (done[r] < blocks[j].bytes)
        throw error("--stream-link: streamed block " + std::to_string(j) + " (linked rank " + std::to_string(r) +
                    ") has no CPU-computed streamed block before it since the linked block two ranks back, so its copy "
                    "has no hand-off to run in");
      first = r + 1;
      continue;
    }
    // Copies whose slot is free here: rank r once the block of rank r - 2 has run (it precedes j).
    double room = blocks[j].capacity;
    for (std::size_t r = first; r < links.size() && (r < 2 || links[r - 2] < j); ++r) {
      const std::uint64_t left = blocks[links[r]].bytes - done[r];
      if (!left) continue;
      // The last CPU block before the linked one takes whatever is left of its copy.
      const bool last_chance = next_cpu[j] > links[r];
      std::uint64_t take = last_chance ? left : std::min<std::uint64_t>(left, std::uint64_t(std::max(0.0, room)));
      if (take < left) take = take / align * align;
      if (!take) continue;
      out[j].push_back({links[r], done[r], take});
      done[r] += take;
      room -= double(take);
    }
  }
  return out;
}

}  // namespace strata::tiers
