// The per-kernel table of `--profile` (strata-bench, batched_bench): GPU time per token and, for
// kernels that read model weights, the weight bytes they bound per token and the rate that makes
// (the roofline figure for matmuls: 3.1 TB/s is what a plain compute shader reads on the H100).
// Expert matmuls bind every expert of a layer and read only the routed ones, so their rate is an
// upper bound (marked "<=").
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "strata/runtime/engine.hpp"

namespace strata::bench {

inline void print_kernel_profile(const std::vector<rt::model::kernel_time>& prof, double tokens, const std::string& title) {
  double total = 0;
  for (const auto& k : prof) total += k.total_ms;
  std::fprintf(stderr, "\nprofile %s: %.3f ms GPU per token\n", title.c_str(), total / tokens);
  std::fprintf(stderr, "  %-40s %10s %10s %6s %12s %12s\n", "kernel", "calls/tok", "ms/tok", "share", "weight MB/tok",
               "weight GB/s");
  for (const auto& k : prof) {
    std::fprintf(stderr, "  %-40s %10.2f %10.4f %5.1f%%", k.label.c_str(), double(k.calls) / tokens, k.total_ms / tokens,
                 100.0 * k.total_ms / total);
    if (k.weight_bytes > 0 && k.total_ms > 0) {
      const bool experts = k.label.find("MOE") != std::string::npos;
      std::fprintf(stderr, " %12.2f %s%10.1f", k.weight_bytes / tokens / 1e6, experts ? "<=" : "  ",
                   k.weight_bytes / (k.total_ms * 1e6));
    }
    std::fprintf(stderr, "\n");
  }
}

}  // namespace strata::bench
