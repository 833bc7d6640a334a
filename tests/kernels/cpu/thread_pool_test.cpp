// The CPU thread pool (kernels/cpu/thread_pool.hpp): every item of every job runs exactly once,
// with the job it was submitted with, on a thread index below size() that no other thread uses
// at the same time; many back-to-back jobs (where a late worker could otherwise run a chunk of
// the next job with the previous function) and more threads than cores (workers that wake
// after the caller has done everything) included.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "strata/kernels/cpu/thread_pool.hpp"

namespace {

using strata::kernels::cpu::thread_pool;

void check_jobs(unsigned threads, int jobs, std::uint32_t seed, bool batched_done = true) {
  thread_pool pool(threads);
  REQUIRE(pool.size() == threads);
  CHECK_FALSE(pool.batched_done());  // the default: per item
  pool.set_batched_done(batched_done);
  CHECK(pool.batched_done() == batched_done);
  std::mt19937 rng(seed);
  const std::size_t max_n = 700;
  std::unique_ptr<std::atomic<int>[]> hits(new std::atomic<int>[max_n]);
  std::unique_ptr<std::atomic<int>[]> busy(new std::atomic<int>[threads]);
  for (unsigned t = 0; t < threads; ++t) busy[t] = 0;
  std::atomic<int> bad_tid{0}, shared_tid{0};
  for (int j = 0; j < jobs; ++j) {
    const std::size_t n = std::size_t(rng() % max_n);
    const std::size_t grain = std::size_t(rng() % 9);  // 0 means 1
    for (std::size_t i = 0; i < max_n; ++i) hits[i] = 0;
    // Each job adds its own number: a chunk run with another job's function shows as a wrong sum.
    const int tag = j + 1;
    pool.parallel_for(n, grain, [&](std::size_t b, std::size_t e, unsigned tid) {
      if (tid >= threads) {
        bad_tid.fetch_add(1);
        return;
      }
      if (busy[tid].fetch_add(1) != 0) shared_tid.fetch_add(1);
      for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(tag);
      busy[tid].fetch_sub(1);
    });
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < max_n; ++i) wrong += hits[i].load() != (i < n ? tag : 0);
    REQUIRE_MESSAGE(wrong == 0, "job " << j << ": n " << n << ", grain " << grain);
  }
  CHECK(bad_tid.load() == 0);
  CHECK(shared_tid.load() == 0);
}

TEST_CASE("thread_pool: every item once, with its own job, on a distinct thread index") {
  SUBCASE("one thread") { check_jobs(1, 200, 1); }
  SUBCASE("two threads") { check_jobs(2, 3000, 2); }
  SUBCASE("more threads than cores") { check_jobs(4 * std::max(1u, std::thread::hardware_concurrency()), 500, 3); }
  // Many short jobs of varying size on 8 threads: a worker late from one job meets the next
  // job's larger n while the old claim word is still up (the pool closes it first).
  SUBCASE("eight threads, short jobs of varying size") { check_jobs(8, 6000, 4); }
  // Each finished item counted on its own (STRATA_CPU_POOL_BATCHED_DONE=0), as before batching.
  SUBCASE("items counted one by one, two threads") { check_jobs(2, 3000, 5, false); }
  SUBCASE("items counted one by one, more threads than cores") {
    check_jobs(4 * std::max(1u, std::thread::hardware_concurrency()), 500, 6, false);
  }
  SUBCASE("items counted one by one, eight threads") { check_jobs(8, 6000, 7, false); }
}

TEST_CASE("thread_pool: many tiny jobs, most done by the caller before any worker wakes") {
  // Plain (non-atomic) writes: each job's writes must be visible to the caller, and to the
  // next job's threads, once parallel_for returns.
  thread_pool pool(8);
  std::vector<int> out(64, 0);
  for (int rep = 0; rep < 2000; ++rep)
    pool.parallel_for(out.size(), 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t i = b; i < e; ++i) out[i] += 1;
    });
  std::size_t wrong = 0;
  for (int v : out) wrong += v != 2000;
  CHECK(wrong == 0);
}

// Hot scopes (the Vulkan backend's hand-offs): the workers spin between jobs while one is open,
// are woken from sleep when it opens, and go back to sleeping after; jobs inside, across and
// after scopes (nested too) still run every item once with their own function.
TEST_CASE("thread_pool: jobs inside, between and after hot scopes run every item once") {
  thread_pool pool(4);
  std::vector<int> out(97, 0);
  const auto job = [&] {
    pool.parallel_for(out.size(), 3, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t i = b; i < e; ++i) out[i] += 1;
    });
  };
  int expect = 0;
  for (int rep = 0; rep < 200; ++rep) {
    if (rep % 50 == 7) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // workers asleep
    {
      thread_pool::hot_scope hot(&pool);
      CHECK(pool.hot());
      job();
      {
        thread_pool::hot_scope nested(&pool);
        job();
      }
      CHECK(pool.hot());
      if (rep % 20 == 3) std::this_thread::sleep_for(std::chrono::microseconds(300));  // spinning, not asleep
      job();
    }
    CHECK(!pool.hot());
    job();
    expect += 4;
  }
  { thread_pool::hot_scope none(nullptr); }  // a null pool: nothing to keep hot
  std::size_t wrong = 0;
  for (int v : out) wrong += v != expect;
  CHECK(wrong == 0);
}

}  // namespace
