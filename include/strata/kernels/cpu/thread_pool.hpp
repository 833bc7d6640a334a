// Persistent worker threads for the CPU backend. parallel_for() hands a non-owning job to the
// workers and the caller, which split [0, n) dynamically, then waits for the chunks, not for
// the workers: a worker that the OS has not scheduled yet (a box with more runnable threads than
// cores) is simply not waited for, and finds nothing left when it wakes. Chunks are claimed by a
// compare-and-swap on one word holding (job generation, next index), so a late worker can never
// take a chunk of a later job with the previous job's function. No allocation and no mutex per
// call: idle workers spin briefly, then sleep on the generation counter; the caller spins, then
// sleeps on the done count while another thread finishes its last chunk. Sleeping is a futex on
// the 32-bit word itself (the kernel compares the word before sleeping, so a wake-up can only be
// missed by a thread that then sees the new value), not std::atomic::wait, which libstdc++ runs
// through a shared proxy counter for the 64-bit words the pool used to have. While a hot_scope
// is open the workers (and the caller's wait) spin without a time limit instead of sleeping:
// for a caller whose short jobs come a few hundred microseconds apart with the host waiting on
// something else in between (the Vulkan backend's hand-offs within one step), where each
// futex wake-up would cost more than the job's barrier.
#pragma once
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "strata/core/function_ref.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#else
#define STRATA_CPU_RELAX() ((void)0)
#endif

namespace strata::kernels::cpu {

namespace detail {
static_assert(sizeof(std::atomic<std::uint32_t>) == 4 && std::atomic<std::uint32_t>::is_always_lock_free);
// Sleeps while w holds `expected` (may return early: callers re-check).
inline void futex_wait(std::atomic<std::uint32_t>& w, std::uint32_t expected) noexcept {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&w), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
#else
  w.wait(expected, std::memory_order_seq_cst);
#endif
}
inline void futex_wake_all(std::atomic<std::uint32_t>& w) noexcept {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&w), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
#else
  w.notify_all();
#endif
}
}  // namespace detail

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
    generation_.fetch_add(1, std::memory_order_seq_cst);
    detail::futex_wake_all(generation_);
    for (auto& w : workers_) w.join();
  }

  unsigned size() const noexcept { return n_threads_; }

  // Keeps the workers spinning between jobs (no sleep) while at least one scope is open, and
  // wakes the sleeping ones when the first opens, so they are spinning by the first job. Open
  // and close it on the thread that calls parallel_for. The workers go back to spinning briefly,
  // then sleeping, once the last scope closes.
  class hot_scope {
   public:
    explicit hot_scope(thread_pool* p) noexcept : p_(p) {
      if (p_) p_->enter_hot();
    }
    ~hot_scope() {
      if (p_) p_->hot_.fetch_sub(1, std::memory_order_seq_cst);
    }
    hot_scope(const hot_scope&) = delete;
    hot_scope& operator=(const hot_scope&) = delete;

   private:
    thread_pool* p_;
  };
  bool hot() const noexcept { return hot_.load(std::memory_order_relaxed) != 0; }

  // Whether each thread counts its finished items into the shared done count once per job
  // (when it finds no item left) rather than once per item: one write to that line per thread
  // and job instead of one per item, which with many threads and small items (a decode step's)
  // was as many contended atomics as claims. The caller still returns only when every item is
  // done. Off by default (STRATA_CPU_POOL_BATCHED_DONE=1 in the engine turns it on): a worker
  // preempted between two items holds finished work uncounted and the caller waits for it, and
  // no 16-thread measurement has yet shown the gain that would pay for that on a busy machine.
  // Set between jobs (before the first), from the thread that calls parallel_for.
  void set_batched_done(bool on) noexcept { batched_done_.store(on, std::memory_order_relaxed); }
  bool batched_done() const noexcept { return batched_done_.load(std::memory_order_relaxed); }

  // Runs f over [0, n) in chunks of `grain` items; returns when every chunk is done. f(b, e,
  // tid) runs on the caller (tid 0) or a worker (tid 1..size()-1), never on two threads with the
  // same tid at once.
  void parallel_for(std::size_t n, std::size_t grain, job f) {
    if (n == 0) return;
    if (grain == 0) grain = 1;
    // The claim word keeps the index in its low 32 bits; nothing in the backend comes near.
    if (n_threads_ == 1 || n <= grain || n >= index_mask) {
      f(0, n, 0);
      return;
    }
    const std::uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
    const std::uint32_t n32 = std::uint32_t(n);
    // Close the claim word first: a worker late from the previous job may hold that job's last
    // claim word (every index taken) and read this job's n_, grain_ or job_; had the word still
    // been the old one, its CAS would succeed and run this job's function (or the previous job's,
    // by then a dangling reference) on indices claimed again later, and done_ would overshoot n
    // (found on a 16-core host: done_ = n + 1 with every thread asleep, and SIGSEGVs). Reading
    // any of the new values (acquire) makes the closed word visible to that CAS, which fails.
    claim_.store((std::uint64_t(g) << 32) | index_mask, std::memory_order_relaxed);
    job_.store(&f, std::memory_order_release);
    n_.store(n, std::memory_order_release);
    grain_.store(grain, std::memory_order_release);
    done_.store(0, std::memory_order_relaxed);
    claim_.store(std::uint64_t(g) << 32, std::memory_order_release);
    // seq_cst store, then the sleepers count: a worker counts itself before its last look at the
    // generation, so either it sees g or we see it and wake it.
    generation_.store(g, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst)) detail::futex_wake_all(generation_);
    caller_asleep_.store(false, std::memory_order_relaxed);
    run_chunks(g, 0);
    const bool hot = hot_.load(std::memory_order_relaxed) != 0;
    for (int spin = 0; done_.load(std::memory_order_acquire) != n32 && (hot || spin < caller_spins); ++spin) STRATA_CPU_RELAX();
    // A chunk still running belongs to a worker that may have been descheduled mid-chunk: sleep
    // until the last chunk's thread wakes us instead of burning the time slice it needs. The
    // flag and done_ are seq_cst on both sides, so either we see the last chunk done or its
    // thread sees the flag and notifies.
    caller_asleep_.store(true, std::memory_order_seq_cst);
    for (std::uint32_t d = done_.load(std::memory_order_seq_cst); d != n32; d = done_.load(std::memory_order_seq_cst))
      detail::futex_wait(done_, d);
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
  static constexpr std::uint64_t index_mask = 0xFFFFFFFFull;
  static constexpr int caller_spins = 4000, worker_spins = 4000;

  // Takes chunks of job generation g until none is left or the job is no longer g's. The CAS
  // validates what was read before it: job_, n_ and grain_ are g's as long as the claim word is
  // still (g, begin); a later job closes the word before it replaces any of them (parallel_for).
  void run_chunks(std::uint32_t g, unsigned tid) {
    const bool batched = batched_done_.load(std::memory_order_relaxed);
    std::uint32_t finished = 0;  // items run and not yet counted in done_ (batched)
    std::size_t n_g = 0;         // job g's item count, as read before a successful claim
    std::uint64_t cur = claim_.load(std::memory_order_acquire);
    for (;;) {
      if (std::uint32_t(cur >> 32) != g) break;
      const std::size_t begin = std::size_t(cur & index_mask);
      const std::size_t n = n_.load(std::memory_order_acquire);
      const std::size_t grain = grain_.load(std::memory_order_acquire);
      const job* f = job_.load(std::memory_order_acquire);
      if (begin >= n) break;
      const std::size_t end = begin + grain < n ? begin + grain : n;
      if (!claim_.compare_exchange_weak(cur, (std::uint64_t(g) << 32) | end, std::memory_order_acq_rel,
                                        std::memory_order_acquire))
        continue;
      n_g = n;
      (*f)(begin, end, tid);
      const auto k = std::uint32_t(end - begin);
      if (batched)
        finished += k;
      else
        count_done(k, n_g);
      cur = claim_.load(std::memory_order_acquire);
    }
    // Job g cannot end while items of it are uncounted (the caller waits for them all).
    if (finished) count_done(finished, n_g);
  }

  void count_done(std::uint32_t k, std::size_t n) noexcept {
    if (done_.fetch_add(k, std::memory_order_seq_cst) + k == std::uint32_t(n) && caller_asleep_.load(std::memory_order_seq_cst))
      detail::futex_wake_all(done_);
  }

  // A job of no items (the claim word is left as it is, so no chunk can be taken with it):
  // generation_ changes, which is what wakes a sleeper (the futex compares the word).
  void enter_hot() noexcept {
    if (hot_.fetch_add(1, std::memory_order_seq_cst) != 0) return;
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst)) detail::futex_wake_all(generation_);
  }

  void worker_loop(unsigned tid) {
    std::uint32_t seen = 0;
    for (;;) {
      // Spin briefly (ops follow each other within microseconds), or as long as the pool is hot,
      // then sleep on the counter.
      std::uint32_t g = generation_.load(std::memory_order_acquire);
      for (int spin = 0; g == seen;) {
        if (hot_.load(std::memory_order_relaxed)) spin = 0;
        else if (++spin > worker_spins) break;
        STRATA_CPU_RELAX();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        if (generation_.load(std::memory_order_seq_cst) == seen) detail::futex_wait(generation_, seen);
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        continue;  // a job, a hot scope or a spurious wake-up: look again
      }
      seen = g;
      if (stop_.load(std::memory_order_relaxed)) return;
      run_chunks(g, tid);
    }
  }

  // Three cache lines: what idle workers poll (generation, sleepers, hot, stop), what a claim
  // reads and writes (the claim word and the job it validates), and what finishing writes and
  // the caller polls (done). On one line, every claim and every finished item invalidated the
  // copies of every spinning thread.
  unsigned n_threads_;
  std::vector<std::thread> workers_;
  alignas(64) std::atomic<std::uint32_t> generation_{0};
  std::atomic<std::uint32_t> sleepers_{0};  // workers asleep (or about to be) on generation_
  std::atomic<std::uint32_t> hot_{0};       // open hot_scopes
  std::atomic<bool> stop_{false};
  std::atomic<bool> batched_done_{false};   // set_batched_done
  alignas(64) std::atomic<std::uint64_t> claim_{0};  // (generation << 32) | next index
  std::atomic<const job*> job_{nullptr};
  std::atomic<std::size_t> n_{0}, grain_{1};
  alignas(64) std::atomic<std::uint32_t> done_{0};   // items finished in the current job (n < 2^32)
  std::atomic<bool> caller_asleep_{false};  // the caller waits on done_ (notify it at the end)
};

}  // namespace strata::kernels::cpu
