// Persistent worker threads for the CPU backend. parallel_for() hands a non-owning job to the
// workers and the caller, which split [0, n) dynamically with an atomic counter, then waits.
// No allocation and no mutex per call: workers sleep on an atomic generation counter
// (std::atomic::wait, a futex on Linux) after a short spin, so back-to-back ops stay hot.
#pragma once
#include <atomic>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "strata/core/function_ref.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#else
#define STRATA_CPU_RELAX() ((void)0)
#endif

namespace strata::kernels::cpu {

class thread_pool {
 public:
  // Job: (begin, end, thread index) over a chunk of [0, n).
  using job = function_ref<void(std::size_t, std::size_t, unsigned)>;

  explicit thread_pool(unsigned n_threads) : n_threads_(n_threads ? n_threads : 1) {
    workers_.reserve(n_threads_ - 1);
    for (unsigned i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& w : workers_) w.join();
  }

  unsigned size() const noexcept { return n_threads_; }

  // Runs f over [0, n) in chunks of `grain` items; returns when every chunk is done.
  void parallel_for(std::size_t n, std::size_t grain, job f) {
    if (n == 0) return;
    if (grain == 0) grain = 1;
    if (n_threads_ == 1 || n <= grain) {
      f(0, n, 0);
      return;
    }
    job_ = &f;
    n_ = n;
    grain_ = grain;
    next_.store(0, std::memory_order_relaxed);
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    run_chunks(0);
    while (pending_.load(std::memory_order_acquire) != 0) STRATA_CPU_RELAX();
    job_ = nullptr;
  }

  // Physical cores (hyper-threads share execution units; matmul is bound by them).
  static unsigned physical_cores() {
    const unsigned logical = std::thread::hardware_concurrency();
    unsigned cores = 0;
    // Count distinct (physical id, core id) pairs from /proc/cpuinfo; fall back to logical.
    if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
      char line[256];
      int phys = 0;
      std::vector<std::uint64_t> seen;
      while (std::fgets(line, sizeof line, f)) {
        int v = 0;
        if (std::sscanf(line, "physical id : %d", &v) == 1) phys = v;
        if (std::sscanf(line, "core id : %d", &v) == 1) {
          const std::uint64_t key = (std::uint64_t(phys) << 32) | unsigned(v);
          bool found = false;
          for (auto s : seen) found |= s == key;
          if (!found) seen.push_back(key);
        }
      }
      std::fclose(f);
      cores = unsigned(seen.size());
    }
    return cores ? cores : (logical ? logical : 1);
  }

 private:
  void run_chunks(unsigned tid) {
    const job& f = *job_;
    for (;;) {
      const std::size_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
      if (begin >= n_) break;
      f(begin, begin + grain_ < n_ ? begin + grain_ : n_, tid);
    }
  }

  void worker_loop(unsigned tid) {
    std::uint64_t seen = 0;
    for (;;) {
      // Spin briefly (ops follow each other within microseconds), then sleep on the counter.
      std::uint64_t g = generation_.load(std::memory_order_acquire);
      for (int spin = 0; g == seen && spin < 20000; ++spin) {
        STRATA_CPU_RELAX();
        g = generation_.load(std::memory_order_acquire);
      }
      while (g == seen) {
        generation_.wait(seen, std::memory_order_acquire);
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_.load(std::memory_order_relaxed)) return;
      run_chunks(tid);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  unsigned n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> next_{0};
  std::atomic<unsigned> pending_{0};
  const job* job_ = nullptr;
  std::size_t n_ = 0;
  std::size_t grain_ = 1;
};

}  // namespace strata::kernels::cpu
