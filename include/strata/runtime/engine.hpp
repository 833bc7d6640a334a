// Public API of the runtime engine: load a GGUF model on one backend or split over two (-ngl;
// runtime/engine/model.cpp; the architecture string picks the decoder instantiation in
// arch::visit), evaluate batches, and run sessions that reuse the common prefix of consecutive
// prompts.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/arch/architecture.hpp"
#include "strata/core/error.hpp"
#include "strata/core/progress.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/graph/batch.hpp"
#include "strata/kv/block_table.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/tiers/links.hpp"

namespace strata::rt {

// auto_select: Vulkan when this build has it and a GPU (not a CPU emulation) is present, else
// the CPU; the chosen backend is always reported (model::backend_description), never silent.
enum class backend_kind { cpu, vulkan, auto_select };

inline backend_kind parse_backend_kind(std::string_view s) {
  if (s == "cpu") return backend_kind::cpu;
  if (s == "vulkan") return backend_kind::vulkan;
  if (s == "auto") return backend_kind::auto_select;
  throw error("unknown backend '" + std::string(s) + "' (expected auto, cpu or vulkan)");
}

// True when this build includes the Vulkan backend.
bool vulkan_compiled_in() noexcept;
// Names of the Vulkan devices the loader reports (empty, not an error, when there is none).
std::vector<std::string> vulkan_devices();
// The backend model::load runs for these options: auto_select resolved as above (cpu and vulkan
// as given), so a caller can key what it caches per machine (the link probe) the same way.
backend_kind resolve_backend(backend_kind k, int device);

struct engine_options {
  backend_kind backend = backend_kind::cpu;
  unsigned threads = 0;          // 0: physical cores
  int device = -1;               // Vulkan device index (-1: the best GPU)
  std::int32_t n_gpu_layers = -1; // Vulkan: layers placed on the GPU (-1 or >= n_layer: all)
  bool gpu_profile = false;      // Vulkan: per-kernel timestamps (slower; for strata-bench)
  std::uint32_t n_ctx = 4096;    // KV slots shared by all sequences (0: the model's context_length)
  // Most tokens per forward step (prefill chunk); 0: the engine chooses (placement.hpp's
  // prompt_step_tokens: 2,048 where the model runs whole on a GPU with room, else 512).
  // model::options() reports the choice.
  std::uint32_t n_batch = 0;
  std::uint32_t n_seq = 1;       // sequences resident at once
  std::uint32_t max_outputs = 0; // most logits rows per step (0: n_batch)
  kv::kv_type type_k = kv::kv_type::f16;
  kv::kv_type type_v = kv::kv_type::f16;
  // Compressed KV types (q8_0, tq4, tq3, tq2): recent tokens attention reads in f16 (0: none).
  std::uint32_t kv_window = kv::default_full_precision_window;
  // Long steps report here (may be empty): weight upload and pipeline builds (Vulkan), prefills
  // of more than one batch.
  progress_fn progress;
  // Memory tiers (issue 14; include/strata/tiers/engine_layout.hpp): Vulkan, and the RAM budget
  // and disk rules on the CPU too.
  std::uint64_t gpu_budget = 0;  // hard cap on the GPU memory of weights, KV and scratch (0: none;
                                 // with fit: the free memory VK_EXT_memory_budget reports, minus a margin)
  std::uint64_t ram_budget = 0;  // CPU-side weights, KV and scratch (0: unchecked; with fit: MemAvailable minus a margin);
                                 // CPU blocks beyond it stream from the model file (tiers/disk_tier.hpp)
  std::vector<std::string> override_tensor;  // -ot rules "REGEX=gpu|cpu|disk[,...]"
  bool cpu_moe = false;          // routed experts of every MoE block computed on the CPU
  std::uint32_t n_cpu_moe = 0;   // ... of the first N blocks
  // --expert-cache SLOTS: the routed experts of the GPU's MoE blocks (those not sent to the CPU)
  // live in host memory and the GPU holds SLOTS experts of each block (SLRU); unset: off.
  std::optional<std::uint32_t> expert_cache;
  // --stream-layers N: the dense FFN of the last N GPU blocks lives in pinned host memory and is
  // streamed through a 2-slot GPU ring every step (attention and KV stay resident); 0: off.
  std::uint32_t stream_layers = 0;
  // --stream-link N: in steps that compute the streamed FFNs on the CPU (decode), the link
  // carries N of them into the ring for the GPU meanwhile (tiers::spread_link_blocks); unset: the
  // cost model's choice (tiers::stream_link_blocks), 0: all on the CPU.
  std::optional<std::uint32_t> stream_link;
  // Routed experts the CPU computes (--cpu-moe, --n-cpu-moe, -ot, --fit) stream through a 2-slot
  // GPU ring in prompt steps longer than the link speeds' threshold, when the GPU budget holds
  // the ring (tiers::with_streamed_experts); false: --no-stream-experts, always on the CPU.
  bool stream_experts = true;
  // --fit may GPU-cache routed experts (tiers::plan_engine_layout); false: --no-expert-cache, each
  // block's experts resident or computed by the CPU.
  bool cache_experts = true;
  // --expert-misses cpu|gpu: where a GPU expert cache's decode misses are computed (the CPU from
  // RAM, or the GPU reading them over the link); unset: the cost model's choice.
  std::optional<bool> expert_cpu_misses;
  // The planner chooses the GPU blocks and which blocks' experts the CPU computes, within the
  // budgets (n_gpu_layers is then not read); else -ngl and the overrides say it, and a layout
  // beyond gpu_budget is an error naming it.
  bool fit = false;
  // --f16-weights auto|on|off: an f16 copy of each layer weight matrix on the GPU, which prompt
  // steps' tensor-core GEMMs read instead of expanding the quantized weights every step (decode
  // reads the quantized weights either way). Unset (auto): where no GPU budget is set (neither
  // gpu_budget nor fit) and the free GPU memory holds the copies with a margin
  // (backend_options::f16_copies). The default since session 66 measured +11% on qwen3-8b and
  // llama-3.1-8b Q4_K_M pp512 on the H100 (bench/RESULTS.md).
  std::optional<bool> f16_weights;
  // Link speeds the planner weighs (unset: the probe's cache, `strata-run --plan --probe`, else
  // assumed desktop numbers); tests set them to force a layout on a tiny model.
  std::optional<tiers::link_speeds> links;
};

// A loaded model with its KV cache; not thread-safe (one step at a time).
class model {
 public:
  virtual ~model() = default;
  static std::unique_ptr<model> load(const std::filesystem::path& path, const engine_options& opt = {});

  virtual const arch::hparams& hparams() const noexcept = 0;
  virtual const gguf::reader& gguf() const noexcept = 0;
  virtual const engine_options& options() const noexcept = 0;
  virtual std::string backend_description() const = 0;
  // Vulkan: pipelines built / taken from the cache and upload time at load (empty on CPU).
  virtual std::string startup_report() const { return {}; }
  // Vulkan with gpu_profile: GPU time per kernel since load (or the last reset), slowest first.
  struct kernel_time {
    std::string label;
    double total_ms = 0;
    std::uint64_t calls = 0;
    double weight_bytes = 0;  // weight bytes its dispatches bound (expert matmuls: every expert)
  };
  virtual std::vector<kernel_time> kernel_profile() const { return {}; }
  // Where the layers run: the leading n_gpu_layers() blocks on the GPU (0 when none), the rest
  // on the CPU, and the GPU blocks whose routed experts the CPU computes (a hand-off each).
  virtual std::uint32_t n_gpu_layers() const noexcept { return 0; }
  virtual std::vector<std::uint32_t> cpu_expert_layers() const { return {}; }
  // GPU blocks whose routed experts are GPU-cached (--expert-cache), and the cache's counters.
  virtual std::vector<std::uint32_t> cached_expert_layers() const { return {}; }
  struct expert_cache_counters {
    std::uint32_t layers = 0, slots = 0;
    std::uint64_t hits = 0, misses = 0, evictions = 0, bytes_uploaded = 0, tokens = 0;
    std::uint64_t gpu_blocks = 0, cpu_blocks = 0;  // block-steps from the slots / on the CPU (more experts than slots, or misses)
    // Router-driven prefetch: blocks predicted from the block before; experts uploaded ahead (their
    // bytes are in bytes_uploaded too), used by their step, evicted unused; the prediction's recall.
    std::uint32_t predictors = 0;
    std::uint64_t prefetched = 0, prefetch_bytes = 0, prefetch_used = 0, prefetch_wasted = 0;
    std::uint64_t predicted_routed = 0, routed_with_prediction = 0;
    // The lookup form (the GPU maps experts to slots, a miss read from host memory over PCIe, no
    // split): block-steps run so, and the expert bytes those misses read over the link.
    std::uint64_t lookup_blocks = 0, host_read_bytes = 0;
    // Of cpu_blocks, those sent to the CPU for their misses (STRATA_VK_CACHE_CPU_MISSES).
    std::uint64_t miss_cpu_blocks = 0;
    std::uint32_t cpu_miss_tokens = 0;  // steps of at most this many tokens split for their misses (0: off)
    // Prompt steps' staging on the GPU (its bytes; 0: off), and the block-steps that copied a
    // block's experts there, with their bytes.
    std::uint64_t stage_bytes = 0, staged_blocks = 0, staged_bytes = 0;
    std::uint64_t share_blocks = 0;  // of miss_cpu_blocks: with the GPU computing a share of the missed expert beside the CPU
    double hit_rate() const noexcept { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
    // Of the experts routed where the block before predicted, the share it predicted.
    double prefetch_recall() const noexcept {
      return routed_with_prediction ? double(predicted_routed) / double(routed_with_prediction) : 0.0;
    }
    // Of the experts uploaded ahead, the share a step then used.
    double prefetch_accuracy() const noexcept { return prefetched ? double(prefetch_used) / double(prefetched) : 0.0; }
    double bytes_per_token() const noexcept { return tokens ? double(bytes_uploaded) / double(tokens) : 0.0; }
  };
  virtual expert_cache_counters expert_cache() const { return {}; }
  // GPU blocks whose dense FFN is streamed through the ring (--stream-layers, --fit), and the
  // streaming counters: every step copies each streamed block's FFN once.
  virtual std::vector<std::uint32_t> streamed_layers() const { return {}; }
  struct stream_counters {
    std::uint32_t layers = 0;
    std::uint64_t ring_bytes = 0, host_bytes = 0, bytes_per_step = 0;
    std::uint64_t bytes_streamed = 0, tokens = 0, steps = 0;
    std::uint64_t cpu_steps = 0;     // steps that computed the streamed FFNs on the CPU (the decode phase)
    std::uint32_t cpu_tokens = 0;    // ... those of at most this many tokens
    // Expert ring only: block-steps whose GPU computed a share of the experts from the pinned
    // copy while the CPU computed the rest, and the bytes it read there over the link.
    std::uint64_t share_blocks = 0, share_bytes = 0;
    // Dense ring only: blocks the link carries in the CPU phase's steps (--stream-link), their bytes a step.
    std::uint32_t link_layers = 0;
    std::uint64_t link_bytes_per_step = 0;
    double bytes_per_token() const noexcept { return tokens ? double(bytes_streamed) / double(tokens) : 0.0; }
    double share_bytes_per_token() const noexcept { return tokens ? double(share_bytes) / double(tokens) : 0.0; }
  };
  virtual stream_counters streaming() const { return {}; }
  // Hand-off blocks whose routed experts stream through the expert ring in prompt steps (the
  // default with CPU experts; --no-stream-experts), and its counters (cpu_steps: steps that
  // handed them to the CPU instead; cpu_tokens: the threshold).
  virtual std::vector<std::uint32_t> expert_streamed_layers() const { return {}; }
  virtual stream_counters expert_streaming() const { return {}; }
  // CPU blocks whose tensors are read from the model file every step (the disk tier: O_DIRECT,
  // io_uring, a ring of block slots one block ahead of the compute), and its counters since load.
  virtual std::vector<std::uint32_t> disk_layers() const { return {}; }
  struct disk_counters {
    std::uint32_t blocks = 0, slots = 0;
    std::uint64_t slot_bytes = 0, bytes_per_step = 0;
    std::uint64_t bytes_read = 0, block_reads = 0, stalls = 0, steps = 0, tokens = 0;
    double read_seconds = 0;   // the reader thread busy reading
    double stall_seconds = 0;  // the compute thread waiting for a block's bytes
    double bytes_per_token() const noexcept { return tokens ? double(bytes_read) / double(tokens) : 0.0; }
    double read_gbps() const noexcept { return read_seconds > 0 ? double(bytes_read) / read_seconds / 1e9 : 0.0; }
  };
  virtual disk_counters disk_tier() const { return {}; }
  // Steps a recording backend (Vulkan) recorded since load, and the host time that took; every
  // other step replayed one (step sizes: runtime/vulkan/step_buckets.hpp).
  struct recording_counters {
    std::uint64_t steps = 0;
    double ms = 0;
    // The last step run (recorded or replayed): its dispatches and the barriers between them, the
    // dependency levels it runs through less one (a model in stages: each stage's boundary counted
    // as a barrier; with gpu_profile a barrier follows every dispatch).
    std::uint32_t last_dispatches = 0, last_barriers = 0;
  };
  virtual recording_counters step_recordings() const { return {}; }
  // Hand-offs between the GPU and the CPU (Vulkan with memory tiers): in every step since load, the
  // CPU's parts between the GPU's (routed experts on the CPU, a GPU-cached block's split, a
  // streamed dense FFN on the CPU). Per token: handoffs / tokens.
  struct handoff_counters {
    std::uint64_t steps = 0;     // steps run since load
    std::uint64_t tokens = 0;    // their tokens
    std::uint64_t handoff_steps = 0, handoffs = 0;  // steps with at least one hand-off, hand-offs in all
    std::uint64_t polled_steps = 0;  // steps whose end the host saw polling their fence (Vulkan, STRATA_VK_STEP_SPIN_US)
    double per_token() const noexcept { return tokens ? double(handoffs) / double(tokens) : 0.0; }
    double per_step() const noexcept { return steps ? double(handoffs) / double(steps) : 0.0; }
  };
  virtual handoff_counters handoffs() const { return {}; }
  // The steps a scheduler runs, recorded ahead of the first request by a recording backend
  // (Vulkan: runtime/vulkan/step_cache.cpp), so that no request waits for a step to be recorded:
  // steps of 1..max_tokens tokens (as the sizes the backend pads them to) of one sequence or
  // several, and their outputs, as logits and as argmax ids: every row (decodes of up to max_seqs
  // streams) or up to min(max_seqs, max_outputs) rows gathered (steps that prefill too). Nothing
  // runs and the KV cache is untouched. Returns what was recorded (no-op elsewhere: zeros).
  struct step_shapes {
    std::uint32_t max_tokens = 0, max_seqs = 1, max_outputs = 0;
  };
  virtual recording_counters record_steps(const step_shapes& s) {
    (void)s;
    return {};
  }
  // A step of more than this many tokens costs about what its count rounded up to a multiple of
  // it costs (the GPU's prefill GEMM works in token tiles of this width; 1: no such steps). The
  // scheduler fits the prompt tokens of steps that also decode to it.
  virtual std::uint32_t step_granule() const noexcept { return 1; }
  virtual void reset_kernel_profile() {}
  // The model's one KV bookkeeping (every backend's storage follows it): sessions and the
  // scheduler read it and truncate or clear sequences; steps reserve and commit it.
  virtual kv::block_table& kv() noexcept = 0;
  // One forward step; positions must continue each sequence (the slots are reserved here).
  virtual void forward(const graph::batch& b, std::span<float> logits) = 0;
  // The same step for greedy decoding: each logits row's argmax (lowest id among ties), computed
  // on the backend (on the GPU only 4 bytes per row come back).
  virtual void forward_argmax(const graph::batch& b, std::span<std::int32_t> ids) = 0;
  // The same step for embeddings: each flagged row's hidden state after the output norm
  // (n_embd floats per row, what llama.cpp pools), without the LM head. The engine's models do
  // it on every backend; a model that cannot (supports_embeddings() false) throws.
  virtual void forward_embeddings(const graph::batch& b, std::span<float> out) {
    (void)b, (void)out;
    throw error("embeddings are not implemented on the " + backend_description() + " backend");
  }
  virtual bool supports_embeddings() const noexcept { return false; }
};

// One sequence of a model: prefill with prefix reuse, then decode token by token.
class session {
 public:
  explicit session(model& m, std::uint32_t seq = 0);

  // Evaluates `prompt`, reusing the longest common prefix already in this sequence's cache.
  // Returns the logits of the last prompt token. With all_logits, every prompt position's
  // logits (row-major [n][n_vocab]) are written there (the whole prompt is then re-evaluated).
  std::span<const float> prefill(std::span<const std::int32_t> prompt, std::vector<float>* all_logits = nullptr);
  // Appends one token and returns its logits.
  std::span<const float> decode(std::int32_t token);
  // Appends one token and returns the argmax of its logits (greedy decoding without reading the
  // logits back).
  std::int32_t decode_argmax(std::int32_t token);

  std::uint32_t n_past() const { return model_->kv().length(seq_); }
  std::uint32_t reused_tokens() const noexcept { return reused_; }  // of the last prefill
  void clear() { model_->kv().clear(seq_); }
  model& get_model() noexcept { return *model_; }

 private:
  void run(std::span<const std::int32_t> toks, std::uint32_t start_pos, bool every_row, float* out);
  model* model_;
  std::uint32_t seq_;
  std::uint32_t reused_ = 0;
  std::vector<float> last_;
  std::vector<std::int32_t> pos_;
  std::vector<std::uint32_t> seq_ids_;
  std::vector<std::uint8_t> want_;
  std::vector<float> chunk_logits_;
};

}  // namespace strata::rt
