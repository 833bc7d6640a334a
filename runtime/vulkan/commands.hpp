// Command recording: binds a pipeline, pushes its descriptors and constants, dispatches, and
// inserts a compute->compute barrier only where a dispatch touches a buffer written since the
// last barrier (or writes one read since then), so independent kernels (Q, K, V projections)
// overlap. Optionally brackets every dispatch with timestamps for per-kernel profiles.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "memory.hpp"
#include "pipelines.hpp"

namespace strata::gpu {

struct binding {
  buffer_range range;
  bool written = false;
  bool weights = false;  // a model weight's bytes (profiles count what a kernel reads of them)
  // Written where no dispatch of the step reads or writes the same bytes (the KV codes of the
  // step's own positions, written beside the attention that reads older ones): no barrier for it,
  // and no later dispatch of the step waits for it.
  bool disjoint = false;
  // Binding 0's second buffer where the kernel reads weights from two sources (pipeline::
  // weight_sources 2: GPU-cached experts' host copy beside their slots).
  buffer_range alt{};
};

class command_recorder {
 public:
  // profile: one timestamp per dispatch into `queries` (capacity dispatches + 1, from
  // first_query), and a barrier after every dispatch so each kernel's time is its own.
  // after_part: the command buffer runs after another of the same step (a step's output part
  // after its layers): it starts with a barrier, so the earlier part's writes are visible.
  void begin(const vk::raii::CommandBuffer& cmd, vk::QueryPool queries = {}, std::uint32_t query_capacity = 0,
             std::uint32_t first_query = 0, bool after_part = false);
  void dispatch(const pipeline& p, std::span<const binding> bindings, const void* push, std::uint32_t push_bytes,
                std::uint32_t gx, std::uint32_t gy = 1, std::uint32_t gz = 1);
  // Makes every shader write visible to the host (before the fence the host waits on).
  void end();
  // Continues the same step in `cmd`, run after the previous command buffer completed and the
  // host ran in between (a hand-off): starts with a barrier, so what the earlier part and the
  // host wrote is visible before anything here reads or overwrites it (shader writes, transfers:
  // the expert cache uploads slots in a command buffer submitted just before; host writes). When profiling, the time from
  // the last kernel before the hand-off to this command buffer's start is an entry of its own,
  // `label` (the host's work plus a submit).
  void resume(const vk::raii::CommandBuffer& cmd, const std::string& label);
  // Lab only, wrong results (backend_tuning::lab_no_barrier): no hazard barriers between dispatches.
  void set_lab_no_barrier(bool on) noexcept { lab_no_barrier_ = on; }
  // Lab only, wrong results (backend_tuning::lab_no_barrier_before): no hazard barrier before a
  // dispatch whose kernel label contains one of `parts`, so that kernel overlaps the level before.
  void set_lab_no_barrier_before(std::vector<std::string> parts) { lab_no_barrier_before_ = std::move(parts); }
  // Check only (backend_tuning::barrier_all): a barrier before every dispatch, hazard or not, so a
  // result that changes with it points at a dependency the hazard tracking missed.
  void set_barrier_all(bool on) noexcept { barrier_all_ = on; }

  std::uint32_t dispatches() const noexcept { return std::uint32_t(labels_.size()); }
  // Barriers recorded since begin(): the step's dependency levels are about this many plus one
  // (a profile adds one after every dispatch, so count without it).
  std::uint32_t barriers() const noexcept { return barriers_; }
  const std::vector<std::string>& labels() const noexcept { return labels_; }
  // Per dispatch (as labels()): the bytes of the weight ranges it binds: what a matmul reads of
  // its weights; an expert matmul binds every expert of the layer (an upper bound).
  const std::vector<std::uint64_t>& weight_bytes() const noexcept { return weight_bytes_; }

 private:
  void barrier();
  const vk::raii::CommandBuffer* cmd_ = nullptr;
  bool lab_no_barrier_ = false, barrier_all_ = false;
  std::vector<std::string> lab_no_barrier_before_;
  vk::QueryPool queries_;
  std::uint32_t query_capacity_ = 0, first_query_ = 0, barriers_ = 0;
  std::vector<std::uint32_t> written_, read_;  // buffer ids since the last barrier
  std::vector<std::string> labels_;
  std::vector<std::uint64_t> weight_bytes_;
};

// Records `record` into a one-time command buffer of ctx's queue, submits it and waits for it
// (set-up work: probes, load-time expansions); throws naming `what` and the device if it does not finish.
void run_once(const context& ctx, const std::function<void(command_recorder&)>& record, const std::string& what);

}  // namespace strata::gpu
