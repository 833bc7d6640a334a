// A step of the Vulkan backend as recorded once per shape and replayed (step_cache.cpp): its
// command buffers and, per CPU hand-off, what the host does between them. Private to
// runtime/vulkan (includes Vulkan).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "cpu_experts.hpp"
#include "fusion_types.hpp"
#include "memory.hpp"

namespace strata::gpu {

// Recorded steps by shape. A step with CPU hand-offs is several command buffers: the first,
// then per hand-off the CPU's work and the command buffer that continues after it.
struct step_handoff {
  cpu_experts::task task;
  vk::raii::CommandBuffer cmd{nullptr};
  // A GPU-cached block (cache >= 0): after the router, the host picks slots and either submits
  // `upload` (recorded per step: missed experts into their slots, slot ids into moe_ids) and
  // `gpu` (the expert matvecs and combine, recorded once), or has the CPU compute the block and
  // submits `cpu` (its sum into the output); `cmd` continues either way.
  std::int32_t cache = -1;
  // Such a block in the lookup form's short steps (expert_cache_misses.cpp): the host hands back
  // ids (or has the CPU compute the block) and `cmd` runs the kernels either way; no upload, gpu or cpu.
  bool miss_handoff = false;
  std::uint32_t pairs = 0;
  std::uint32_t predicted = 0;  // tokens whose next-block router scores the part before copies to the host
  vk::raii::CommandBuffer upload{nullptr}, gpu{nullptr}, cpu{nullptr};
  // A streamed block's dense FFN on the CPU (ffn >= 0: its index in `streams`; task.gate/up/
  // down are cpu_ffn indices, task.rows/cols the rows): the host runs it, then `cmd`.
  std::int32_t ffn = -1;
  // The region of the CPU's result buffer (hand_out, ffn_out) this hand-off writes and its part
  // reads: one per hand-off of a step. A part pre-submitted on the timeline semaphore gets no
  // cache invalidation after the host's write, so on the H200 a second hand-off of the step read
  // the first one's result from the GPU's L2 where both shared a region (wrong logits, session 15).
  std::uint32_t out_slot = 0;
  // The GPU's share of a CPU block's experts (cpu_experts.cpp record_shared_moe): recorded
  // apart, it runs while the CPU computes its share (between the sync's signal and its wait
  // on the flag-word path; after the part before, ahead of the CPU, on the others).
  vk::raii::CommandBuffer share{nullptr};
  std::uint64_t share_bytes = 0;  // the expert weights the share reads from host memory
};
struct recorded_step {
  vk::raii::CommandBuffer cmd{nullptr};
  std::deque<step_handoff> handoffs;  // a deque: the recorder points at the command buffer being recorded
  std::vector<std::string> labels;
  std::vector<std::uint64_t> weight_bytes;  // per dispatch, as labels
  std::uint32_t barriers = 0;               // the recorder's, between its dispatches
  bool ahead = false;  // recorded ahead of use (backend::record_only): kept when shapes churn
  // GPU-cached blocks read through their slot maps in this part (expert_cache_lookup.cpp): the
  // block's index in `cached` and the pairs its down matvec logs, read by the host after the step.
  std::vector<std::pair<std::int32_t, std::uint32_t>> lookups;
  bool staged = false;  // those blocks' experts copied whole into the staging pair first (expert_cache_stage.cpp)
  // The fusion state a layers' part ends with: the output part of a step whose output reads the
  // rows in place starts after the output norm, from this state (the norm's int8 or f16 copies of
  // its rows, or the norm itself, waiting to fold into the head), as one recording would.
  std::optional<quantized_input> quantized[2];
  std::optional<tensor> xh_holds;
  std::vector<pending_norm> norms;
};

// A step is recorded in two parts, each replayed by its own key: the layers (keyed by the
// step's token count and form: one sequence or several, short context or long) and the output
// (the final norm, the head and the argmax or read, keyed by its rows and kind). A server's
// batches change their output rows every step (decodes plus the prompts that end there); apart,
// a few recordings of each part serve every combination, and all of them can be made at start-up.
struct output_parts {
  std::map<std::uint64_t, recorded_step> recorded;
  recorded_step* current = nullptr;  // this step's output part (null: the step has none)
  std::uint64_t key = 0;             // this step's output form (step_cache.cpp)
  bool active = false;               // between begin_output() and finish()
  bool after_norm = false;           // in place: the part starts after the output norm (step_cache.cpp)
};

}  // namespace strata::gpu
