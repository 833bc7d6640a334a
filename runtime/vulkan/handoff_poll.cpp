// A step with hand-offs as one submit: [part 0, sync 0, part 1, sync 1, ..., part n]. Sync i (a
// command buffer recorded once per hand-off index) makes what part i wrote visible to the host,
// writes the step's tag into hand-off i's done word, and spins on its go word
// (shaders/handoff_sync.glsl); the host spins on the done word, runs the CPU's work, and writes
// the go word. On the H200 a hand-off through a timeline semaphore took ~230-470 us of GPU wait
// around ~40-100 us of kernels (session 20/21): the driver between the host's signal and the
// GPU's next kernel, and an idle GPU's clocks. Here the GPU never idles in a wait the driver
// must notice, and each direction is a write and a read of one word over PCIe (30B at 12G on
// the H200: 204-218 us instead of 324-331 us per hand-off, +17-22% decode).
//
// Where the words live: done words in host memory (the GPU writes them, the host polls); the
// step's tag and the go words in device-local memory mapped through the BAR (the host writes,
// the GPU polls). A go word in host memory stayed stale in the H200's L2 for as long as the GPU
// polled it (the step hung); host writes through the BAR land where the GPU reads. reserve()
// probes the scheme once (probe_polling) and keeps the timeline path where it fails, and on CPU
// devices (lavapipe), where the outcome depended on the host's load.
//
// Memory: part i ends with a barrier that makes its shader writes available to the host (the
// hand-off's input rows); sync i begins with one too before its done word is written, so the
// host that sees the word sees the rows. The host writes its result (its own region per hand-off
// and step: handoff::out_slot) before the go word, in program order on coherent memory; part
// i + 1 begins with command_recorder::resume's barrier. A part that throws on the host still
// releases every later go word, so the GPU drains before the error leaves the step.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "backend_impl.hpp"
#include "handoff_timing.hpp"
#include "strata/core/error.hpp"
#include "strata/kernels/cpu/thread_pool.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strata::gpu {

namespace {
using clock = std::chrono::steady_clock;
struct sync_pc {
  std::uint32_t index, max_spins, zero;
};
constexpr std::uint32_t line_words = 16;  // a 64-byte line per flag word
std::size_t done_word(std::size_t i) { return line_words * (1 + i); }
std::size_t go_word(std::size_t i) { return line_words * (1 + i); }
// Write-combined BAR stores leave the CPU now, not when the combining buffer fills.
void flush_writes() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}
volatile std::uint32_t* words(const gpu_buffer& b) { return reinterpret_cast<volatile std::uint32_t*>(b.mapped()); }
}  // namespace

void backend::impl::ensure_sync_cmds(std::size_t handoffs) {
  if (handoffs <= sync_capacity) return;
  const auto cap = std::uint32_t(std::max<std::size_t>(handoffs, 8));
  sync_cmds.clear();  // no step is in flight here: the last one was waited for
  const std::uint64_t bytes = std::uint64_t(line_words) * 4 * (1 + cap);
  if (sync_flags) {
    buffers.at(sync_flags - 1) = gpu_buffer(ctx, bytes, memory_kind::handoff, "hand-off done words");
    buffers.at(sync_go - 1) = gpu_buffer(ctx, bytes, memory_kind::step, "hand-off go words");
  } else {
    sync_flags = new_buffer(bytes, memory_kind::handoff, "hand-off done words");
    sync_go = new_buffer(bytes, memory_kind::step, "hand-off go words");
  }
  for (std::uint32_t id : {sync_flags, sync_go}) {
    volatile std::uint32_t* w = words(buf(id));
    for (std::size_t i = 0; i < std::size_t(line_words) * (1 + cap); ++i) w[i] = 0;
  }
  flush_writes();
  sync_capacity = cap;
  auto cmds = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, cap));
  auto halves = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 2 * cap));
  sync_signal_cmds.clear();
  sync_wait_cmds.clear();
  for (std::uint32_t i = 0; i < cap; ++i) {
    sync_cmds.push_back(std::move(cmds[i]));
    record_sync(sync_cmds.back(), i, sync_max_spins);
    sync_signal_cmds.push_back(std::move(halves[2 * i]));
    record_sync(sync_signal_cmds.back(), i, sync_max_spins, true, false);
    sync_wait_cmds.push_back(std::move(halves[2 * i + 1]));
    record_sync(sync_wait_cmds.back(), i, sync_max_spins, false, true);
  }
}

void backend::impl::record_sync(const vk::raii::CommandBuffer& c, std::uint32_t index, std::uint32_t max_spins, bool signal_part,
                                bool wait_part) {
  const pipeline& signal = pipes.get(req("handoff_sync", {}, {{"SIGNAL", "1"}}, 3));
  const pipeline& wait = pipes.get(req("handoff_sync", {}, {}, 3));
  const binding b[] = {bind_id(sync_flags, true), bind_id(sync_flags, true), bind_id(sync_go, false)};
  command_recorder r;
  r.begin(c);
  const sync_pc pc{index, max_spins, 0};
  if (signal_part) {
    // The part before's shader writes and transfers: visible to the host (the hand-off's input
    // rows) before this signal runs, and ordered before the shaders here.
    const vk::MemoryBarrier mb(vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eTransferWrite,
                               vk::AccessFlagBits::eHostRead | vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
    c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer,
                      vk::PipelineStageFlagBits::eHost | vk::PipelineStageFlagBits::eComputeShader, {}, mb, {}, {});
    r.dispatch(signal, b, &pc, sizeof pc, 1);
  }
  // The wait alone (a GPU share between the halves) needs no barrier before it: the part after
  // begins with one (command_recorder::resume) that orders it after the share and the wait.
  if (wait_part) r.dispatch(wait, b, &pc, sizeof pc, 1);
  c.end();
}

std::uint32_t backend::impl::next_sync_tag() {
  sync_tag = sync_tag + 1 ? sync_tag + 1 : 1;
  words(buf(sync_go))[0] = sync_tag;  // before the submit
  words(buf(sync_flags))[1] = 0;
  flush_writes();
  return sync_tag;
}

void backend::impl::release_go(std::size_t i, std::uint32_t tag) {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the CPU's result before the go word
  flush_writes();
  words(buf(sync_go))[go_word(i)] = tag;
  flush_writes();
}

bool backend::impl::probe_polling() {
  ensure_sync_cmds(1);
  auto cmds = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1));
  record_sync(cmds[0], 0, 4096);  // 4 Mi reads: seconds over PCIe, ended by the go word at 50 ms
  const std::uint32_t tag = next_sync_tag();
  ctx.queue().submit(vk::SubmitInfo({}, {}, *cmds[0]), *fence);
  const volatile std::uint32_t* w = words(buf(sync_flags));
  const auto until = clock::now() + std::chrono::seconds(2);
  bool signalled = false;
  while (!(signalled = w[done_word(0)] == tag) && clock::now() < until) std::this_thread::yield();
  // The host answers late, as a long CPU part would: a GPU whose wait ends early (llvmpipe
  // caps loops) has given up by then.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  release_go(0, tag);
  wait_fence();
  return signalled && w[1] == 0;
}

void backend::impl::wait_done_word(std::size_t word, std::uint32_t tag) {
  const volatile std::uint32_t* w = words(buf(sync_flags));
  const auto start = clock::now();
  for (std::uint32_t i = 1;; ++i) {
    if (w[word] == tag) return;
    if (i % 1024 == 0) {
      // A device lost or a GPU that gave up its own wait ends the step with an error, not a hang.
      if (w[1]) throw error("GPU hand-off: the GPU's wait for the host timed out");
      if (fence.getStatus() == vk::Result::eSuccess && w[word] != tag)
        throw error("GPU hand-off: the step ended without signalling hand-off word " + std::to_string(word));
      if (clock::now() - start > std::chrono::milliseconds(2)) std::this_thread::yield();
    }
    STRATA_CPU_RELAX();
  }
}

bool backend::impl::wait_fence_spinning(std::uint32_t spin_us) {
  const auto until = clock::now() + std::chrono::microseconds(spin_us);
  bool seen = false;
  for (std::uint32_t i = 1; spin_us; ++i) {
    if (fence.getStatus() == vk::Result::eSuccess) {
      seen = true;
      break;
    }
    if (i % 16 == 0 && clock::now() > until) break;
    STRATA_CPU_RELAX();
  }
  wait_fence();
  return seen;
}

void backend::impl::submit_polled(bool timed) {
  std::deque<handoff>& hs = current->handoffs;
  const std::size_t n = hs.size();
  ensure_sync_cmds(n);
  const std::uint32_t tag = next_sync_tag();
  poll_cmds.clear();  // keeps its capacity: no allocation once a step of this size has run
  poll_cmds.push_back(*current->cmd);
  for (std::size_t i = 0; i < n; ++i) {
    if (*hs[i].share) {  // the GPU's share of the experts runs while the host computes its own
      poll_cmds.push_back(*sync_signal_cmds[i]);
      poll_cmds.push_back(*hs[i].share);
      poll_cmds.push_back(*sync_wait_cmds[i]);
    } else {
      poll_cmds.push_back(*sync_cmds[i]);
    }
    poll_cmds.push_back(*hs[i].cmd);
  }
  if (output_cmd()) poll_cmds.push_back(output_cmd());  // the step's output part
  clock::time_point mark = timed ? clock::now() : clock::time_point{};
  ctx.queue().submit(vk::SubmitInfo({}, {}, poll_cmds), *fence);
  if (timed) times.submit_us += std::chrono::duration<double, std::micro>(clock::now() - mark).count();
  mark = timed ? clock::now() : mark;
  std::size_t done = 0;  // go words written
  try {
    for (; done < n; ++done) {
      wait_done_word(done_word(done), tag);
      std::atomic_thread_fence(std::memory_order_seq_cst);  // the done word before the rows it guards
      timed_handoff(timed, mark, [&] { run_handoff(hs[done]); }, [&] { release_go(done, tag); });
    }
    wait_fence_spinning(handoff_spin_us);
  } catch (...) {
    // Later parts wait on go words only the host writes: release them all so the queue drains.
    for (; done < n; ++done) release_go(done, tag);
    try {
      wait_fence();
    } catch (...) {
    }
    throw;
  }
  if (words(buf(sync_flags))[1]) throw error("GPU hand-off: the GPU's wait for the host timed out");
  if (timed) times.last_us += std::chrono::duration<double, std::micro>(clock::now() - mark).count();
}

}  // namespace strata::gpu
