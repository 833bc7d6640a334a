// The Vulkan backend's state, shared by the files that implement it (one responsibility each):
//   tuning.hpp / .cpp     the tuning switches (STRATA_VK_*) and their measurements, a base of impl
//   backend_setup.cpp     device options, weights upload, pipelines built up front, KV buffers
//   step_cache.cpp        a step recorded once per shape and replayed (begin / finish, dispatch)
//   kernel_requests.cpp   which pipeline variant (shader + defines) an op records
//   fusion.cpp            deferred work (types: fusion_types.hpp): norms folded into matmuls, Q/K
//                         head ops into attn_prep, the MoE combine into the residual add; prepare()
//                         orders the rest
//   matmul_recording.cpp  matvec, integer matvec (int8 activations), tiled prefill matmul
//   backend.cpp           the graph ops of the contract (graph/backend_contract.hpp)
//   handoff_submit.cpp    a step's parts submitted around the CPU's hand-offs (timeline or fences)
//   recorded_step.hpp     a recorded step's command buffers and its hand-offs
//   tier_blocks.hpp       the blocks of the memory tiers: GPU-cached experts, streamed FFNs and experts
// Private to runtime/vulkan (includes Vulkan).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "commands.hpp"
#include "context.hpp"
#include "cpu_experts.hpp"
#include "cpu_ffn.hpp"
#include "fusion_types.hpp"
#include "memory.hpp"
#include "mma_layout.hpp"
#include "pipelines.hpp"
#include "push_constants.hpp"
#include "recorded_step.hpp"
#include "router_product.hpp"
#include "scratch_schedule.hpp"
#include "tier_blocks.hpp"
#include "tuning.hpp"

namespace strata::gpu {

// A switch's number (STRATA_VK_CACHE_*): `fallback` where unset; strata::error where not >= 0.
float env_float(const char* name, float fallback);

struct backend::impl : backend_tuning {
  backend_options opt;
  context ctx;
  pipeline_registry pipes;
  startup_stats stats;

  // Activation buffers and KV buffers (id = index + 1; id 0 marks read-only ranges).
  std::vector<gpu_buffer> buffers;
  std::vector<std::uint64_t> buffer_floats;

  struct weight_entry {
    const gguf::tensor_info* info = nullptr;
    std::uint32_t chunk = 0;
    std::uint64_t offset = 0, bytes = 0;
    std::int32_t host = -1;  // an expert tensor the CPU computes: its index in `host` (not uploaded)
    // An expert tensor of a GPU-cached block: its index in `cached`; then chunk/offset/bytes are
    // its slots, and cache_cpu the CPU's copy for overflow steps.
    std::int32_t cache = -1, cache_cpu = -1;
    // A dense FFN tensor of a streamed block: its index in `streams`; then chunk is a ring slot
    // and offset its place in the slot (layer_stream.cpp).
    std::int32_t stream = -1;
    // A routed-expert tensor of a CPU block streamed in prompt steps (host >= 0 too): its index
    // in `xstreams`; then chunk is an expert ring slot and offset its place there (expert_stream.cpp).
    std::int32_t xstream = -1;
  };
  // Whether the GPU's kernels ever read the tensor (in its chunk, a cache slot or a ring slot).
  static bool gpu_reads(const weight_entry& e) { return e.host < 0 || e.xstream >= 0; }
  std::vector<weight_entry> weights;
  std::vector<gpu_buffer> chunks;
  bool uploaded = false;

  // Per-step inputs (host-visible), one section each.
  gpu_buffer step;
  std::uint32_t max_rows = 0;  // tokens per step
  std::uint64_t off_tokens = 0, off_pos = 0, off_slots = 0, off_seq_row = 0, off_out_rows = 0, off_blocks = 0;
  std::uint64_t blocks_bytes = 0;
  std::uint32_t max_blocks = 0;
  std::uint32_t moe_ids = 0, moe_wts = 0;  // buffer ids
  // Pairs grouped by expert (moe.glsl MOE_GROUP) for the grouped expert matvecs: chunks of up to
  // moe_chunk pairs, used once a step routes more than two pairs per expert (grouped_experts).
  // STRATA_VK_MOE_GROUPED=0 keeps one workgroup column per pair.
  static constexpr std::uint32_t moe_chunk = 8;
  std::uint32_t moe_groups = 0, moe_max_chunks = 0, moe_sorted_off = 0;
  std::uint32_t moe_xh = 0, moe_xh_cols = 0;
  // The experts' matmuls of one MoE step on mul_mm_small (gate, up, SwiGLU, down).
  void record_moe_small(const moe_weights& mw, const tensor& in, std::uint32_t in_div, std::uint32_t pairs,
                        std::uint32_t n_expert, const tensor& g, const tensor& u, const tensor& y);
  // Groups the step's pairs by expert in chunks of `chunk` (moe.glsl MOE_GROUP); the chunk count a grouped dispatch covers.
  std::uint32_t group_experts(std::uint32_t n_expert, std::uint32_t in_div, std::uint32_t pairs, std::uint32_t chunk);
  // SwiGLU over the pairs' gate and up rows, into gate.
  void record_pair_swiglu(const tensor& g, const tensor& u, std::uint32_t pairs);
  // One grouped expert matmul on mul_mm_small over moe_xh's rows (SCATTER: each row back to its pair's).
  void record_mm_small_experts(const weight& w, const tensor& out, bool scatter, std::uint32_t pairs, std::uint32_t chunks);
  // mmq_layout: the accumulator layout (mma_layout.cpp), probed at start-up.
  std::optional<mma_layout> mmq_layout;
  bool fa_quad = false;  // attention_mma.glsl MMA_QUAD: the probe found mma.sync's layout (and fa_regs)
  std::uint32_t mmq_chunk_for(std::uint32_t pairs, std::uint32_t n_expert) const;
  bool mmq_ok(gguf::type_id t, std::uint64_t K) const;  // a matrix of rows of K can run on mul_mmq
  bool mmq_ok(const weight& w) const { return mmq_ok(w.type, w.ne[0]); }
  mma2_tile mmq_moe_tile(std::uint32_t chunk) const;  // BN = the chunk
  pipeline_request mmq_req(gguf::type_id t, const mma2_tile& s, bool grouped, bool split = false) const;
  bool mmq_dense_ok(gguf::type_id t, std::uint64_t K, std::uint32_t n) const {
    return mmq_dense && mmq_layout && n >= mmq_dense_min && n <= mmq_dense_max && n <= max_q8_rows &&
           detail::has_mmq_unit(t) && K % 64 == 0 && K <= max_k && K <= mmq_dense_max_k;
  }
  void record_moe_mmq(const moe_weights& mw, const tensor& in, std::uint32_t in_div, std::uint32_t pairs,
                      std::uint32_t n_expert, const tensor& g, const tensor& u, const tensor& y);
  std::uint32_t attn_part = 0;             // split-attention partials (allocated on first use)
  // attn_prep's rotated queries (Q_ROT; allocated on first use) and the q rows they hold, until read.
  std::uint32_t q_rot = 0;
  std::optional<tensor> q_rot_of;
  // Per (token, KV head) counters of the split attention's merge as its last workgroup's tail
  // (split_combine.glsl, STRATA_VK_TAIL decode steps): allocated zeroed on first use.
  std::uint32_t split_counters = 0;
  static constexpr std::uint32_t split_counter_count = 4096;
  std::uint32_t input = 0;                 // host-visible staging of write()
  bool single_seq = false, own_rows = false;  // every token of the step one sequence's / its sequence's only one
  gpu_buffer readback;
  gpu_buffer ids_readback;                 // argmax results (host-visible)
  std::int32_t* ids_dst = nullptr;
  std::size_t ids_count = 0;
  // Recorded steps by shape (recorded_step.hpp).
  using handoff = step_handoff;
  using recorded_step = gpu::recorded_step;
  // Memory tiers: routed experts computed by the CPU (null: all on the GPU), and the host-visible
  // buffers of their hand-off (the FFN norm's rows and router logits out, the experts' sum back).
  std::unique_ptr<cpu_experts> host;
  std::uint32_t hand_in = 0, hand_out = 0, hand_slots = 0;  // ids; hand_out: hand_slots regions of max_rows rows
  std::uint32_t hand_cols = 0;              // floats of x per row in hand_in (router logits after max_rows rows)
  // GPU-cached expert blocks (backend_options::cached_expert_layers).
  std::deque<cached_block> cached;
  std::uint32_t cache_ids_in = 0, cache_ids_out = 0;  // buffer ids: routed ids to the host, slot ids back
  std::vector<std::uint64_t> cache_seen;              // per expert: the step stamp it was last routed in
  std::vector<std::uint32_t> cache_slot_of, cache_distinct;
  std::vector<vk::BufferCopy> cache_regions[3];
  std::uint64_t cache_stamp = 0;
  expert_cache_stats cache_stats;
  handoff_stats handoff_counts;  // submit_step
  // Router-driven prefetch (expert_cache.cpp; off by default, measured slower on the H200;
  // STRATA_VK_EXPERT_PREFETCH=1 turns it on): the next
  // cached block's router scores of up to cache_pred_tokens tokens, on the GPU and read back at the
  // split, and the side queue's timeline (its last value signalled: prefetch_counter).
  bool expert_prefetch = false;
  static constexpr std::uint32_t cache_pred_tokens = 8;
  std::uint32_t cache_pred_dev = 0, cache_pred_host = 0;  // buffer ids: [token][expert] f32 scores
  std::vector<std::uint32_t> cache_rank, cache_pred_union;  // the host's top-k scratch, the predicted experts
  vk::raii::Semaphore prefetch_timeline{nullptr};
  std::uint64_t prefetch_counter = 0;
  std::uint64_t cache_step = 0;  // steps with cached blocks submitted (stamps the predictions)
  // Dense layer streaming (backend_options::streamed_layers; layer_stream.cpp): per streamed
  // block its FFN tensors in pinned host memory, laid out as in a ring slot; the ring's slots
  // are `chunks` entries (block j uses slot j % 2).
  std::vector<streamed_block> streams;
  std::uint32_t ring_chunk[2] = {0, 0}, stream_next = 0;  // stream_next: while recording, the first block not entered
  stream_stats streaming;
  // The decode phase (steps of <= opt.stream_cpu_tokens tokens): the streamed FFNs on the CPU,
  // through host-visible hand-off buffers (the FFN norm's rows out, the FFN's output back).
  std::unique_ptr<cpu_ffn> ffn_host;
  std::uint32_t ffn_in = 0, ffn_out = 0, ffn_rows = 0;  // buffer ids, rows they hold
  std::int32_t ffn_open = -1;  // while recording: the block whose FFN the CPU computes (up to its down)
  // Routed experts streamed in prompt steps (backend_options::streamed_expert_layers;
  // expert_stream.cpp). Each block is two ring items: gate + up (slot 0: read by the same
  // kernels) and down (slot 1), so the ring is one block's experts, not two, and the copy of
  // each item still runs one item ahead of its kernels.
  std::vector<xstream_block> xstreams;
  std::uint32_t xring_chunk[2] = {0, 0};
  std::uint32_t xstream_next = 0;  // while recording: the first item (2 per block) not yet entered
  stream_stats xstreaming;
  vk::raii::CommandPool pool{nullptr};
  // Per cached block predicted (cached_block::prefetch_cmd indexes it), freed before the pool.
  std::vector<vk::raii::CommandBuffer> prefetch_cmds;
  vk::raii::Fence fence{nullptr};
  vk::raii::QueryPool queries{nullptr};  // the layers' timestamps first, the output part's from output_queries
  std::uint32_t query_capacity = 0, output_queries = 0;
  std::map<std::uint64_t, recorded_step> steps;  // the layers' parts; outputs: the output parts
  recorded_step* current = nullptr;
  recorded_step pending;  // being recorded (the layers or the output)
  output_parts outputs;
  // record_only: backend::record_only; recorded_any: this step recorded a part.
  bool replay = false, recording = false, record_only = false, recorded_any = false;
  std::uint64_t current_key = 0;
  command_recorder rec;
  float* read_dst = nullptr;
  std::size_t read_floats = 0;
  std::uint32_t last_dispatches = 0, last_barriers = 0;  // of the last step run (recorded or replayed), both parts
  step_recording_stats recordings;
  std::chrono::steady_clock::time_point record_start;
  std::map<std::string, kernel_time> prof;

  // Peephole fusion while recording (STRATA_VK_FUSE=0 turns it off): an RMS norm whose only
  // consumers are matmuls is not dispatched but folded into their input (NORM_INPUT); matmuls
  // are held back one op so a following residual add (ADD_RESIDUAL) or, for a gate/up pair,
  // the SwiGLU (SWIGLU) joins their dispatch. The deferred ops' types are in fusion_types.hpp.
  using pending_norm = gpu::pending_norm;
  using pending_matmul = gpu::pending_matmul;
  using quantized_input = gpu::quantized_input;
  using head_op = gpu::head_op;
  using head_tensor = gpu::head_tensor;
  using pending_combine = gpu::pending_combine;
  using pending_encode = gpu::pending_encode;
  // Two scratch slots, so a matvec can read its quantized input from one and write its output,
  // quantized for the next matvec (QUANT_OUT), into the other.
  std::uint32_t xq[2] = {0, 0}, xs[2] = {0, 0};  // buffer ids
  std::uint32_t max_k = 0;                         // widest matmul input
  // An expert tensor the integer expert matvecs (mmvq.glsl MOE_IDS) take: an int8 unit, rows no wider than the int8 scratch.
  bool int8_expert_ok(const weight& w) const { return has_int8_unit(w.type, w.ne[0]) && w.ne[0] <= max_k; }
  std::uint32_t max_q8_rows = 0;                   // rows the int8 scratch holds (tokens or MoE pairs)
  std::uint32_t rms_sq[2] = {0, 0};  // buffer ids per slot: NORM_OUT's sums of y^2 per token and 32-row block
  // ROUTER_PARTS (moe_ffn, fusion.cpp record_router_parts): the parts' buffer id, the experts it holds, its tokens.
  std::uint32_t router_part_buf = 0, router_part_experts = 0, router_part_tokens = 8;
  // Whether the last record_matmul() wrote the parts / the next norm's first half (NORM_OUT).
  bool router_parts_recorded = false, norm_out_recorded = false, short_ctx = false;
  bool try_norm_out(const pending_norm& n), record_router_parts(const weight& router, const tensor& x, const tensor& scratch);
  bool record_norm_out_projection(const weight* parts_router, const tensor& x, const tensor& scratch);
  const pending_matmul* norm_out_projection(const tensor& x) const;
  std::optional<pipeline_request> block_tail_projection_req(const pending_matmul& m, const tensor& scratch) const;
  // router_product (router_product.cpp): per router weight id, its layer's products, and the two parts they write.
  std::vector<router_product_t> router_products;
  std::uint32_t proj_rows = 0;  // buffer id (block_norm_out): one token's raw projection rows for its block tails
  std::uint32_t router_product_parts = 0;  // buffer id: [token][2][expert] logit parts (router_product.glsl)
  void make_router_products();
  static pipeline_request router_product_req(bool q8);  // router_product.glsl: R' h (f32 input) or M a (INPUT_Q8)
  bool record_router_product(const weight& router, const tensor& x, const tensor& scratch);
  std::optional<quantized_input> quantized[2];
  std::uint32_t last_slot = 1;
  // Per-head ops on Q and K (weighted / plain RMS norm, RoPE, temperature) wait for kv_store()'s attn_prep
  // dispatch. Any other op first records them one by one, in order (flush_heads): same results.
  std::vector<head_tensor> heads;
  void record_down_combine(const pending_combine& c);  // the down matvec, the combine (+ residual, + next norm)
  void record_down_block_tail(const pending_combine& c);  // the same, the combine per 32-row block (moe_block_tail.glsl)
  bool moe_block_tail_ok(const weight& down, std::uint32_t k, std::uint32_t tokens) const;
  std::optional<pending_combine> combine;
  std::uint32_t tail_counter = 0, block_counters = 0;  // buffer ids: last-workgroup counters, 0 between dispatches
  std::optional<std::uint32_t> tail_slot;  // the quantized slot the tail just recorded wrote
  bool topk_done = false;  // the router matvec just recorded ran the top-k
  bool try_norm_tail(const pending_norm& n);
  std::vector<binding> tail_bindings(const pending_norm& n, std::uint32_t slot) const;
  norm_tail_pc tail_pc(const pending_norm& n) const;
  bool keep_heads = false;  // set while a head op or kv_store() prepares its inputs
  bool skipped(const pipeline_request& r) const;
  bool repeated(const pipeline_request& r) const;
  std::uint32_t pad_buffer = 0;  // the buffer of STRATA_VK_PAD_LEVELS's dispatches (tuning.hpp pad_levels)
  std::uint32_t step_tokens = 0;
  std::uint32_t batch_tokens = 0;  // of them the batch's own (the rest pad it: step_inputs::padding)
  bool fuse_step = true;  // fusion applies to decode-sized steps (prefill uses the tiled matmul)
  std::uint32_t mm_scratch = 0;  // buffer id of the f16 weight scratch (its first slot; mm_scratch_halves a slot)
  std::uint64_t mm_scratch_halves = 0;
  scratch_schedule scratch_plan;         // the slots, and which weights to expand ahead
  std::uint32_t scratch_slice_rows(std::uint64_t K) const;  // rows of a K-wide matrix a slot holds (>= 128)
  void record_expansion(const scratch_unit& u, std::uint32_t slot);
  std::uint32_t swiglu_part_rows(std::uint64_t K, std::uint64_t F) const;  // gate rows a slot holds with up's
  void record_mm3_swiglu_scratch(const pending_matmul& m, std::uint32_t x_off, std::uint32_t x_stride);
  std::optional<scratch_unit> scratch_next(const weight& w, const scratch_unit& u, std::uint32_t n) const;
  std::uint32_t mm_parts = 0, narrow_parts = 0;
  std::uint64_t mm_parts_floats = 0, narrow_parts_floats = 0;
  bool use_narrow_gemm(const weight& w, std::uint32_t n) const {
    return narrow_parts && n >= narrow_min_tokens && narrow_matrix(w) &&
           std::uint64_t(narrow_splits) * n * w.ne[1] <= narrow_parts_floats;
  }
  static pipeline_request narrow_req(gguf::type_id t);
  void record_narrow_gemm(const pending_matmul& m);
  void record_mmq_dense(const pending_matmul& m);
  // split_k_sum over `splits` partials of n x N in buffer parts (n * N floats apart) into y's
  // columns [col0, col0 + N): the split-K GEMMs' last dispatch.
  void record_split_sum(std::uint32_t parts, std::uint32_t N, std::uint32_t n, std::uint32_t splits, const tensor& y,
                        std::uint32_t col0, const tensor* residual = nullptr);  // y = residual + sum
  std::uint32_t mm_xh = 0, mm_xh_cols = 0;  // buffer id: max_rows x mm_xh_cols halves
  std::vector<pending_norm> norms;
  std::vector<pending_matmul> mats;
  std::vector<tensor> dropped;  // results of norms dropped unread: reading one is a bug

  explicit impl(const backend_options& o);

  // --- Buffers and bindings.
  std::uint32_t new_buffer(std::uint64_t bytes, memory_kind kind, const std::string& what) {
    buffers.emplace_back(ctx, bytes, kind, what);
    buffer_floats.push_back(bytes / 4);
    return std::uint32_t(buffers.size());
  }
  const gpu_buffer& buf(std::uint32_t id) const { return buffers.at(id - 1); }
  binding bind(const tensor& t, bool written) const {
    return {{buf(t.buf).handle(), 0, buf(t.buf).size(), t.buf}, written};
  }
  binding bind_id(std::uint32_t id, bool written) const { return {{buf(id).handle(), 0, buf(id).size(), id}, written}; }
  binding bind_weight(const weight& w) const {
    const auto& e = weights.at(w.id);
    if (e.xstream >= 0 && xstream_direct()) {  // the kernels read the pinned host copy over PCIe
      const xstream_block& b = xstreams[std::size_t(e.xstream)];
      return {{b.host[w.id == b.part[2] ? 1 : 0].handle(), e.offset, e.bytes, 0}, false, true};
    }
    return {{chunks.at(stream_chunk(e)).handle(), e.offset, e.bytes, 0}, false, true};
  }
  // A weight's chunk; a streamed FFN the link carries in this (CPU-phase) step: its slot by link rank.
  std::uint32_t stream_chunk(const weight_entry& e) const {
    if (e.stream < 0 || !stream_on_cpu()) return e.chunk;
    const std::int32_t link = streams[std::size_t(e.stream)].link;
    return link < 0 ? e.chunk : ring_chunk[link % 2];
  }
  // Gate and up as one range (adjacent() holds); up_off: up's byte offset from gate's.
  binding bind_gate_up(const weight& g, const weight& u, std::uint32_t& up_off) const {
    binding b = bind_weight(g);
    const auto &ge = weights.at(g.id), &ue = weights.at(u.id);
    b.range.bytes = ue.offset + ue.bytes - ge.offset;
    up_off = std::uint32_t(ue.offset - ge.offset);
    return b;
  }
  binding bind_step(std::uint64_t off, std::uint64_t bytes) const { return {{step.handle(), off, bytes, 0}, false}; }
  static bool same(const tensor& a, const tensor& b) {
    return a.buf == b.buf && a.off == b.off && a.rows == b.rows && a.cols == b.cols && a.stride == b.stride;
  }

  // --- step_cache.cpp: recording into the current step.
  void dispatch(const pipeline_request& r, std::span<const binding> b, const void* pc, std::uint32_t pc_bytes,
                std::uint32_t gx, std::uint32_t gy = 1);
  void dispatch3(const pipeline_request& r, std::span<const binding> b, const void* pc, std::uint32_t pc_bytes,
                 std::uint32_t gx, std::uint32_t gy, std::uint32_t gz);  // a 3-D grid within the device limits
  void start_part(bool output);            // starts recording the layers' or the output part
  void enter_output(bool implicit);       // backend::begin_output (implicit: read or argmax, when due)
  recorded_step* file_part(bool output, bool keep_norms = false);  // ends the part, files it under its key
  // --- kernel_requests.cpp: the pipeline an op records.
  static pipeline_request req(std::string shader, std::optional<gguf::type_id> fmt,
                              std::vector<std::pair<std::string, std::string>> defs, std::uint32_t bindings) {
    return {std::move(shader), fmt, std::move(defs), bindings};
  }
  pipeline_request matvec_req(gguf::type_id t, std::uint32_t nt, bool ids, std::uint64_t n_rows) const;
  static pipeline_request elementwise_req(const char* op, bool f16_out = false) {
    if (f16_out) return req("elementwise", {}, {{op, "1"}, {"F16_OUT", "1"}}, 5);
    return req("elementwise", {}, {{op, "1"}}, 4);
  }
  static pipeline_request copy_req(bool indexed, bool add = false);
  static pipeline_request norm_req(bool weighted, bool f16_out = false);
  // topk_lean: moe_topk.glsl TOPK_LEAN's experts a lane (topk_lean_slots), 0 for the full form.
  static pipeline_request moe_req(const char* stage, bool sigmoid = false, std::uint32_t topk_lean = 0);
  // The lean top-k's experts a subgroup lane where it is on (tuning.hpp topk_lean) and fits: at most
  // 256 experts, and k at most the subgroup's size (lane r keeps rank r's logit); else 0 (the full form).
  std::uint32_t topk_lean_slots(std::uint32_t n_expert, std::uint32_t k) const;
  static pipeline_request combine_norm_out_req() { return req("moe", {}, {{"MOE_COMBINE", "1"}, {"RESIDUAL", "1"}, {"NORM_OUT", "1"}}, 10); }
  static pipeline_request moe_group_req(std::uint32_t chunk = moe_chunk) { return req("moe", {}, {{"MOE_GROUP", "1"}, {"CHUNK", std::to_string(chunk)}}, 6); }
  static std::vector<std::pair<std::string, std::string>> kv_defs(const kv::kv_config& c);
  static std::vector<std::pair<std::string, std::string>> kvq_defs(const kv_state& kv);  // kinds, bits, the window ring
  // attention_dec / attention_qdec LANES and its LPK where device and head shape allow (dec_lanes); other shared: fixed,
  // a thread's, a stream's; chunk_keys: tuning's dec_chunk_keys or qdec_chunk_keys. True: LANES was added.
  bool add_dec_lanes(std::vector<std::pair<std::string, std::string>>& d, std::uint32_t head_dim, std::uint32_t group,
                     std::uint32_t chunk_keys, std::uint32_t fixed_bytes = 0, std::uint32_t thread_bytes = 0, std::uint32_t stream_floats = 0) const;
  // attention_qdec's grouped decode: kvq_defs, the group, the split forms, LANES or thread-a-key;
  // qdec_hoists: whether its TurboQuant rotations leave the kernel (tuning.hpp qdec_hoist).
  bool qdec_hoists(const kv_state& kv, std::uint32_t head_dim, std::uint32_t group, std::uint32_t rows) const;
  std::vector<std::pair<std::string, std::string>> qdec_defs(const kv_state& kv, std::uint32_t head_dim, std::uint32_t group, std::uint32_t rows,
                                                             bool split, bool ring_split, bool merge_tail, bool rot_later, std::uint32_t qrot_at) const;
  // kv_store_q and attn_prep over a compressed cache: kvq_defs and the encoder (kv_encode.glsl).
  static std::vector<std::pair<std::string, std::string>> kv_encode_defs(const kv_state& kv);
  pipeline_request quantize_req(bool norm) const;
  pipeline_request flash_req(std::uint32_t head_dim, std::uint32_t tokens) const;  // attention_mma, f16: 16 x flash_warps rows
  // Workgroup size, rows per lane group and units in flight per lane, per format and height,
  // from vk_matvec_bench on the H100 (bench/RESULTS.md): short matrices (the K/V projections)
  // keep one row per group so enough workgroups exist to fill the GPU; Q6_K's costlier units
  // want more rows per group on tall matrices; Q8_0 is load-bound and likes one row per group.
  mmvq_shape_t mmvq_shape(gguf::type_id t, std::uint64_t n_rows) const;
  // Lane groups of 32 (one subgroup on NVIDIA), RPG rows per group; n_cols (the row width) fixes the row
  // layout read (quant_layout.hpp grouped_rows). norm_out: NORM_OUT (32 rows a workgroup, as QUANT_OUT);
  // rms_in_k: RMS_IN over inputs of that many columns (0: off).
  pipeline_request mmvq_req(gguf::type_id t, std::uint32_t nt, std::uint64_t n_cols, std::uint64_t n_rows, bool swiglu, bool residual,
                            bool ids, bool qout = false, bool grouped = false, bool tail = false, bool norm_out = false,
                            std::uint32_t rms_in_k = 0) const;
  std::uint32_t mmvq_rows_per_wg(const pipeline_request& r) const;
  // A residual matvec of this format and height may write the next norm's first half (NORM_OUT).
  bool norm_out_fits(gguf::type_id t, std::uint64_t n_rows) const;
  mmvq_shape_t qout_shape(std::uint64_t n_rows) const;  // one-token QUANT_OUT matvecs of n_rows rows
  bool use_mmvq(const weight& w, std::uint32_t n) const;
  // Tensor-core tiles (mul_mm.glsl MMA2): the largest tile that still gives the GPU a few
  // hundred workgroups (STRATA_VK_MMA2_SHAPE=BM:BN:WM:WN forces one).
  mma2_tile mma2_tile_for(std::uint64_t n_rows, std::uint32_t tokens) const;
  pipeline_request mma2_req(gguf::type_id t, const mma2_tile& s) const;
  pipeline_request mul_mm_req(gguf::type_id t) const;
  // Tile per batch width, from vk_matvec_bench on the H100 (bench/RESULTS.md): 128 x 128 with
  // 32 x 64 per warp from 128 tokens on, even where that leaves fewer workgroups than SMs
  // (qwen3-8b pp512 4,281 vs 3,777 t/s with 128 x 64 tiles there); narrower tiles below.
  static constexpr mma2_tile mm3_tiles[] = {{128, 128, 32, 64}, {64, 64, 32, 32}, {64, 32, 32, 16}, {64, 16, 16, 16}};
  mma2_tile mm3_tile_for(std::uint32_t tokens) const;
  // qw: the weights' format when the GEMM reads them in place (mm3_in_place), else f16.
  pipeline_request mm3_req(const mma2_tile& s, bool xf16, gguf::type_id qw = gguf::type_id::f16, bool split = false,
                           bool swiglu = false) const;
  // Gate, up and SwiGLU as one in-place f16 GEMM over interleaved rows in prompt steps (SWIGLU).
  bool mm3_swiglu_ok(gguf::type_id t, std::uint64_t K, std::uint64_t F, std::uint32_t n) const;
  bool mm3_swiglu_ok(const weight& w, std::uint32_t n) const;  // gate's path alone: mm3, 128 x 128, K unsplit
  void record_mm3_swiglu(const pending_matmul& m);
  static pipeline_request split_k_sum_req() { return req("split_k_sum", {}, {{"WG", "256"}}, 2); }
  static pipeline_request dequant_req(gguf::type_id t) { return req("dequant_f16", t, {{"WG", "256"}}, 2); }
  bool small_matmul(std::uint64_t K, std::uint32_t n) const;
  bool use_mm_small(const weight& w, std::uint32_t n) const { return f16_operands_ok(w.type) && small_matmul(w.ne[0], n); }
  bool small_experts(std::uint32_t pairs, std::uint32_t n_expert, std::uint64_t K, std::uint64_t F) const;
  pipeline_request mm_small_req(gguf::type_id t, std::uint32_t tokens, bool grouped = false, bool scatter = false) const;
  // mul_mm_reg (fragments built in registers): mmr_layout is the driver's f16 fragment layout,
  // probed at start-up; the kernel takes plain matmuls of mms_min .. mmr_max tokens.
  std::optional<f16_fragments> mmr_layout;
  bool use_mm_reg(gguf::type_id t, std::uint32_t n) const {
    return mmr && mmr_layout && detail::has_mmr_unit(t) && n <= mmr_max;
  }
  // 8-token tiles a mul_mm_reg workgroup row covers: 1, 2, 4 or 8 (few variants to compile).
  static std::uint32_t mm_reg_tiles(std::uint32_t tokens) { return tokens <= 8 ? 1 : tokens <= 16 ? 2 : tokens <= 32 ? 4 : 8; }
  pipeline_request mm_reg_req(gguf::type_id t, std::uint32_t tokens, std::uint64_t n_rows, bool residual = false,
                              bool swiglu = false) const;
  // record_matmul takes mul_mm_reg (takes_mm_reg) or the f16 GEMM (takes_f16_gemm) for w at n
  // tokens: the residual add may join either.
  bool takes_mm_reg(const weight& w, std::uint32_t n) const {
    return !use_narrow_gemm(w, n) && !(w.ne[2] == 1 && mmq_dense_ok(w.type, w.ne[0], n)) && use_mm_small(w, n) &&
           use_mm_reg(w.type, n);
  }
  bool takes_f16_gemm(const weight& w, std::uint32_t n) const;
  // Steps the decode fusions leave (5+ tokens, prompt steps on the f16 GEMM too) fold a few ops where
  // the f16 matmuls read: a norm, SwiGLU or attention writes its output's f16 copy beside it (y's
  // rows in mm_xh, found by f16_input()); a mul_mm_reg matmul waits in `mats` for the residual add.
  bool f16_beside(const tensor& y) const {
    return fuse && mm_fuse && !fuse_step && y.cols % 8 == 0 &&
           (small_matmul(y.cols, y.rows) || (mm_fuse_more && coopmat && mm3 && mm_xh && y.rows > mms_max &&
                                             y.rows <= max_rows && y.cols <= mm_xh_cols));
  }
  std::optional<tensor> xh_holds;  // the activation mm_xh holds as f16 (f16_input), until its buffer is written
  // Where in mm_xh (halves) its rows start: 0, or xh_swiglu_at, the second region, where
  // mul_mm_reg's SWIGLU form writes them while its own input is read from the first (or the
  // first where its input is in the second).
  std::uint32_t xh_at = 0, xh_swiglu_at = 0, xh_b_rows = 0;  // xh_b_rows: rows the second region holds
  void holds_f16(const tensor& y, std::uint32_t at = 0) {  // a dispatch just wrote y's f16 rows at `at`
    xh_holds = y;
    xh_at = at;
  }
  // The gate/up pair waiting in `mats` as one dispatch writing out and its f16 copy: mul_mm_reg's
  // SWIGLU form, or the f16 GEMM's (mm3_swiglu_ok).
  bool swiglu_joins_pair(const tensor& gate, const tensor& up, const tensor& out) const;
  // x as f16 rows in mm_xh (converted unless it already holds x); returns (offset, stride) in halves.
  std::pair<std::uint32_t, std::uint32_t> f16_input(const tensor& x);
  // x's rows as f16, K halves apart, into buffer dst (copy_rows TO_F16); with div > 0, row r is
  // source row moe_groups[moe_sorted_off + r] / div (an MoE step's pairs in expert order).
  void record_f16_rows(const tensor& x, std::uint32_t rows, std::uint32_t dst, std::uint32_t div = 0);
  // moe.glsl MOE_GROUP: the step's pairs grouped by expert into moe_groups, chunks of `chunk`.
  void record_moe_group(std::uint32_t n_expert, std::uint32_t k, std::uint32_t pairs, std::uint32_t chunk);

  // --- fusion.cpp: deferred work and the order it is recorded in.
  // Before an op that reads `reads` and writes `writes` (buffer ids) is recorded: deferred
  // matmuls go first; a pending norm is dispatched when its result is read, and dropped when
  // its input or output is overwritten first (then its result is never needed).
  void prepare(std::initializer_list<tensor> reads, std::initializer_list<tensor> writes);
  void flush_all();
  void flush_mats();
  void record_norm(const pending_norm& n);
  void record_rope(const tensor& x, std::uint32_t n_heads, const graph::rope_params& rp, const weight* ff);
  void record_temperature(const tensor& q, const graph::position_scale_params& ps);
  // The pending entry of `parent` (created if new). n_heads 0: the op does not say (temperature).
  head_tensor& head_entry(const tensor& parent, std::uint32_t n_heads);
  // Records every deferred head op on its own, in the order it was asked for.
  void flush_heads();
  // attn_prep flag bits of one side's ops, if its order is the kernel's (weighted norm, RoPE,
  // plain norm, temperature) and its norms / RoPE agree with the other side's.
  std::optional<std::uint32_t> head_flags(const head_tensor& h, std::optional<float>& eps, std::optional<head_op>& rope,
                                          std::optional<graph::position_scale_params>& temp) const;
  // kv_store() with the deferred Q/K head ops folded in; false when they cannot be fused.
  bool record_attn_prep(const kv_state& kv, std::uint32_t layer, const tensor& k, const tensor& v);
  // attn_prep's codes (kv_encode.glsl KV_PART 2), recorded after the next dispatch, the attention's
  // (encode_next), so both run in one level (tuning.hpp encode_beside); other ops record it first.
  std::optional<pending_encode> encode;
  bool encode_next = false;
  void flush_encode();
  void record_combine(const pending_combine& c, const tensor* residual);
  void flush_combine();

  // --- matmul_recording.cpp: matmuls.
  void record_matmul(const pending_matmul& m);
  void record_mmvq(const pending_matmul& m);
  // Prefill: tiles of 64 weight rows x 64 tokens (mul_mm.glsl).
  void record_mul_mm(const pending_matmul& m);
  // Tensor-core GEMM over f16 weights: an F16 matrix (or a format its tiles expand) is read in
  // place; any other is expanded into a scratch slot a slice of rows at a time, the next slice
  // or matrix into the other slot while this one multiplies (scratch_schedule.hpp).
  void record_mul_mm_f16(const pending_matmul& m);
  void record_mul_mm_small(const pending_matmul& m);  // mul_mm_small, or mul_mm_reg where it runs
  // The slot holding x (normalised by norm_w if given) as int8 codes, quantizing it first if no
  // slot does. raw_ok: a NORM_OUT slot will do (the caller applies its 1 / rms: RMS_IN).
  std::uint32_t quantize_input(const tensor& x, const weight* norm_w, float eps, bool raw_ok = false);
  // A recorded matmul wrote y outside prepare(): forget what y's buffer held.
  void wrote(const tensor& y);
  // Experts' matvec by id (mmvq.glsl MOE_IDS): workgroup row y is a (token, slot) pair reading
  // its token's int8 row (pair / in_div) of slot `sl`; with `up`, gate and up of the same expert
  // in one dispatch (SWIGLU), and with qout its output quantized into the other slot.
  // chunks > 0: grouped by expert, workgroup columns are the MOE_GROUP table's chunks (at most
  // `chunks` of them; the ones past the table's count exit at once).
  // topk: the router's logits, ranked by every workgroup first (fusion_types.hpp topk_in_t).
  using topk_in_t = gpu::topk_in_t;
  // part: the experts' first intermediate columns only (the GPU's slice of a CPU block,
  // record_shared_moe): gate/up's first `rows` rows of each expert, or down's first `k` inputs of
  // every row (row and expert strides unchanged); 0: all of them.
  struct expert_cols {
    std::uint32_t rows, k;
  };
  void record_mmvq_ids(const weight& w, const weight* up, std::uint32_t sl, std::uint32_t in_div, std::uint32_t pairs,
                       const tensor& y, bool qout, std::uint32_t chunks, const std::optional<topk_in_t>& topk = {},
                       expert_cols part = {0, 0});
  pipeline_request expert_mmvq_req(const weight& w, std::uint32_t K, std::uint32_t N, bool swiglu, bool qout, bool grouped) const;
  // Gate and up (dense matrices or expert slabs) bindable as one range, bind_gate_up: same
  // format, shape and chunk, up after gate within 4 GiB.
  bool adjacent(const weight& g, const weight& u) const;

  // --- cpu_experts.cpp: the MoE hand-off to the CPU. Records the copies of x (the FFN norm's
  // output) and the router logits to the host, ends the command buffer and continues in a new
  // one that copies the CPU's result into out; submit_step runs the CPU in between.
  void record_cpu_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const tensor& logits,
                      const tensor& out);
  // What the GPU computes of a CPU block's experts in a step, from the block's pinned host copy
  // (its kernels read it over PCIe) while the CPU computes the rest: the link's bandwidth added
  // to the CPU's. Either ranks k - ranks .. k - 1 of each token's experts (the CPU the first
  // k - ranks), or the first ff_cols intermediate columns of every routed expert (gate/up rows,
  // down inputs; the CPU the columns after them), which also splits a top-1 block (Llama 4).
  struct gpu_share_t {
    std::uint32_t ranks = 0, ff_cols = 0;
    explicit operator bool() const noexcept { return ranks || ff_cols; }
  };
  // The hand-off with the GPU's share; out = the GPU's sum + the CPU's.
  void record_shared_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const tensor& logits,
                         const moe_scratch& s, const tensor& out, gpu_share_t share);
  // record_cpu_moe's two ends: the hand-off's copies out and its new command buffer (not yet
  // resumed); the CPU's sum into out (add: onto the GPU's share) at the start of the next part.
  void begin_cpu_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const tensor& logits,
                     const tensor& out, std::uint32_t ranks);
  void end_cpu_moe(const tensor& out, bool add);
  // The GPU's share of a CPU block in this step (none: the CPU computes it all), in
  // single-token steps of blocks with a pinned copy (expert streaming) and integer expert
  // kernels: STRATA_VK_GPU_SHARE=N ranks (at most k - 1), or STRATA_VK_GPU_SLICE=P percent of
  // the intermediate columns (rounded to what both sides can cut at; by default
  // top1_slice_percent for top-1 blocks on the flag-word path, none for top-k).
  gpu_share_t gpu_share(const moe_weights& mw, const graph::moe_params& mp, std::uint32_t rows) const;
  static constexpr std::int32_t top1_slice_percent = 20;
  std::int32_t slice_percent(std::uint32_t k) const;  // of a top-k block's columns: the switch or the default
  std::string gpu_share_words() const;  // the share or slice, for backend::description()
  std::int32_t gpu_share_env = 0;   // STRATA_VK_GPU_SHARE (0: off)
  std::int32_t gpu_slice_env = -1;  // STRATA_VK_GPU_SLICE (0: off; unset, -1: the default)
  bool host_experts = false;  // while recording a GPU share: bind_weight binds the pinned host copies
  // The hand-off buffers (x and router logits to the host, the CPU's sum back), made on first use.
  void handoff_buffers(std::uint32_t cols, std::uint32_t n_expert);
  // Records the copies of x (the FFN norm's rows) and the router logits into hand_in.
  void record_handoff_in(const tensor& x, const tensor& logits);
  // The command buffer being recorded now.
  const vk::raii::CommandBuffer& recording_cmd() const;

  // --- expert_cache.cpp: GPU-cached routed experts. begin_cached_moe (after the router's top-k)
  // copies the routed ids, x and the logits to the host and ends the command buffer; the expert
  // matvecs that follow are recorded into the handoff's `gpu` buffer; end_cached_moe records the
  // combine there, the CPU alternative into `cpu`, and continues the step in `cmd`.
  bool cached_experts(const weight& gate) const { return weights.at(gate.id).cache >= 0; }
  void load_cached(const gguf::tensor_info& t, std::uint32_t layer, std::uint32_t id);
  void upload_cached(std::uint32_t max_routed);  // reserve(): host copies of the cached experts, id buffers
  void begin_cached_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const tensor& logits);
  void end_cached_moe(const tensor& out);
  // submit_step's part for a cached hand-off: slots, uploads, the submit of the right parts.
  void run_cached(handoff& h, bool last);  // last: the step's last hand-off (its output part follows)
  // Prefetch: the predictors (upload_cached), the prediction in a split's part (begin_cached_moe),
  // and at the split the next block's uploads, submitted on the side queue (or, with one queue,
  // on the step's, behind what was submitted before).
  void make_prefetch_predictors();
  std::uint32_t record_prediction(const cached_block& b, const tensor& x);
  void issue_prefetch(const handoff& h, const cached_block& b);
  void submit_cached(std::span<const vk::CommandBuffer> parts, const cached_block& b);  // waits on b's prefetch; no fence wait
  void wait_prefetches();  // the side queue's copies done (end of a step)
  void wait_prefetch_value(std::uint64_t value);
  void abandon_cached_step() noexcept;
  std::uint64_t queue_expert_copies(const cached_block& b, std::uint32_t e, std::uint32_t slot);  // into cache_regions
  void record_expert_copies(const vk::raii::CommandBuffer& c, const cached_block& b) const;   // cache_regions' copies  // a failed step: the device idle, every cached block's slots empty
  // A slot's expert changed (a miss's upload, a prefetch, an admission): the map follows.
  void cache_moved(cached_block& b, std::uint32_t e, std::uint32_t slot, std::int32_t evicted);
  // STRATA_VK_CACHE_CPU_MISSES=F (0 < F <= 1; off by default): short steps of every cached block
  // take the split form, and a block-step whose missed experts are at least F of the distinct experts it routes
  // runs on the CPU instead of uploading them (a large expert is read faster from DRAM by the CPU
  // than over the link by a copy or a kernel). The missed experts whose decayed routing counts
  // beat their victims' are then copied into slots beside the step (admit_cpu_misses), within the
  // lookup form's upload budget per step.
  float cache_cpu_misses = 0;
  // Only steps of at most this many tokens take that split (STRATA_VK_CACHE_CPU_MISS_TOKENS,
  // default 8): longer ones keep the lookup form where the device has it, whose kernels read a
  // missed expert once a step over the link, where the CPU would compute the whole prompt.
  std::uint32_t cache_cpu_miss_tokens = 8;
  bool cache_split_step(std::uint32_t tokens) const noexcept { return cache_cpu_misses > 0 && tokens <= cache_cpu_miss_tokens; }
  std::int32_t cache_split_open = -1;  // while recording a split's expert part: its block (those kernels read slots by slot id)
  std::uint64_t cache_step_admitted = 0;  // bytes admitted in the current step (reset by submit_step)
  void note_routing(cached_block& b, const std::uint32_t* ids, std::uint32_t pairs);  // decay b.freq, count the step's pairs
  void admit_cpu_misses(cached_block& b);   // after a block-step the CPU computed (cache_distinct: its experts)
  void submit_block_copies(cached_block& b);  // cache_regions' copies into b's slots: side queue, or behind the step

  // --- expert_cache_lookup.cpp: the lookup form (cache_lookup; on where the device indexes
  // arrays of storage buffers, STRATA_VK_CACHE_LOOKUP=0 off). The expert matvecs map each routed
  // expert through the block's slot map on the GPU and read a missed one from the block's host
  // copy over PCIe (mmvq.glsl W_CACHED), so a step never splits at a cached block. The down
  // matvec logs the routing; after the step the host admits missed experts whose decayed routing
  // counts beat the SLRU victim's by cache_margin, within an upload budget, and the next step's
  // submit first copies them into their slots and rewrites the changed maps.
  bool cache_lookup = false;
  std::uint32_t cache_map_buf = 0, cache_log_buf = 0, cache_log_host = 0;  // buffer ids
  std::uint64_t cache_map_stride = 0, cache_log_stride = 0;                // bytes a block
  float cache_decay = 0.99f;   // the routing counts' decay a token (STRATA_VK_CACHE_DECAY)
  float cache_margin = 1.0f;   // what an admission's count must beat the victim's by (STRATA_VK_CACHE_MARGIN)
  std::uint64_t cache_admit_bytes = 256ull << 20;      // uploads a step (STRATA_VK_CACHE_ADMIT_MB) ...
  std::uint64_t cache_admit_token_bytes = 2ull << 20;  // ... and a token more of the step
  std::uint64_t cache_admit_budget() const noexcept { return cache_admit_bytes + cache_admit_token_bytes * (std::max(batch_tokens, 1u) - 1); }
  struct cache_admission {
    std::uint32_t block, expert, slot;
  };
  std::vector<cache_admission> cache_admitted;  // to copy before the next step (or beside it: cache_async)
  // STRATA_VK_CACHE_ASYNC=1 (a side queue and timeline semaphores): an admission's victim leaves the
  // map at the next step's start, its copy runs on the side queue beside that step, and the step
  // after maps it (waiting on cache_timeline for the copies): uploads off the step's chain.
  bool cache_async = false;
  std::vector<cache_admission> cache_inflight;  // copied on the side queue, not yet in the maps
  vk::raii::Semaphore cache_timeline{nullptr};
  std::uint64_t cache_copy_value = 0;            // the side queue's last signalled value
  vk::raii::CommandBuffer cache_side{nullptr};
  void submit_cache_copies();                    // submit_step, after the step's submit (cache_async)
  void record_admission_copies(const vk::raii::CommandBuffer& c) const;
  std::vector<std::uint32_t> cache_candidates, cache_counts;
  vk::raii::CommandBuffer cache_update{nullptr};
  void init_cache_lookup(std::uint32_t max_routed);  // upload_cached: maps, logs, the slots' first experts
  bool cache_lookup_block(const weight& gate) const;  // this cached block's experts are read through its map
  void note_cache_lookup(const weight& gate, std::uint32_t pairs);  // while recording a part
  bool is_down_experts(const weight& w) const;
  // A cached lookup block's expert matvec: binding 0's host copy, the map (and the log) after b's bindings.
  void add_cache_lookup(pipeline_request& r, std::vector<binding>& b, const weight& w, const weight* up, bool log) const;
  void record_cache_log_copy();                     // file_part: the part's routing logs to the host
  void after_cache_lookup(const recorded_step& s);  // finish(): counters and admissions
  // The admission policy of both forms (the lookup form's, the split form's CPU misses):
  // cache_candidates, most routed first, each taken into b's SLRU while `admitted` plus its bytes
  // fit `budget` and a slot is free or its count beats the victim's by cache_margin;
  // `placed(e, access result)` follows each admission.
  template <class Placed>
  void admit_candidates(cached_block& b, std::uint64_t& admitted, std::uint64_t budget, Placed&& placed) {
    const std::uint64_t expert_bytes = b.expert_bytes[0] + b.expert_bytes[1] + b.expert_bytes[2];
    std::sort(cache_candidates.begin(), cache_candidates.end(),
              [&](std::uint32_t a, std::uint32_t c) { return b.freq[a] > b.freq[c] || (b.freq[a] == b.freq[c] && a < c); });
    for (const std::uint32_t e : cache_candidates) {
      if (admitted + expert_bytes > budget) break;
      const std::int64_t v = b.cache.would_evict();
      if (v == -2) break;
      if (v >= 0 && !(b.freq[e] > b.freq[std::size_t(v)] + cache_margin)) break;  // later candidates count less
      const auto r = b.cache.access(e);
      cache_stats.evictions += r.evicted >= 0;
      cache_stats.bytes_uploaded += expert_bytes;
      admitted += expert_bytes;
      placed(e, r);
    }
  }
  vk::CommandBuffer cache_update_cmd();             // submit_step: the admissions' copies and maps, or null

  // The CPU backend's experts over the hand-off buffers (the GPU's rows and router logits in, sum out).
  void run_handoff_on_cpu(const handoff& h);

  // --- handoff_submit.cpp: the current step's command buffers (the output part with the last),
  // with the CPU's work between them: pre-submitted parts on a timeline semaphore (the host
  // signals after each CPU part and spins on the counter for the GPU's), or a submit and fence
  // wait per part (STRATA_VK_HANDOFF_FENCE=1, GPU-cached experts); the CPU pools kept hot.
  void init_handoff();  // the switches and the semaphore (constructor)
  void submit_step();
  vk::CommandBuffer output_cmd() const { return outputs.current ? *outputs.current->cmd : vk::CommandBuffer{}; }
  void submit_and_wait(vk::CommandBuffer c);
  void submit_and_wait(std::span<const vk::CommandBuffer> c);
  void wait_fence();
  void submit_fenced(bool timed);
  void submit_timeline(bool timed);
  void wait_timeline(std::uint64_t value);
  void signal_timeline(std::uint64_t value);
  void run_handoff(handoff& h);  // the CPU's part of an experts or dense-FFN hand-off
  vk::raii::CommandBuffer new_command_buffer() const {  // a primary buffer of the step's pool
    return std::move(vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1))[0]);
  }
  template <class Work, class Release>
  void timed_handoff(bool timed, std::chrono::steady_clock::time_point& mark, Work&& work,
                     Release&& release);  // defined in handoff_timing.hpp
  void report_handoff_times() const;  // STRATA_VK_HANDOFF_TIMES=1: at destruction, to stderr
  bool handoff_timeline = false;      // parts pre-submitted (STRATA_VK_HANDOFF_FENCE=1: off)
  bool handoff_hot = false;           // CPU workers spin through a step (STRATA_VK_HANDOFF_HOT=0|1)
  // The CPU's result buffers: host-cached (memory_kind::handoff), or for A/B the first
  // host-visible type as before (STRATA_VK_HANDOFF_WC=1: write-combined on NVIDIA).
  bool handoff_wc = false;
  memory_kind handoff_out_kind() const noexcept { return handoff_wc ? memory_kind::upload : memory_kind::handoff; }
  std::uint32_t handoff_spin_us = 0;  // host spin on the counter before vkWaitSemaphores (STRATA_VK_HANDOFF_SPIN_US)
  vk::raii::Semaphore timeline{nullptr};
  std::uint64_t timeline_value = 0;   // the last value signalled
  // A step's submits, sized once to the most parts a step has had (no allocation per step).
  std::vector<vk::CommandBuffer> tl_cmds;
  std::vector<std::uint64_t> tl_wait, tl_signal;
  std::vector<vk::TimelineSemaphoreSubmitInfo> tl_infos;
  std::vector<vk::SubmitInfo> tl_submits;

  // --- handoff_poll.cpp: the step in one submit, the GPU and the host meeting at each hand-off
  // through words of a host-visible buffer (shaders/handoff_sync.glsl): a small command buffer
  // between two parts signals "part done" and spins until the host's "go"; the host spins on the
  // done word. No semaphore, no driver thread between the CPU's work and the GPU's next kernel.
  // Default on real GPUs; STRATA_VK_HANDOFF_POLL=0|1 (1 also on lavapipe, for tests).
  void submit_polled(bool timed);
  void ensure_sync_cmds(std::size_t handoffs);  // flag words and recorded sync command buffers
  // Sync `index`: the part before made visible, its done word signalled, the go word awaited.
  void record_sync(const vk::raii::CommandBuffer& c, std::uint32_t index, std::uint32_t max_spins, bool signal = true,
                   bool wait = true);
  std::uint32_t next_sync_tag();                      // a step's tag, written before its submit
  void release_go(std::size_t index, std::uint32_t tag);  // the host's go word for a hand-off
  // One signal and wait with the host answering 50 ms late: false where the GPU does not see the
  // host's go word in time (lavapipe, whose loops end early), which keeps the timeline path.
  bool probe_polling();
  void wait_done_word(std::size_t word, std::uint32_t tag);
  void wait_fence_spinning();
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
  std::vector<vk::raii::CommandBuffer> sync_cmds;
  // The same sync in two halves, for a hand-off whose GPU share runs between them.
  std::vector<vk::raii::CommandBuffer> sync_signal_cmds, sync_wait_cmds;
  std::vector<vk::CommandBuffer> poll_cmds;
  // STRATA_VK_HANDOFF_TIMES=1: host-clock sums over the hand-offs of steps of <= 8 tokens without GPU-cached blocks.
  struct handoff_times {
    bool on = false;
    std::uint64_t steps = 0, handoffs = 0;
    double submit_us = 0, wait_us = 0, cpu_us = 0, release_us = 0, last_us = 0, step_us = 0;
  } times;

  // --- layer_stream.cpp: dense layer streaming. load_streamed takes a dense FFN tensor of a
  // streamed block (false: not one); make_ring (reserve(), after the weight arena) allocates the
  // ring within the budget and the pinned copies; stream_step_begin records block 0's copy at
  // the start of a recorded step, enter_streamed (before the first matmul of a streamed block)
  // the barrier that waits for its copy and the copy of the next block into the other slot.
  bool load_streamed(const gguf::tensor_info& t, std::uint32_t id);
  void make_ring(std::uint64_t align, std::uint64_t chunk_limit, std::uint32_t max_tokens);
  void stream_step_begin();
  void enter_streamed(const weight& w);
  // The chain both rings record (this and expert_stream.cpp's): an item's pinned source, its
  // slot and its bytes; record_ring_copy copies one item; advance_ring, before the first kernel
  // of item `upto`, records for each item j from `next` on the barrier that waits for j's copy,
  // then the barrier that waits for item j-1's kernels (the last readers of slot (j+1) % 2) and
  // item j+1's copy (copy_of(j + 1)), while j + 1 < items.
  struct ring_copy {
    const gpu_buffer& from;
    const gpu_buffer& slot;
    std::uint64_t bytes;
  };
  void record_ring_copy(const ring_copy& r);
  template <class CopyOf>
  void advance_ring(std::uint32_t& next, std::uint32_t upto, std::uint32_t items, CopyOf copy_of) {
    flush_mats();  // every kernel of the earlier items is recorded before the barriers below
    const vk::raii::CommandBuffer& c = recording_cmd();
    for (; next <= upto; ++next) {
      const std::uint32_t j = next;
      c.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {},
                        vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eShaderRead), {}, {});
      if (j + 1 >= items) continue;
      if (j >= 1)  // write-after-read on slot (j+1) % 2: an execution dependency
        c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eTransfer, {}, {}, {}, {});
      record_ring_copy(copy_of(j + 1));
    }
  }
  // The per-phase choice of the step being recorded: its streamed FFNs on the CPU (but for the
  // blocks the link carries then: streamed_block::link).
  bool stream_on_cpu() const noexcept { return step_tokens <= opt.stream_cpu_tokens; }
  bool linked(const weight& w) const { return streams.at(std::size_t(weights.at(w.id).stream)).link >= 0; }
  // make_ring: which blocks the link carries and the copy pieces each CPU block's hand-off takes.
  void plan_link_copies(std::uint64_t align);
  // The hand-off of CPU block b: its pieces' copies, recorded apart to run while the CPU computes.
  vk::raii::CommandBuffer record_link_copies(const streamed_block& b);
  // In such a step, a streamed FFN's matmuls: the gate's copies x out and splits the step (the
  // CPU computes the whole FFN there), the up's records nothing, the down's copies the result
  // into y; the SwiGLU between them is skipped (ffn_open).
  void record_cpu_ffn(const weight& w, const tensor& x, const tensor& y);
  void run_cpu_ffn(const handoff& h);

  // --- expert_stream.cpp: routed experts of CPU blocks streamed in prompt steps (the same
  // chain as layer_stream.cpp over items of half a block). load_xstream marks an expert tensor
  // the CPU also holds; make_xring (reserve()) allocates the ring and the pinned copies;
  // xstream_step_begin records the first item's copy, enter_expert (before the first kernel
  // reading an item) the barriers and the next item's copy.
  void load_xstream(const gguf::tensor_info& t, std::uint32_t layer, std::uint32_t id);
  void make_xring(std::uint64_t align, std::uint64_t chunk_limit);
  void xstream_step_begin();
  void enter_expert(const weight& w);
  // The per-phase choice of the step being recorded: streamed experts handed to the CPU.
  bool experts_on_cpu() const noexcept { return !xstream_zero_copy && step_tokens <= opt.expert_cpu_tokens; }
  // The expert-streamed blocks' kernels bind the pinned copy itself (no ring copies) while
  // recording: a GPU share (host_experts), the lab switch, or a prompt step of at most
  // xstream_direct_tokens tokens. Such a step reads each expert once over PCIe where the
  // grouped kernels take an expert's pairs in one pass: the 30B's 512-token step at 12G ran
  // 2,590 -> 3,695 t/s against the ring's copies (session 22). Longer steps keep the ring: a
  // kernel that takes an expert's pairs in several tiles would read its weights several times.
  bool xstream_direct() const noexcept {
    return xstream_zero_copy || host_experts || (!experts_on_cpu() && step_tokens <= xstream_direct_tokens);
  }
  std::uint32_t xstream_direct_tokens = 512;  // STRATA_VK_XSTREAM_DIRECT_TOKENS (0: the ring always)
  // Lab (STRATA_VK_XSTREAM_ZC=1): every step's kernels read the streamed blocks' experts from
  // their pinned host copy over PCIe (no ring copies, no CPU hand-off): what a shader's reads of
  // host memory move, for a GPU share of the CPU's experts.
  bool xstream_zero_copy = false;
  // The step computes this block's experts on the CPU (always, or in this phase).
  bool cpu_moe_step(const weight& gate) const {
    const weight_entry& e = weights.at(gate.id);
    return e.host >= 0 && (e.xstream < 0 || experts_on_cpu());
  }
};

}  // namespace strata::gpu
