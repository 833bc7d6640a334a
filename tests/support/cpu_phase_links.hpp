// Test support: link speeds under which the cost model computes a layout's streamed FFNs on the
// CPU in steps of 2..6 tokens and streams longer ones (the per-phase choice, stream_cpu_tokens),
// so a short run of a fixture model takes both phases.
#pragma once
#include <cstdint>
#include <utility>

#include "strata/tiers/engine_layout.hpp"

namespace strata::test {

// The CPU's flops swept up from 1 MFLOP/s (x1.25) over `base` until T is 2..6: {links, T}, T = 0
// where no speed gives such a T.
inline std::pair<tiers::link_speeds, std::uint32_t> cpu_phase_links(const tiers::model_demand& d, const tiers::engine_layout& layout,
                                                                    tiers::link_speeds base, std::uint32_t n_batch) {
  base.source = "test: the CPU wins steps of a few tokens";
  for (base.cpu_flops = 1e6; base.cpu_flops < 1e15; base.cpu_flops *= 1.25)
    if (const std::uint32_t T = tiers::stream_cpu_tokens(d, layout, base, n_batch); T >= 2 && T <= 6) return {base, T};
  return {base, 0};
}

}  // namespace strata::test
