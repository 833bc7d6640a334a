#include "pinned_copy.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "quant_layout.hpp"
#include "strata/core/error.hpp"
#include "strata/kernels/cpu/thread_pool.hpp"

namespace strata::gpu {

void copy_pinned(std::span<const pinned_copy> copies) {
  struct range {
    const pinned_copy* c;
    std::uint64_t row0, rows;
  };
  constexpr std::uint64_t chunk_bytes = 4ull << 20;  // big enough that a job is mostly copying
  std::vector<range> ranges;
  for (const pinned_copy& c : copies) {
    const std::uint64_t rb = c.t->row_bytes();
    if (rb == 0 || c.bytes % rb != 0 || c.bytes > c.t->data.size())
      throw error("pinned copy of '" + std::string(c.t->name) + "': " + std::to_string(c.bytes) +
                  " bytes are not whole rows of " + std::to_string(rb) + " bytes within its " +
                  std::to_string(c.t->data.size()));
    const std::uint64_t rows = c.bytes / rb, step = std::max<std::uint64_t>(1, chunk_bytes / rb);
    for (std::uint64_t r = 0; r < rows; r += step) ranges.push_back({&c, r, std::min(step, rows - r)});
  }
  if (ranges.empty()) return;
  const unsigned threads = std::min<unsigned>(kernels::cpu::thread_pool::physical_cores(), unsigned(ranges.size()));
  kernels::cpu::thread_pool pool(std::max(1u, threads));
  pool.parallel_for(ranges.size(), 1, [&](std::size_t b, std::size_t e, unsigned) {
    for (std::size_t i = b; i < e; ++i) {
      const range& r = ranges[i];
      const std::uint64_t rb = r.c->t->row_bytes(), at = r.row0 * rb;
      copy_gpu_rows(r.c->t->type, r.c->t->ne[0], r.c->t->data.subspan(at, r.rows * rb), r.c->dst + at);
    }
  });
}

}  // namespace strata::gpu
