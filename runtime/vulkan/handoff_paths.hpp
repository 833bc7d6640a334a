// How the Vulkan backend submits a step with CPU hand-offs (handoff_submit.cpp, handoff_poll.cpp):
// which of the three paths runs (parts pre-submitted on a timeline semaphore, a submit and fence
// wait per part, or one submit with the GPU and the host meeting at flag words), the switches
// around them, the per-step submit arrays, the flag words' buffer ids and the hand-off timing
// sums. A base of backend::impl; plain values only: the semaphore and the recorded sync command
// buffers are impl's (destroyed before its device). Private to runtime/vulkan (includes Vulkan).
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "backend.hpp"
#include "memory.hpp"

namespace strata::gpu {

struct handoff_paths {
  handoff_stats handoff_counts;  // submit_step
  bool handoff_timeline = false;      // parts pre-submitted (STRATA_VK_HANDOFF_FENCE=1: off)
  bool handoff_hot = false;           // CPU workers spin through a step (STRATA_VK_HANDOFF_HOT=0|1)
  // The CPU's result buffers: host-cached (memory_kind::handoff), or for A/B the first
  // host-visible type as before (STRATA_VK_HANDOFF_WC=1: write-combined on NVIDIA).
  bool handoff_wc = false;
  memory_kind handoff_out_kind() const noexcept { return handoff_wc ? memory_kind::upload : memory_kind::handoff; }
  std::uint32_t handoff_spin_us = 0;  // host spin on the counter before vkWaitSemaphores (STRATA_VK_HANDOFF_SPIN_US)
  // A step without hand-offs: the host polls its fence this long before vkWaitForFences sleeps
  // (STRATA_VK_STEP_SPIN_US; 0: the driver's wait at once; init_handoff gives the default).
  std::uint32_t step_spin_us = 0;
  std::uint64_t timeline_value = 0;   // the last value signalled on impl's timeline semaphore
  // A step's submits, sized once to the most parts a step has had (no allocation per step).
  std::vector<vk::CommandBuffer> tl_cmds;
  std::vector<std::uint64_t> tl_wait, tl_signal;
  std::vector<vk::TimelineSemaphoreSubmitInfo> tl_infos;
  std::vector<vk::SubmitInfo> tl_submits;

  // The flag-word path (handoff_poll.cpp; default on real GPUs, STRATA_VK_HANDOFF_POLL=0|1).
  bool handoff_poll = false;
  // How this backend submits a step with hand-offs (description(), the hand-off times).
  const char* handoff_path() const noexcept {
    return handoff_poll       ? "one submit, GPU and host meeting at flag words"
           : handoff_timeline ? "parts pre-submitted on a timeline semaphore"
                              : "a submit and fence wait per part";
  }
  std::uint32_t sync_flags = 0;     // buffer id of the done words, in host memory (0: none yet)
  std::uint32_t sync_go = 0;        // buffer id of the tag and go words, device-local mapped (the BAR)
  std::uint32_t sync_capacity = 0;  // hand-offs the flag words and sync_cmds hold
  std::uint32_t sync_tag = 0;       // the current step's tag (never 0 in a step)
  std::uint32_t sync_max_spins = 0; // the GPU's bound on its wait (x 1024 reads)
  std::vector<vk::CommandBuffer> poll_cmds;

  // STRATA_VK_HANDOFF_TIMES=1: host-clock sums over the hand-offs of steps of <= 8 tokens without GPU-cached blocks;
  // and over plain steps (no hand-off) of <= 8 tokens: from the submit until the host sees the step end (in flight),
  // and from that until the next plain step's submit (the host's work between steps, when the GPU has none).
  struct handoff_times {
    bool on = false;
    std::uint64_t steps = 0, handoffs = 0;
    double submit_us = 0, wait_us = 0, cpu_us = 0, release_us = 0, last_us = 0, step_us = 0;
    std::uint64_t plain_steps = 0, plain_gaps = 0, plain_pauses = 0;
    double plain_flight_us = 0, plain_between_us = 0;
    std::chrono::steady_clock::time_point plain_seen{};  // when the last plain step's end was seen
  } times;
};

}  // namespace strata::gpu
