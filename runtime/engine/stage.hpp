// A stage: one backend running a contiguous slice of a model's layers (the decoder over that
// backend, its KV storage and the backend itself). A model is one stage, or several that hand the
// hidden states on once per step (-ngl: GPU layers, then CPU layers with the head); every stage
// of a model addresses its KV storage through the model's one kv::block_table.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../tiers/block_stream.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/graph/batch.hpp"
#include "strata/kv/block_table.hpp"
#include "strata/runtime/engine.hpp"

namespace strata::rt {

// Layers [first, first + count) of the model; the first stage embeds, the last has the head.
struct layer_slice {
  std::uint32_t first = 0, count = 0;
  bool embed = true, head = true;
  std::vector<std::uint32_t> cpu_expert_layers;  // MoE blocks whose routed experts the CPU computes (GPU stages)
  std::vector<std::uint32_t> cached_expert_layers;  // ... that are GPU-cached (GPU stages), expert_slots each
  std::uint32_t expert_slots = 0;
  std::vector<std::uint32_t> streamed_layers;  // blocks whose dense FFN is streamed (GPU stages)
  std::uint32_t stream_cpu_tokens = 0;         // ... computed on the CPU in steps of at most this many tokens
  // CPU stages: tensors read from disk_file every step through a ring of disk_slots block slots
  // (the disk tier, runtime/tiers/block_stream.hpp); empty: every weight resident.
  std::filesystem::path disk_file;
  std::vector<tiers::streamed_tensor> disk_tensors;
  std::uint32_t disk_slots = 0;
  // GPU stages: blocks of cpu_expert_layers whose experts stream through the expert ring in
  // steps of more than expert_cpu_tokens tokens (runtime/vulkan/expert_stream.cpp).
  std::vector<std::uint32_t> streamed_expert_layers;
  std::uint32_t expert_cpu_tokens = 0;
  // GPU stages: streamed blocks whose FFN the link carries in the steps that compute the others
  // on the CPU (tiers::engine_layout::link_layers).
  std::vector<std::uint32_t> stream_link_layers;
  double stream_link_ratio = 0;  // the link's bytes per byte the CPU reads (tiers::link_bytes_per_cpu_byte)
  // GPU stages: a decode step computes a cached block on the CPU when at least this share of its
  // routed experts miss the slots (tiers::engine_layout::expert_cpu_misses; 0: never).
  float expert_cpu_misses = 0;
  // GPU stages: prompt steps copy each cached block's experts whole into a staging pair on the GPU
  // (tiers::engine_layout::expert_cache_stage).
  bool expert_cache_stage = false;
};

class stage {
 public:
  virtual ~stage() = default;
  // One step over this stage's layers (graph::decoder::forward): kv holds the slots of b's
  // positions, reserved by the model.
  virtual void forward(const graph::batch& b, const kv::block_table& kv, std::span<float> logits,
                       std::span<const float> hidden_in, std::span<float> hidden_out,
                       std::span<std::int32_t> argmax_out, std::span<float> embd_out) = 0;
  virtual std::string description() const = 0;
  virtual std::string startup_report() const { return {}; }
  virtual std::vector<model::kernel_time> kernel_profile() const { return {}; }
  virtual void reset_kernel_profile() {}
  virtual model::expert_cache_counters expert_cache() const { return {}; }
  virtual model::stream_counters streaming() const { return {}; }
  virtual model::stream_counters expert_streaming() const { return {}; }
  virtual model::disk_counters disk_tier() const { return {}; }
  virtual model::recording_counters step_recordings() const { return {}; }
  virtual model::handoff_counters handoffs() const { return {}; }
  virtual std::uint32_t step_granule() const noexcept { return 1; }
  // model::record_steps for this stage's layers (n_ctx: the KV slots, for positions of long steps).
  virtual void record_steps(const model::step_shapes& s, std::uint32_t n_ctx, const kv::block_table& kv) {
    (void)s, (void)n_ctx, (void)kv;
  }
};

// The stage factory of each backend (the GGUF's architecture picks the decoder instantiation),
// defined in runtime/engine/<backend>_stage.cpp; make_stage() is the one switch over them.
std::unique_ptr<stage> make_cpu_stage(const gguf::reader& r, const engine_options& opt, const layer_slice& layers);
#ifdef STRATA_HAS_VULKAN
std::unique_ptr<stage> make_vulkan_stage(const gguf::reader& r, const engine_options& opt, const layer_slice& layers);
#endif
std::unique_ptr<stage> make_stage(backend_kind kind, const gguf::reader& r, const engine_options& opt,
                                  const layer_slice& layers);

// Which backend runs which layers.
struct stage_plan {
  backend_kind kind = backend_kind::cpu;
  layer_slice layers;
};
// The engine's model: stages over consecutive slices covering every layer, one block table.
std::unique_ptr<model> make_staged_model(std::unique_ptr<gguf::file> f, const engine_options& opt,
                                         const arch::hparams& hp, std::span<const stage_plan> plan);

}  // namespace strata::rt
