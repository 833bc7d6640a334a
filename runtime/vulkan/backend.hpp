// The Vulkan backend of the decoder graph (graph/backend_contract.hpp): each op records a
// compute dispatch instead of running it. A whole forward step (all layers) is one command buffer, recorded once per
// batch shape (tokens, logits rows) and replayed: per-step inputs (token ids, positions, KV
// slots, block tables, output rows) live in a host-visible step buffer that the recorded
// kernels read, so a decode step costs one buffer write, one submit and one wait.
// This header does not include Vulkan: the decoder instantiations stay light to compile.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/progress.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/graph/backend_contract.hpp"
#include "strata/kv/kv_config.hpp"

namespace strata::gpu {

// View of rows x cols floats in GPU buffer `buf`, starting `off` floats in, rows `stride` apart.
struct tensor {
  std::uint32_t buf = 0;
  std::uint32_t off = 0;
  std::uint32_t rows = 0, cols = 0, stride = 0;

  tensor first_rows(std::uint32_t n) const noexcept { return {buf, off, n, cols, stride}; }
  tensor first_cols(std::uint32_t n) const noexcept { return {buf, off, rows, n, stride}; }
  tensor split_rows(std::uint32_t parts) const noexcept { return {buf, off, rows * parts, cols / parts, cols / parts}; }
  bool operator==(const tensor&) const = default;
};

class buffer {
 public:
  buffer() = default;
  buffer(std::uint32_t id, std::uint32_t rows, std::uint32_t cols) : id_(id), rows_(rows), cols_(cols) {}
  tensor view(std::uint32_t rows) const noexcept { return {id_, 0, rows, cols_, cols_}; }
  tensor all() const noexcept { return view(rows_); }
  std::uint32_t rows() const noexcept { return rows_; }

 private:
  std::uint32_t id_ = 0, rows_ = 0, cols_ = 0;
};

struct weight {
  std::uint32_t id = ~0u;  // index into the backend's weight table
  gguf::type_id type = gguf::type_id::f32;
  std::uint64_t ne[4] = {0, 1, 1, 1};
  std::size_t row_bytes = 0;
  std::string_view name;
  explicit operator bool() const noexcept { return id != ~0u; }
};

// KV cache resident on the GPU (slots assigned by the model's kv::block_table, which each step
// uploads): one K and one V buffer per layer, [slot][n_head_kv] head vectors
// in the side's type (f32, f16, q8_0 blocks or one packed TurboQuant row, the CPU's kv_codec
// layout, so bytes per token match). Compressed types also keep the full-precision window: per
// layer an f16 ring of ring_rows = window + max_batch rows per sequence for each compressed
// side, [seq][ring row][n_head_kv·head_dim], and the position each ring row holds (tags).
struct kv_window_ring {
  std::uint32_t rows = 0;                    // per sequence (0: no window)
  std::vector<std::uint32_t> k, v, tags;     // buffer ids per layer (0: none)
};
class kv_state {
 public:
  using ring = kv_window_ring;
  kv_state() = default;
  kv_state(const kv::kv_config& cfg, std::vector<std::uint32_t> k, std::vector<std::uint32_t> v, ring r = {})
      : cfg_(cfg), k_(std::move(k)), v_(std::move(v)), ring_(std::move(r)) {}
  const kv::kv_config& config() const noexcept { return cfg_; }
  std::uint32_t k_buffer(std::uint32_t layer) const { return k_.at(layer); }
  std::uint32_t v_buffer(std::uint32_t layer) const { return v_.at(layer); }
  const ring& window_ring() const noexcept { return ring_; }
  bool compressed() const noexcept { return kv::is_compressed(cfg_.type_k) || kv::is_compressed(cfg_.type_v); }

 private:
  kv::kv_config cfg_;
  std::vector<std::uint32_t> k_, v_;
  ring ring_;
};

struct backend_options {
  int device = -1;                    // Vulkan device index (-1: best)
  bool profile = false;               // per-kernel timestamps (adds a barrier per dispatch)
  std::filesystem::path cache_dir;    // SPIR-V + pipeline cache (empty: default_cache_dir())
  progress_fn progress;               // weight upload ("upload") and pipeline builds ("compile")
  // Memory tiers (issue 14): the cap on device-local memory, checked before each allocation
  // (--gpu-budget; 0: none), and the MoE blocks whose routed experts the CPU computes: their
  // expert tensors stay in host memory and moe_ffn hands the rows to the CPU kernels mid-step
  // (runtime/vulkan/cpu_experts.hpp), on cpu_threads threads (0: one per physical core).
  std::uint64_t memory_budget = 0;
  std::vector<std::uint32_t> cpu_expert_layers;
  unsigned cpu_threads = 0;
  // MoE blocks whose routed experts are GPU-cached (runtime/vulkan/expert_cache.cpp): the expert
  // tensors live in host-visible memory, the GPU holds expert_slots experts of each block
  // (device-local, in the weight ledger), filled on a miss with SLRU eviction. A step that routes
  // more distinct experts than slots in a block computes that block's experts on the CPU.
  std::vector<std::uint32_t> cached_expert_layers;
  std::uint32_t expert_slots = 0;
  // Blocks whose dense FFN (ffn_gate/up/down) is streamed (runtime/vulkan/layer_stream.cpp): the
  // tensors live in pinned host memory and each step copies them, block by block, into a ring of
  // two device-local slots (in the ledger) one block ahead of the kernels that read them.
  std::vector<std::uint32_t> streamed_layers;
  // The per-phase choice: steps of at most this many tokens compute the streamed FFNs on the
  // CPU instead (runtime/vulkan/cpu_ffn.hpp: a hand-off each way per block; 0: always stream).
  std::uint32_t stream_cpu_tokens = 0;
  // Blocks of cpu_expert_layers whose routed experts are also streamed for prefill
  // (runtime/vulkan/expert_stream.cpp): steps of more than expert_cpu_tokens tokens copy the
  // block's expert tensors (every expert) from pinned host memory into a 2-slot device ring and
  // run the GPU's MoE kernels on them; shorter steps (decode) hand the rows to the CPU as before.
  std::vector<std::uint32_t> streamed_expert_layers;
  std::uint32_t expert_cpu_tokens = 0;
  // Streamed blocks whose FFN steps of at most stream_cpu_tokens tokens still copy into the ring
  // (the GPU computes them) while the CPU computes the others; each copy rides the hand-offs of
  // the CPU's FFNs before its block (tiers/link_schedule.hpp, filling each with what the link
  // moves while the CPU reads its FFN: stream_link_ratio bytes per byte) and runs while the CPU
  // works (layer_stream.cpp).
  std::vector<std::uint32_t> stream_link_layers;
  double stream_link_ratio = 0;
  // GPU-cached blocks: a step of a few tokens (decode) whose routed experts miss the slots at
  // least this share of them (0 < F <= 1) is computed on the CPU, which reads a large expert from
  // DRAM faster than the link carries it (expert_cache_misses.cpp); 0: off.
  // STRATA_VK_CACHE_CPU_MISSES overrides it.
  float expert_cpu_misses = 0;
  // GPU-cached blocks (lookup form): prompt steps of more than 16 tokens copy each block's experts
  // whole from the host copy into a device-local staging pair (the largest block's gate + up and
  // down, in the ledger) before its expert kernels, which read a miss there instead of over the
  // link (expert_cache_stage.cpp). The planner's choice for large experts where the budget holds it;
  // STRATA_VK_CACHE_STAGE=0|1 overrides it.
  bool expert_cache_stage = false;
  // f16 copies of the layers' weight matrices (f16_copies.cpp) that prompt steps' tensor-core GEMMs
  // read in place of the f16 scratch's per-step expansion; made at make_kv(), after the KV cache and
  // the scratch. true: as many as the GPU budget (or the free memory, less 512 MiB) holds; false:
  // none (--f16-weights off); unset (auto, the engine's default): none under a budget (--gpu-budget,
  // or --fit's plan) or where the device reports no VK_EXT_memory_budget (its free memory unknown),
  // else as many as the free memory holds with a quarter of the GPU's memory (at least 4 GiB) to spare.
  // STRATA_VK_F16_COPIES=0|1 overrides it.
  std::optional<bool> f16_copies;
};

// Dense layer streaming's counters since load.
struct stream_stats {
  std::uint32_t layers = 0;          // streamed blocks
  std::uint64_t ring_bytes = 0;      // device-local: both slots
  std::uint64_t host_bytes = 0;      // pinned copies of the streamed tensors
  std::uint64_t bytes_per_step = 0;  // copied host -> ring each step
  std::uint64_t bytes_streamed = 0, tokens = 0, steps = 0;
  std::uint64_t cpu_steps = 0;       // steps that computed the streamed FFNs on the CPU
  std::uint32_t cpu_tokens = 0;      // stream_cpu_tokens (expert_cpu_tokens for the expert ring)
  // The expert ring's blocks only: block-steps whose GPU computed a share of the experts from the
  // pinned copy beside the CPU (cpu_experts.cpp record_shared_moe), and the bytes it read there.
  std::uint64_t share_blocks = 0, share_bytes = 0;
  // The dense ring only: blocks the link carries in the CPU phase's steps, and their bytes a step.
  std::uint32_t link_layers = 0;
  std::uint64_t link_bytes_per_step = 0;
};

// The expert cache's counters since load (all cached blocks together).
struct expert_cache_stats {
  std::uint32_t layers = 0, slots = 0;  // cached blocks, slots per block
  std::uint64_t hits = 0, misses = 0;   // per distinct expert of a block and step (GPU-computed steps, and CPU misses')
  std::uint64_t evictions = 0;
  std::uint64_t bytes_uploaded = 0;     // expert weights copied host -> slots
  std::uint64_t tokens = 0;             // tokens of the steps run
  std::uint64_t gpu_blocks = 0, cpu_blocks = 0;  // block-steps computed from the slots / on the CPU (overflow or misses)
  std::uint64_t miss_cpu_blocks = 0;  // of cpu_blocks: sent to the CPU for their misses (STRATA_VK_CACHE_CPU_MISSES)
  std::uint32_t cpu_miss_tokens = 0;  // steps of at most this many tokens split for that (0: off)
  bool miss_handoff = false;           // ... in the lookup form with a hand-off a block (expert_cache_misses.cpp), not split
  std::uint32_t miss_slice_percent = 0;  // ... the GPU computing this share of a missed expert's columns beside the CPU
  std::uint64_t share_blocks = 0;        // block-steps the CPU computed with the GPU's share beside it
  // Prompt steps' staging (backend_options::expert_cache_stage): its device bytes, the steps of
  // more than stage_tokens tokens that copy each cached block's experts there, and what they copied.
  std::uint64_t stage_bytes = 0;
  std::uint32_t stage_tokens = 0;
  std::uint64_t staged_blocks = 0, staged_bytes = 0;
  std::uint64_t host_bytes = 0, slot_bytes = 0;  // expert weights in host memory, slots on the GPU
  // Router-driven prefetch: experts uploaded ahead of their block's step (and their bytes, also in
  // bytes_uploaded), how many of those a step then used or evicted unused; of the distinct experts
  // routed in block-steps that had a prediction, how many were predicted (the prediction's recall).
  std::uint32_t predictors = 0;  // cached blocks predicted from the block before (0: prefetch off)
  std::uint64_t prefetched = 0, prefetch_bytes = 0, prefetch_used = 0, prefetch_wasted = 0;
  std::uint64_t predicted_routed = 0, routed_with_prediction = 0;
  // The lookup form (the kernels map experts to slots; a miss is read from host memory over PCIe):
  // block-steps run so, and the expert bytes its misses read from host memory.
  bool lookup = false;
  std::uint64_t lookup_blocks = 0, host_read_bytes = 0;
};

// Device-local memory the backend holds, by use, and its cap (0: none).
struct memory_use_bytes {
  std::uint64_t weights = 0, kv = 0, scratch = 0, budget = 0;
  // What the driver says this process holds (VK_EXT_memory_budget; 0 without it): the buffers above
  // plus the driver's own (pipelines, command and query pools), which no budget line counts.
  std::uint64_t driver_usage = 0;
  std::uint64_t total() const noexcept { return weights + kv + scratch; }
};

struct kernel_time {
  std::string label;
  double total_ms = 0;
  std::uint64_t calls = 0;
  double weight_bytes = 0;  // weight bytes its dispatches bound (expert matmuls: every expert)
};

struct startup_stats {
  double pipelines_ms = 0;            // compile + create
  std::uint32_t pipelines = 0, spirv_compiled = 0, spirv_cached = 0;
  double upload_ms = 0;
  std::uint64_t weight_bytes = 0;
  // f16 copies for prompt steps (backend_options::f16_copies): matrices copied, of how many the
  // GEMMs could read so, their device bytes and the time their expansion took.
  std::uint32_t f16_copies = 0, f16_candidates = 0;
  std::uint64_t f16_copy_bytes = 0;
  double f16_copy_ms = 0;
};

// Steps recorded into command buffers since start (each new step shape) and the host time their
// recording took; the other steps replayed a recorded one.
struct step_recording_stats {
  std::uint64_t steps = 0;
  double ms = 0;
};

// Steps run since load, their tokens, and the CPU hand-offs among them (cpu_experts.cpp,
// expert_cache.cpp, layer_stream.cpp); polled_steps: fence waits of plain steps (and of a hand-off
// step's opening cache-update submit) that the host's poll saw end (handoff_submit.cpp
// step_spin_us), not the driver's wait.
struct handoff_stats {
  std::uint64_t steps = 0, tokens = 0, handoff_steps = 0, handoffs = 0, polled_steps = 0;
};

class backend {
 public:
  using tensor = gpu::tensor;
  using buffer = gpu::buffer;
  using weight = gpu::weight;
  using kv_state = gpu::kv_state;

  explicit backend(const backend_options& opt = {});
  ~backend();
  backend(const backend&) = delete;
  backend& operator=(const backend&) = delete;

  std::string description() const;
  bool is_cpu_device() const;
  const startup_stats& startup() const noexcept;
  std::vector<kernel_time> profile() const;  // accumulated since start (profile option)
  void reset_profile();
  std::uint32_t dispatches_per_step() const;  // of the last step run (recorded or replayed)
  std::uint32_t barriers_per_step() const;    // of the last step run (every dispatch's own when profiling)
  // Prompt-step GEMMs recorded so far that read weights expanded while the GEMM before them ran
  // (scratch_schedule.hpp; tests check the guesses land).
  std::uint64_t scratch_hits() const;
  step_recording_stats recordings() const;
  handoff_stats handoffs() const;
  // The token count a step of n tokens runs as (step_buckets.hpp; n with STRATA_VK_STEP_BUCKETS=0):
  // the decoder pads the batch to it (graph/backend_contract.hpp, step_rows).
  std::uint32_t step_rows(std::uint32_t n) const;
  // Steps of more than this many tokens cost about what the count rounded up to a multiple of it
  // costs: the token width of the prefill GEMM's tiles (rt::model::step_granule).
  std::uint32_t step_granule() const;
  memory_use_bytes memory_use() const;
  // CPU hand-offs (MoE blocks whose experts the CPU computes) in each step.
  std::uint32_t handoffs_per_step() const;
  expert_cache_stats expert_cache() const;
  stream_stats streaming() const;
  // The same counters for routed experts streamed in prompt steps (streamed_expert_layers);
  // cpu_steps: steps that handed them to the CPU.
  stream_stats expert_streaming() const;
  // Whether a matmul of `tokens` rows over a K-wide weight of type t multiplies int8-quantized
  // activations (the integer matvec; tests pick their reference by it).
  bool int8_activations(gguf::type_id t, std::uint64_t K, std::uint32_t tokens) const;
  // Whether a plain matmul (no fused norm) of `tokens` rows over a K-wide weight of type t runs
  // on the tensor cores (mul_mm_small or the f16 GEMM: weights and activations rounded to f16;
  // an F32 MoE router from 9 tokens on the H100; tests pick their reference by it).
  bool tensor_core_matmul(gguf::type_id t, std::uint64_t K, std::uint32_t tokens) const;
  // Whether that matmul runs on mul_mm_reg (fragments built in registers; tests check it against
  // the kernels it replaces).
  bool register_fragment_matmul(gguf::type_id t, std::uint64_t K, std::uint32_t tokens) const;
  // Whether a gate/up pair of type t (K x F each, bound together) and its SwiGLU run as one f16
  // GEMM in a step of `tokens` (mul_mm_f16 SWIGLU; tests check it against the separate dispatches).
  bool fused_swiglu_gemm(gguf::type_id t, std::uint64_t K, std::uint64_t F, std::uint32_t tokens) const;
  // Whether a single-sequence step of `tokens` queries runs attention on the tensor cores
  // (attention_mma.glsl: Q and P rounded to f16, and a compressed side's decoded K / V; tests
  // pick their tolerance by it).
  bool tensor_core_attention(std::uint32_t tokens, std::uint32_t head_dim, kv::kv_type k, kv::kv_type v) const;
  // Whether an MoE step routing `pairs` (token, expert) pairs over n_expert experts whose
  // matrices take K-wide (gate/up) and F-wide (down) inputs runs them on the tensor cores
  // (mul_mm_small MOE_GROUPED: weights and activations rounded to f16).
  bool tensor_core_experts(std::uint32_t pairs, std::uint32_t n_expert, std::uint64_t K, std::uint64_t F) const;
  // Whether such a step runs all its expert matmuls on int8 tensor cores (mul_mmq.glsl: int8
  // activations, the weights' codes exact) rather than f16 ones: gate/up and down formats.
  bool int8_tensor_core_experts(std::uint32_t pairs, std::uint32_t n_expert, std::uint64_t K, std::uint64_t F,
                                gguf::type_id gate_up, gguf::type_id down) const;

  buffer alloc(std::uint32_t rows, std::uint32_t cols);
  // Also creates the step buffer (batch inputs and the block tables of kv_cfg.n_seq sequences).
  kv_state make_kv(const kv::kv_config& cfg);
  weight load(const gguf::tensor_info& t);
  // Called once after every load()/alloc(): uploads the weights, builds the pipelines, sizes
  // the step inputs (max_tokens) and the MoE routing buffers (max_routed pairs).
  void reserve(std::uint32_t max_tokens, std::uint32_t max_routed);

  // Writes the step's inputs (token ids, positions, output rows, KV slots and block tables) to
  // the step buffer, then replays the layers recorded for this shape (tokens, one sequence or
  // several, short context or long) or starts recording them.
  void begin(const graph::step_inputs& s);
  // Between the last layer and the output norm: the output part (norm, head, argmax or read) is
  // recorded and replayed apart, by its rows and kind (step_cache.cpp), so the layers of a step
  // replay whatever rows it hands back.
  void begin_output();
  // While on, steps are recorded and filed but not run (no inputs written, nothing submitted,
  // nothing read back): rt::model::record_steps makes a server's step shapes ahead of its first
  // requests. Parts recorded so stay when shapes churn.
  void record_only(bool on);
  bool can_record_ahead() const;  // room for more parts recorded ahead (fewer under a GPU budget)

  void embed(const weight& table, tensor out);
  void rms_norm(tensor x, const weight* w, float eps, tensor y);
  void matmul(const weight& w, tensor x, tensor y);
  void rope(tensor x, std::uint32_t n_heads, const graph::rope_params& p, const weight* freq_factors);
  void scale_by_position(tensor x, const graph::position_scale_params& p);
  void kv_store(kv_state& kv, std::uint32_t layer, tensor k, tensor v);
  void attention(const kv_state& kv, std::uint32_t layer, tensor q, const graph::attention_params& p, tensor out);
  void swiglu(tensor gate, tensor up, tensor out);
  void add(tensor a, tensor b, tensor out);
  void select_rows(tensor x, tensor out);
  void read(tensor src, std::span<float> dst);
  // Index of the largest value of each row (lowest among ties), computed on the GPU.
  void argmax(tensor src, std::span<std::int32_t> dst);
  // Host rows into dst at the start of the step (hidden states from another backend): staged in
  // host-visible memory every step, copied by a recorded dispatch.
  void write(tensor dst, std::span<const float> src);
  // Ends the step: submits it (recording it first if its shape is new) and waits.
  void finish();

  using moe_weights = graph::moe_weights<weight>;
  using moe_scratch = graph::moe_scratch<tensor>;
  void moe_ffn(const moe_weights& mw, const graph::moe_params& p, tensor x, const moe_scratch& s, tensor out);

 private:
  void record_rms_norm(tensor x, const weight* w, float eps, tensor y);  // rms_norm's recording
  struct impl;
  std::unique_ptr<impl> p_;
};

static_assert(graph::backend<backend>);

}  // namespace strata::gpu
