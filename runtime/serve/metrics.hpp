// Server-side counters and the Prometheus text exposition of /metrics (docs/spec/api.md §5):
// requests by endpoint and status, plus the scheduler's token, queue, KV and prefix-cache
// numbers. Updated once per request, never per token.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "strata/runtime/scheduler.hpp"

namespace strata::serve {

class server_metrics {
 public:
  void count_request(const std::string& endpoint, int status) {
    std::lock_guard lk(mu_);
    ++requests_[{endpoint, status}];
  }
  void add_ttft(double seconds) {
    std::lock_guard lk(mu_);
    ttft_sum_ += seconds;
    ++ttft_count_;
  }
  // Prometheus text format 0.0.4; every family has HELP and TYPE, the text ends with '\n'.
  std::string render(const rt::scheduler_stats& s, std::uint32_t slots) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  double ttft_sum_ = 0;
  std::uint64_t ttft_count_ = 0;
};

}  // namespace strata::serve
