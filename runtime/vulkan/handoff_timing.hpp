// backend::impl::timed_handoff, the one template of the hand-off submit paths
// (handoff_submit.cpp, handoff_poll.cpp): private to runtime/vulkan.
#pragma once
#include <chrono>

#include "backend_impl.hpp"

namespace strata::gpu {

// One hand-off (handoff_submit.cpp, handoff_poll.cpp) after the host has seen the part before it end (mark: when it began waiting for
// that part): the CPU's work, then the release of the part after it (a submit or a signal).
template <class Work, class Release>
void backend::impl::timed_handoff(bool timed, std::chrono::steady_clock::time_point& mark, Work&& work, Release&& release) {
  if (!timed) {
    work();
    return release();
  }
  using clock = std::chrono::steady_clock;
  const auto us = [](clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  const auto seen = clock::now();
  work();
  const auto cpu_end = clock::now();
  release();
  const auto released = clock::now();
  times.wait_us += us(seen - mark);
  times.cpu_us += us(cpu_end - seen);
  times.release_us += us(released - cpu_end);
  ++times.handoffs;
  mark = released;
}

}  // namespace strata::gpu
