// One forward step's input: tokens with their positions and sequence ids, and which rows
// want logits. Positions of a sequence must continue its KV cache (pos == cached length + i).
#pragma once
#include <cstdint>
#include <span>

namespace strata::graph {

struct batch {
  std::span<const std::int32_t> tokens;
  std::span<const std::int32_t> positions;  // per token
  std::span<const std::uint32_t> seq_ids;   // per token
  std::span<const std::uint8_t> logits;     // per token: 1 = produce a logits row (in order)

  std::size_t size() const noexcept { return tokens.size(); }
  std::size_t n_outputs() const noexcept {
    std::size_t n = 0;
    for (auto l : logits) n += l != 0;
    return n;
  }
};

}  // namespace strata::graph
