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
  // Level chains (backend_tuning::chain). A kernel built with CHAIN (pipeline::chain_at) takes two
  // bindings the recorder adds after the caller's: a slot of `counters` its workgroups count out on
  // as they finish (the last sets the slot's done word), and a slot whose done word each workgroup
  // waits for after issuing its first weight loads and before reading anything a kernel wrote.
  // Where a dispatch needs a barrier, is a CHAIN kernel, and the one dispatch since the last barrier
  // or chain is a CHAIN kernel too, the recorder binds that kernel's slot instead of recording the
  // barrier: its workgroups start and load weights while the producer's last ones finish. A CHAIN
  // kernel whose hazards are only with what that level's first kernel waited for waits for the same
  // slot, beside it (Q, K and V after the down matvec). Every other dispatch waits on slot 0, which
  // begin() marks done. Slots are `stride` bytes apart.
  void set_chain(buffer_range counters, std::uint32_t stride) noexcept { chain_ = counters, chain_stride_ = stride; }
  // Barriers a chain replaced since begin(), and the slot the last dispatch waits for (0: none).
  std::uint32_t chains() const noexcept { return chains_; }
  std::uint32_t last_wait_slot() const noexcept { return last_wait_; }

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
  void forget_chain();
  buffer_range chain_slot(std::uint32_t slot) const noexcept;
  const vk::raii::CommandBuffer* cmd_ = nullptr;
  bool lab_no_barrier_ = false, barrier_all_ = false;
  std::vector<std::string> lab_no_barrier_before_;
  vk::QueryPool queries_;
  std::uint32_t query_capacity_ = 0, first_query_ = 0, barriers_ = 0;
  std::vector<std::uint32_t> written_, read_;  // buffer ids since the last barrier or chain
  buffer_range chain_{};
  std::uint32_t chain_stride_ = 0, chains_ = 0, next_slot_ = 1;
  // Buffer ids of the kernels between the last barrier and the last chain: finished for the
  // dispatches that wait on level_wait_, not for the others.
  std::vector<std::uint32_t> chained_written_, chained_read_;
  // Dispatches since the last barrier or chain; the slot of the one kernel of that level (0: none
  // to wait on); the slot the level's kernels wait for (0: the level began at a barrier).
  std::uint32_t level_size_ = 0, chain_prev_ = 0, level_wait_ = 0, last_wait_ = 0;
  std::vector<std::string> labels_;
  std::vector<std::uint64_t> weight_bytes_;
};

// Records `record` into a one-time command buffer of ctx's queue, submits it and waits for it
// (set-up work: probes, load-time expansions); throws naming `what` and the device if it does not finish.
void run_once(const context& ctx, const std::function<void(command_recorder&)>& record, const std::string& what);

}  // namespace strata::gpu
