// How a recorded step with hand-offs (the CPU computing routed experts or a streamed dense FFN
// between two parts of the step: cpu_experts.cpp, layer_stream.cpp) is submitted and waited on.
// Timeline path (the default where the device has timeline semaphores): every part is submitted
// at once; part i+1 waits on the value the host signals (vkSignalSemaphore) after the CPU's
// work i, each part signals its own value when done, and the host waits for a part by spinning
// on the semaphore's counter (a bounded spin, then vkWaitSemaphores): no queue submit, no GPU
// start-up and no sleeping host thread between the parts. STRATA_VK_HANDOFF_FENCE=1 keeps the
// fence path: per part a submit and a fence wait. Steps with GPU-cached experts
// (expert_cache.cpp) always take it: the host chooses after the router which parts run next.
// Either way the CPU backend's workers are kept spinning through the step (thread_pool
// hot_scope) instead of sleeping between hand-offs. STRATA_VK_HANDOFF_TIMES=1 times the
// hand-offs of decode-sized steps on the host and prints averages when the backend closes.
// A step without hand-offs is one submit and one fence, which the host polls before it sleeps
// (step_spin_us, STRATA_VK_STEP_SPIN_US).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "backend_impl.hpp"
#include "handoff_timing.hpp"
#include "strata/core/error.hpp"
#include "strata/kernels/cpu/thread_pool.hpp"

namespace strata::gpu {

namespace {
using clock = std::chrono::steady_clock;
double us(clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
}  // namespace

void backend::impl::init_handoff() {
  const auto env = [](const char* name) -> const char* { return std::getenv(name); };
  // Each hand-off of a step has its own region of the CPU's result buffer (handoff::out_slot):
  // a pre-submitted part gets no cache invalidation after the host's write, and on the H200 parts
  // that shared one region read an earlier hand-off's result from the GPU's L2 (session 15).
  const bool fence_forced = env("STRATA_VK_HANDOFF_FENCE") && std::string_view(env("STRATA_VK_HANDOFF_FENCE")) == "1";
  handoff_timeline = ctx.info().timeline && !fence_forced;
  // A CPU device (lavapipe) runs the GPU's parts on the same cores: spinning workers and a
  // spinning host would take them from it. Real GPUs: hot workers, a 1 ms spin on the counter.
  handoff_hot = !ctx.info().is_cpu;
  handoff_spin_us = ctx.info().is_cpu ? 0 : 1000;
  if (const char* v = env("STRATA_VK_HANDOFF_HOT")) handoff_hot = std::string_view(v) == "1";
  if (const char* v = env("STRATA_VK_HANDOFF_SPIN_US")) handoff_spin_us = std::uint32_t(std::clamp(std::atoi(v), 0, 1000000));
  // A plain step's fence: a real GPU's host polls it for up to 20 ms before the driver's wait sleeps
  // (a decode token's step ends well within that; the sleeping wait's wake-up cost 3-4% of a token).
  // H100, qwen3-8b tg128, three rounds in one lease: Q8_0 258.65 / 260.39 / 262.07 t/s -> 268.89 /
  // 268.85 / 268.42 with the poll, Q4_K_M 316.53 / 314.42 -> 321.09 / 320.86 (bench/RESULTS.md
  // session 67). A CPU device's host would take the core it runs on: no poll there.
  step_spin_us = step_spin_env.value_or(ctx.info().is_cpu ? 0 : 20000);  // read by tuning.cpp read_env
  if (const char* v = env("STRATA_VK_HANDOFF_TIMES")) times.on = std::string_view(v) == "1";
  if (const char* v = env("STRATA_VK_HANDOFF_WC")) handoff_wc = std::string_view(v) == "1";
  // The step in one submit, meeting the GPU at flag words (handoff_poll.cpp): real GPUs, where
  // reserve()'s probe passes; on a CPU device the GPU's spinning wait would take a core from the
  // host's work (and lavapipe fails the probe: tests force it to check the fallback).
  handoff_poll = !ctx.info().is_cpu && !fence_forced;
  if (const char* v = env("STRATA_VK_HANDOFF_POLL")) handoff_poll = std::string_view(v) == "1";
  sync_max_spins = ctx.info().is_cpu ? 1u << 24 : 1u << 20;  // x 1024 reads: minutes on either
  if (handoff_timeline) {
    const vk::SemaphoreTypeCreateInfo type(vk::SemaphoreType::eTimeline, 0);
    timeline = vk::raii::Semaphore(ctx.device(), vk::SemaphoreCreateInfo({}, &type));
  }
}

void backend::impl::submit_and_wait(vk::CommandBuffer c) { submit_and_wait(std::span(&c, 1)); }

void backend::impl::submit_and_wait(std::span<const vk::CommandBuffer> c) {
  ctx.queue().submit(vk::SubmitInfo({}, {}, c), *fence);
  wait_fence();
}

void backend::impl::wait_fence() {
  if (ctx.device().waitForFences(*fence, VK_TRUE, UINT64_MAX) != vk::Result::eSuccess) throw error("GPU step did not complete");
  ctx.device().resetFences(*fence);
}

void backend::impl::wait_timeline(std::uint64_t value) {
  if (handoff_spin_us) {
    const auto until = clock::now() + std::chrono::microseconds(handoff_spin_us);
    for (std::uint32_t i = 1;; ++i) {
      if (timeline.getCounterValue() >= value) return;
      if (i % 64 == 0 && clock::now() > until) break;
      STRATA_CPU_RELAX();
    }
  }
  const vk::Semaphore s = *timeline;
  if (ctx.device().waitSemaphores(vk::SemaphoreWaitInfo({}, s, value), UINT64_MAX) != vk::Result::eSuccess)
    throw error("GPU step did not complete (timeline semaphore wait)");
}

void backend::impl::signal_timeline(std::uint64_t value) { ctx.device().signalSemaphore(vk::SemaphoreSignalInfo(*timeline, value)); }

void backend::impl::run_handoff(handoff& h) {
  if (h.ffn >= 0) run_cpu_ffn(h);  // a streamed block's dense FFN (layer_stream.cpp)
  else if (h.miss_handoff) run_miss_handoff(h);  // a GPU-cached block (expert_cache_misses.cpp)
  else run_handoff_on_cpu(h);
}

void backend::impl::submit_step() {
  cache_stats.tokens += batch_tokens;
  cache_step_admitted = 0;
  std::deque<handoff>& hs = current->handoffs;
  ++handoff_counts.steps;
  handoff_counts.tokens += batch_tokens;
  handoff_counts.handoff_steps += !hs.empty();
  handoff_counts.handoffs += hs.size();
  // A step that fails part way leaves no side-queue copy running and no slot the caches think
  // holds an expert whose upload never ran.
  struct unwind_guard {
    impl& p;
    bool on;
    int exceptions = std::uncaught_exceptions();
    ~unwind_guard() {
      if (on && std::uncaught_exceptions() > exceptions) p.abandon_cached_step();
    }
  } lookup_guard{*this, cache_lookup};
  // The lookup form's admitted experts and changed slot maps, ahead of the step's parts (with
  // cache_async: the maps of the copies done beside the last step, waiting on them).
  const std::uint64_t copies = cache_inflight.empty() ? 0 : cache_copy_value;
  const vk::CommandBuffer update = cache_update_cmd();
  // Submits parts (after the copies they map, if any), then the new admissions' copies on the side
  // queue beside them (their slots' victims left the maps in `update`), then waits for the parts.
  const auto submit_waiting = [&](std::span<const vk::CommandBuffer> parts) {
    if (!copies) {
      ctx.queue().submit(vk::SubmitInfo({}, {}, parts), *fence);
    } else {
      const vk::Semaphore sem = *cache_timeline;
      const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
      const vk::TimelineSemaphoreSubmitInfo values(1u, &copies, 0u, nullptr);
      vk::SubmitInfo si(1u, &sem, &stage, std::uint32_t(parts.size()), parts.data());
      si.pNext = &values;
      ctx.queue().submit(si, *fence);
    }
    submit_cache_copies();
    if (wait_fence_spinning(step_spin_us)) ++handoff_counts.polled_steps;
  };
  if (hs.empty()) {
    const vk::CommandBuffer parts[] = {update, *current->cmd, output_cmd()};
    const std::size_t first = update ? 0 : 1, n = parts[2] ? 3 : 2;
    if (!times.on || step_tokens > 8) {
      if (times.on) times.plain_seen = {};  // a prompt step between two decode steps is no host gap
      return submit_waiting(std::span(parts + first, n - first));
    }
    const clock::time_point submitted = clock::now();
    if (times.plain_seen != clock::time_point{}) {
      // Pauses of 5 ms and more (a benchmark's repetitions, a server with no request) are not the
      // host's per-step work: counted apart.
      const double gap = us(submitted - times.plain_seen);
      if (gap < 5000) {
        times.plain_between_us += gap;
        ++times.plain_gaps;
      } else {
        ++times.plain_pauses;
      }
    }
    submit_waiting(std::span(parts + first, n - first));
    times.plain_seen = clock::now();
    times.plain_flight_us += us(times.plain_seen - submitted);
    ++times.plain_steps;
    return;
  }
  if (times.on) times.plain_seen = {};  // a step with hand-offs between two plain steps is no host gap
  if (update || copies || !cache_admitted.empty()) submit_waiting(std::span(&update, update ? 1 : 0));
  bool cached = false, experts = false, ffn = false;
  for (const handoff& h : hs) {
    if (*h.share && h.ffn < 0 && !h.miss_handoff) {  // a dense FFN's share is the link's copies (layer_stream.cpp); a miss's share is the cache's
      ++xstreaming.share_blocks;
      xstreaming.share_bytes += h.share_bytes;
    }
    cached |= h.cache >= 0 && !h.miss_handoff;  // the split form's blocks: run_cached picks their parts
    experts |= h.cache >= 0 || h.ffn < 0;
    ffn |= h.ffn >= 0;
  }
  using kernels::cpu::thread_pool;
  const thread_pool::hot_scope hot_x(handoff_hot && experts ? &host->pool() : nullptr);
  const thread_pool::hot_scope hot_f(handoff_hot && ffn ? &ffn_host->pool() : nullptr);
  const bool timed = times.on && !cached && step_tokens <= 8;
  const clock::time_point t0 = timed ? clock::now() : clock::time_point{};
  if (cached) ++cache_step;  // stamps this step's expert predictions (expert_cache.cpp)
  const unwind_guard guard{*this, cached && !cache_lookup};
  if (handoff_poll && !cached) submit_polled(timed);
  else if (handoff_timeline && !cached) submit_timeline(timed);
  else submit_fenced(timed);
  if (cached) wait_prefetches();  // no copy of the side queue outlives its step
  if (timed) {
    times.step_us += us(clock::now() - t0);
    ++times.steps;
  }
}

void backend::impl::submit_fenced(bool timed) {
  std::deque<handoff>& hs = current->handoffs;
  clock::time_point mark = timed ? clock::now() : clock::time_point{};
  ctx.queue().submit(vk::SubmitInfo({}, {}, *current->cmd), *fence);
  if (timed) times.submit_us += us(clock::now() - mark);
  mark = timed ? clock::now() : mark;
  bool in_flight = true;  // a submit the fence has not been waited on for
  for (handoff& h : hs) {
    if (in_flight) wait_fence();
    if (h.cache >= 0 && !h.miss_handoff) {  // the split form: the host picks the parts that follow (submitted and waited on)
      run_cached(h, &h == &hs.back());
      in_flight = false;
      continue;
    }
    if (*h.share) submit_and_wait(*h.share);  // the GPU's share of the experts, before the CPU's on this path
    const vk::CommandBuffer next[] = {*h.cmd, &h == &hs.back() ? output_cmd() : vk::CommandBuffer{}};
    const std::span<const vk::CommandBuffer> parts(next, next[1] ? 2 : 1);
    timed_handoff(timed, mark, [&] { run_handoff(h); }, [&] { ctx.queue().submit(vk::SubmitInfo({}, {}, parts), *fence); });
    in_flight = true;
  }
  if (in_flight) wait_fence();
  if (timed) times.last_us += us(clock::now() - mark);
}

void backend::impl::submit_timeline(bool timed) {
  std::deque<handoff>& hs = current->handoffs;
  const std::size_t n = hs.size(), parts = n + 1;
  // Values from base: part i done = base + 2i + 1, the host's work after part i = base + 2i + 2.
  const std::uint64_t base = timeline_value;
  tl_cmds.resize(2 * parts);
  tl_wait.resize(parts);
  tl_signal.resize(parts);
  tl_infos.resize(parts);
  tl_submits.resize(parts);
  const vk::Semaphore sem = *timeline;
  static const vk::PipelineStageFlags wait_stage = vk::PipelineStageFlagBits::eAllCommands;
  for (std::size_t i = 0; i < parts; ++i) {
    // Part i, then the GPU's share of hand-off i (if any): on this path it runs before the CPU's.
    tl_cmds[2 * i] = i == 0 ? *current->cmd : *hs[i - 1].cmd;
    const bool share = i < n && *hs[i].share, output = i == n && output_cmd();
    if (share) tl_cmds[2 * i + 1] = *hs[i].share;
    if (output) tl_cmds[2 * i + 1] = output_cmd();  // the step's output part after its last
    tl_wait[i] = base + 2 * i;
    tl_signal[i] = base + 2 * i + 1;
    tl_infos[i] = vk::TimelineSemaphoreSubmitInfo(i ? 1 : 0, &tl_wait[i], 1, &tl_signal[i]);
    tl_submits[i] = vk::SubmitInfo(i ? 1 : 0, &sem, &wait_stage, share || output ? 2 : 1, &tl_cmds[2 * i], 1, &sem, &tl_infos[i]);
  }
  clock::time_point mark = timed ? clock::now() : clock::time_point{};
  ctx.queue().submit(tl_submits);
  timeline_value = base + 2 * n + 1;
  if (timed) times.submit_us += us(clock::now() - mark);
  mark = timed ? clock::now() : mark;
  std::size_t done = 0;  // host values signalled
  try {
    for (; done < n; ++done) {
      wait_timeline(base + 2 * done + 1);
      timed_handoff(timed, mark, [&] { run_handoff(hs[done]); }, [&] { signal_timeline(base + 2 * done + 2); });
    }
    wait_timeline(timeline_value);
  } catch (...) {
    // The parts already submitted wait on values only the host signals: let them run (on
    // whatever the hand-off buffers hold) so the queue drains before the error leaves the step.
    try {
      for (; done < n; ++done) {
        wait_timeline(base + 2 * done + 1);
        signal_timeline(base + 2 * done + 2);
      }
      wait_timeline(timeline_value);
    } catch (...) {
    }
    throw;
  }
  if (timed) times.last_us += us(clock::now() - mark);
}

void backend::impl::report_handoff_times() const {
  if (!times.on) return;
  if (times.plain_steps)
    std::fprintf(stderr,
                 "step times (STRATA_VK_HANDOFF_TIMES; host clock, %llu plain steps of <= 8 tokens): submit to end seen "
                 "%.1f us (fence %s), end seen to the next submit %.1f us (the host's work between steps; %llu pauses of "
                 ">= 5 ms left out)\n",
                 static_cast<unsigned long long>(times.plain_steps), times.plain_flight_us / double(times.plain_steps),
                 step_spin_us ? "polled" : "waited", times.plain_gaps ? times.plain_between_us / double(times.plain_gaps) : 0.0,
                 static_cast<unsigned long long>(times.plain_pauses));
  if (!times.steps || !times.handoffs) {
    std::fprintf(stderr, "hand-off times (STRATA_VK_HANDOFF_TIMES): no decode-sized step with hand-offs ran\n");
    return;
  }
  const double h = double(times.handoffs), s = double(times.steps);
  std::fprintf(stderr,
               "hand-off times (STRATA_VK_HANDOFF_TIMES; host clock, %llu steps of <= 8 tokens, %.1f hand-offs each, %s, "
               "CPU workers %s):\n"
               "  per hand-off: waiting for the GPU part before it %.1f us (from the previous submit or signal until its end "
               "is seen), CPU work %.1f us, next part released (%s) %.2f us\n"
               "  per step: first submit %.1f us, waiting for the last part %.1f us, step %.1f us (hand-offs %.1f us: "
               "GPU wait %.1f, CPU %.1f, host %.1f)\n",
               static_cast<unsigned long long>(times.steps), h / s,
               handoff_path(),
               handoff_hot ? "kept hot" : "sleeping between jobs", times.wait_us / h, times.cpu_us / h,
               handoff_poll ? "go word" : handoff_timeline ? "vkSignalSemaphore" : "vkQueueSubmit", times.release_us / h,
               times.submit_us / s,
               times.last_us / s, times.step_us / s, (times.wait_us + times.cpu_us + times.release_us) / s,
               times.wait_us / s, times.cpu_us / s, times.release_us / s);
}

}  // namespace strata::gpu
