// The Vulkan backend's state, shared by the files that implement it (one responsibility each):
//   backend_setup.cpp     device options, weights upload, pipelines built up front, KV buffers
//   step_cache.cpp        a step recorded once per shape and replayed (begin / finish, dispatch)
//   kernel_requests.cpp   which pipeline variant (shader + defines) an op records
//   fusion.cpp            deferred work (types: fusion_types.hpp): norms folded into matmuls, Q/K
//                         head ops into attn_prep, the MoE combine into the residual add; prepare()
//                         orders the rest
//   matmul_recording.cpp  matvec, integer matvec (int8 activations), tiled prefill matmul
//   backend.cpp           the graph ops of the contract (graph/backend_contract.hpp)
//   attention.cpp         the attention op's kernel choice
//   router_product.cpp    decode's MoE router folded into the ops before it
//   cpu_experts.cpp       routed experts computed by the CPU mid-step (the hand-off)
//   expert_cache.cpp / expert_cache_lookup.cpp   GPU-cached experts: the split and lookup forms
//   layer_stream.cpp / expert_stream.cpp         dense FFNs / routed experts streamed through a ring
//   handoff_submit.cpp / handoff_poll.cpp        a step's parts submitted around the CPU's hand-offs
//                         (timeline or fences / flag words); handoff_timing.hpp: timed_handoff
//   recorded_step.hpp     a recorded step's command buffers and its hand-offs
//   tier_blocks.hpp       the blocks of the memory tiers: GPU-cached experts, streamed FFNs and experts
// impl's plain state lies in its bases, one header each saying what it holds: tuning.hpp (the
// STRATA_VK_* switches, read by tuning.cpp) under kernel_variants.hpp (the pipeline variants
// chosen without the device or buffers), weight_table.hpp, step_layout.hpp, moe_grouping.hpp,
// attention_scratch.hpp, matmul_scratch.hpp, fusion_state.hpp, recording_state.hpp,
// cpu_handoffs.hpp, expert_cache_state.hpp, stream_rings.hpp and handoff_paths.hpp. impl itself
// keeps every member that owns Vulkan objects or device memory: a base's members are destroyed
// after impl's own, so after ctx and its device. ring_chain.hpp defines advance_ring.
// Private to runtime/vulkan (includes Vulkan).
#pragma once
#include <array>
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

#include "attention_scratch.hpp"
#include "backend.hpp"
#include "commands.hpp"
#include "context.hpp"
#include "cpu_experts.hpp"
#include "cpu_ffn.hpp"
#include "cpu_handoffs.hpp"
#include "expert_cache_state.hpp"
#include "fusion_state.hpp"
#include "fusion_types.hpp"
#include "handoff_paths.hpp"
#include "kernel_variants.hpp"
#include "matmul_scratch.hpp"
#include "memory.hpp"
#include "moe_grouping.hpp"
#include "pipelines.hpp"
#include "push_constants.hpp"
#include "recorded_step.hpp"
#include "recording_state.hpp"
#include "router_product.hpp"
#include "step_layout.hpp"
#include "stream_rings.hpp"
#include "tier_blocks.hpp"
#include "weight_table.hpp"

namespace strata::gpu {

// A switch's number (STRATA_VK_CACHE_*): `fallback` where unset; strata::error where not >= 0.
float env_float(const char* name, float fallback);

struct backend::impl : kernel_variants,
                       weight_table,
                       step_layout,
                       moe_grouping,
                       attention_scratch,
                       matmul_scratch,
                       fusion_state,
                       recording_state,
                       cpu_handoffs,
                       expert_cache_state,
                       stream_rings,
                       handoff_paths {
  // impl's own members: all that own Vulkan objects or device memory, after ctx (so destroyed
  // before it), the command buffers after the pool they come from; and a few plain ones beside.
  backend_options opt;
  context ctx;
  pipeline_registry pipes;
  startup_stats stats;

  // Activation buffers and KV buffers (id = index + 1; id 0 marks read-only ranges).
  std::vector<gpu_buffer> buffers;
  std::vector<std::uint64_t> buffer_floats;
  std::vector<gpu_buffer> chunks;  // the weight arena (weight_table.hpp: each weight's place)
  gpu_buffer step;                 // per-step inputs (host-visible), one section each (step_layout.hpp)
  std::uint32_t input = 0;                 // host-visible staging of write()
  gpu_buffer readback;
  gpu_buffer ids_readback;                 // argmax results (host-visible)
  // Recorded steps by shape (recorded_step.hpp).
  using handoff = step_handoff;
  using recorded_step = gpu::recorded_step;
  // Memory tiers: routed experts computed by the CPU (null: all on the GPU); the host-visible
  // buffers of their hand-off are cpu_handoffs.hpp's.
  std::unique_ptr<cpu_experts> host;
  // GPU-cached expert blocks (backend_options::cached_expert_layers; expert_cache_state.hpp).
  std::deque<cached_block> cached;
  vk::raii::Semaphore prefetch_timeline{nullptr};  // the prefetch's side-queue timeline
  // Dense layer streaming (backend_options::streamed_layers; layer_stream.cpp): per streamed
  // block its FFN tensors in pinned host memory, laid out as in a ring slot; the ring's slots
  // are `chunks` entries (block j uses slot j % 2; stream_rings.hpp).
  std::vector<streamed_block> streams;
  // The decode phase (steps of <= opt.stream_cpu_tokens tokens): the streamed FFNs on the CPU,
  // through host-visible hand-off buffers (the FFN norm's rows out, the FFN's output back).
  std::unique_ptr<cpu_ffn> ffn_host;
  // Routed experts streamed in prompt steps (backend_options::streamed_expert_layers;
  // expert_stream.cpp). Each block is two ring items: gate + up (slot 0: read by the same
  // kernels) and down (slot 1), so the ring is one block's experts, not two, and the copy of
  // each item still runs one item ahead of its kernels.
  std::vector<xstream_block> xstreams;
  vk::raii::CommandPool pool{nullptr};
  // Per cached block predicted (cached_block::prefetch_cmd indexes it), freed before the pool.
  std::vector<vk::raii::CommandBuffer> prefetch_cmds;
  vk::raii::Fence fence{nullptr};
  vk::raii::QueryPool queries{nullptr};  // the layers' timestamps first, the output part's from output_queries
  std::map<std::uint64_t, recorded_step> steps;  // the layers' parts; outputs: the output parts
  recorded_step pending;  // being recorded (the layers or the output)
  output_parts outputs;
  command_recorder rec;

  // --- MoE experts on the tensor cores (matmul_recording.cpp).
  // The experts' matmuls of one MoE step on mul_mm_small (gate, up, SwiGLU, down).
  void record_moe_small(const moe_weights& mw, const tensor& in, std::uint32_t in_div, std::uint32_t pairs,
                        std::uint32_t n_expert, const tensor& g, const tensor& u, const tensor& y);
  // Groups the step's pairs by expert in chunks of `chunk` (moe.glsl MOE_GROUP); the chunk count a grouped dispatch covers.
  std::uint32_t group_experts(std::uint32_t n_expert, std::uint32_t in_div, std::uint32_t pairs, std::uint32_t chunk);
  // SwiGLU over the pairs' gate and up rows, into gate.
  void record_pair_swiglu(const tensor& g, const tensor& u, std::uint32_t pairs);
  // One grouped expert matmul on mul_mm_small over moe_xh's rows (SCATTER: each row back to its pair's).
  void record_mm_small_experts(const weight& w, const tensor& out, bool scatter, std::uint32_t pairs, std::uint32_t chunks);
  bool mmq_ok(gguf::type_id t, std::uint64_t K) const;  // a matrix of rows of K can run on mul_mmq
  bool mmq_ok(const weight& w) const { return mmq_ok(w.type, w.ne[0]); }
  bool mmq_dense_ok(gguf::type_id t, std::uint64_t K, std::uint32_t n) const {
    return mmq_dense && mmq_layout && n >= mmq_dense_min && n <= mmq_dense_max && n <= max_q8_rows &&
           detail::has_mmq_unit(t) && K % 64 == 0 && K <= max_k && K <= mmq_dense_max_k;
  }
  void record_moe_mmq(const moe_weights& mw, const tensor& in, std::uint32_t in_div, std::uint32_t pairs,
                      std::uint32_t n_expert, const tensor& g, const tensor& u, const tensor& y);

  // An expert tensor the integer expert matvecs (mmvq.glsl MOE_IDS) take: an int8 unit, rows no wider than the int8 scratch.
  bool int8_expert_ok(const weight& w) const { return has_int8_unit(w.type, w.ne[0]) && w.ne[0] <= max_k; }
  bool try_norm_out(const pending_norm& n), record_router_parts(const weight& router, const tensor& x, const tensor& scratch);
  bool record_norm_out_projection(const weight* parts_router, const tensor& x, const tensor& scratch);
  const pending_matmul* norm_out_projection(const tensor& x) const;
  std::optional<pipeline_request> block_tail_projection_req(const pending_matmul& m, const tensor& scratch) const;
  // router_product (router_product.cpp): per router weight id, its layer's products, and the two parts they write.
  std::vector<router_product_t> router_products;
  std::uint32_t proj_rows = 0;  // buffer id (block_norm_out): one token's raw projection rows for its block tails
  std::uint32_t router_product_parts = 0;  // buffer id: [token][2][expert] logit parts (router_product.glsl)
  void make_router_products();
  bool record_router_product(const weight& router, const tensor& x, const tensor& scratch);
  void record_down_combine(const pending_combine& c);  // the down matvec, the combine (+ residual, + next norm)
  void record_down_block_tail(const pending_combine& c);  // the same, the combine per 32-row block (moe_block_tail.glsl)
  bool moe_block_tail_ok(const weight& down, std::uint32_t k, std::uint32_t tokens) const;
  bool try_norm_tail(const pending_norm& n);
  std::vector<binding> tail_bindings(const pending_norm& n, std::uint32_t slot) const;
  norm_tail_pc tail_pc(const pending_norm& n) const;
  bool skipped(const pipeline_request& r) const;
  bool repeated(const pipeline_request& r) const;
  std::uint32_t pad_buffer = 0;  // the buffer of STRATA_VK_PAD_LEVELS's dispatches (tuning.hpp pad_levels)
  // --- f16_copies.cpp: f16 copies of the layers' weight matrices that prompt steps' GEMMs read
  // (backend_options::f16_copies), by weight id; buffer 0: none. Up's copy follows its gate's rows
  // in the pair's buffer (offset: bytes to its row 0).
  struct f16_copy {
    std::uint32_t buffer = 0;
    std::uint64_t offset = 0;
  };
  std::vector<f16_copy> f16_copies;
  bool f16_copy_candidate(const weight_entry& e) const;
  void make_f16_copies();  // once, from make_kv(): the KV cache and the scratch are placed first
  const f16_copy* f16_copy_of(std::uint32_t id) const {
    return id < f16_copies.size() && f16_copies[id].buffer ? &f16_copies[id] : nullptr;
  }
  // Gate's copy where gate and up of an n-token SwiGLU GEMM are both copied, up's rows right after
  // gate's in one buffer (the layout record_mm3_swiglu_scratch reads); else null.
  const f16_copy* f16_pair_copy(const weight& gate, const weight& up, std::uint32_t n) const {
    if (n < f16_copy_min_tokens) return nullptr;
    const f16_copy *g = f16_copy_of(gate.id), *u = f16_copy_of(up.id);
    const std::uint64_t gate_bytes = gate.ne[0] * gate.ne[1] * 2;
    return g && u && u->buffer == g->buffer && u->offset == g->offset + gate_bytes && gate_bytes < (1ull << 32) ? g : nullptr;
  }
  // A copy bound from row `row` on to its buffer's end (the SwiGLU GEMM reads up's rows after gate's).
  binding bind_f16_copy(const f16_copy& c, std::uint64_t row, std::uint64_t K) const {
    const std::uint64_t at = c.offset + row * K * 2;
    return {{buf(c.buffer).handle(), at, buf(c.buffer).size() - at, c.buffer}, false, true};
  }
  void record_expansion(const scratch_unit& u, std::uint32_t slot);
  void record_mm3_swiglu_scratch(const pending_matmul& m, std::uint32_t x_off, std::uint32_t x_stride);
  std::optional<scratch_unit> scratch_next(const weight& w, const scratch_unit& u, std::uint32_t n) const;
  bool use_narrow_gemm(const weight& w, std::uint32_t n) const {
    return narrow_parts && n >= narrow_min_tokens && narrow_matrix(w) &&
           std::uint64_t(narrow_splits) * n * w.ne[1] <= narrow_parts_floats;
  }
  void record_narrow_gemm(const pending_matmul& m);
  void record_mmq_dense(const pending_matmul& m);
  // split_k_sum over `splits` partials of n x N in buffer parts (n * N floats apart) into y's
  // columns [col0, col0 + N): the split-K GEMMs' last dispatch.
  void record_split_sum(std::uint32_t parts, std::uint32_t N, std::uint32_t n, std::uint32_t splits, const tensor& y,
                        std::uint32_t col0, const tensor* residual = nullptr);  // y = residual + sum

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

  // --- step_cache.cpp: recording into the current step.
  void dispatch(const pipeline_request& r, std::span<const binding> b, const void* pc, std::uint32_t pc_bytes,
                std::uint32_t gx, std::uint32_t gy = 1);
  void dispatch3(const pipeline_request& r, std::span<const binding> b, const void* pc, std::uint32_t pc_bytes,
                 std::uint32_t gx, std::uint32_t gy, std::uint32_t gz);  // a 3-D grid within the device limits
  void start_part(bool output);            // starts recording the layers' or the output part
  void enter_output(bool implicit);       // backend::begin_output (implicit: read or argmax, when due)
  recorded_step* file_part(bool output, bool keep_norms = false);  // ends the part, files it under its key
  // --- kernel_requests.cpp: the pipeline variants an op records that need the device or the
  // backend's buffers (the others: kernel_variants.hpp).
  // The lean top-k's experts a subgroup lane where it is on (tuning.hpp topk_lean) and fits: at most
  // 256 experts, and k at most the subgroup's size (lane r keeps rank r's logit); else 0 (the full form).
  std::uint32_t topk_lean_slots(std::uint32_t n_expert, std::uint32_t k) const;
  static pipeline_request moe_group_req(std::uint32_t chunk = moe_chunk) { return req("moe", {}, {{"MOE_GROUP", "1"}, {"CHUNK", std::to_string(chunk)}}, 6); }
  // attention_dec / attention_qdec LANES and its LPK where device and head shape allow (dec_lanes); other shared: fixed,
  // a thread's, a stream's; chunk_keys: tuning's dec_chunk_keys or qdec_chunk_keys. Its LPK where LANES was added, else 0.
  std::uint32_t add_dec_lanes(std::vector<std::pair<std::string, std::string>>& d, std::uint32_t head_dim, std::uint32_t group,
                     std::uint32_t chunk_keys, std::uint32_t fixed_bytes = 0, std::uint32_t thread_bytes = 0, std::uint32_t stream_floats = 0) const;
  // The thread-a-key form stages the value rows of cache c (attention_qdec_keys.glsl QDEC_VROW: asked for, and rows it takes).
  bool staged_values(const kv::kv_config& c) const;
  // The thread-a-key form's shared memory at a workgroup of wg threads, an upper bound: with plain queries beside the
  // rotated ones (a window without its own split) and the split merge's tail.
  std::uint32_t qdec_keys_shared(const kv::kv_config& c, std::uint32_t group, std::uint32_t head_dim, bool plain_queries,
                                 bool merge_tail, std::uint32_t wg) const;
  // The thread-a-key form's workgroup, a tile's keys: tuning's qdec_wg in one-token steps over TurboQuant keys and
  // values (every step where qdec_wg_every_step) where the device takes it and the shared arrays fit, else 128.
  std::uint32_t qdec_keys_wg(const kv::kv_config& c, std::uint32_t group, std::uint32_t head_dim, std::uint32_t rows) const;
  // attention_qdec's grouped decode: kvq_defs, the group, the split forms, LANES or thread-a-key;
  // qdec_hoists: whether its TurboQuant rotations leave the kernel (tuning.hpp qdec_hoist).
  bool qdec_hoists(const kv_state& kv, std::uint32_t head_dim, std::uint32_t group, std::uint32_t rows) const;
  std::vector<std::pair<std::string, std::string>> qdec_defs(const kv_state& kv, std::uint32_t head_dim, std::uint32_t group, std::uint32_t rows,
                                                             bool split, bool ring_split, bool merge_tail, bool rot_later, std::uint32_t qrot_at) const;
  // Lane groups of 32 (one subgroup on NVIDIA), RPG rows per group; n_cols (the row width) fixes the row
  // layout read (quant_layout.hpp grouped_rows). norm_out: NORM_OUT (32 rows a workgroup, as QUANT_OUT);
  // rms_in_k: RMS_IN over inputs of that many columns (0: off).
  pipeline_request mmvq_req(gguf::type_id t, std::uint32_t nt, std::uint64_t n_cols, std::uint64_t n_rows, bool swiglu, bool residual,
                            bool ids, bool qout = false, bool grouped = false, bool tail = false, bool norm_out = false,
                            std::uint32_t rms_in_k = 0) const;
  mmvq_shape_t qout_shape(gguf::type_id t, std::uint64_t n_rows) const;  // one-token QUANT_OUT matvecs of n_rows rows
  // Gate, up and SwiGLU as one in-place f16 GEMM over interleaved rows in prompt steps (SWIGLU).
  bool mm3_swiglu_ok(gguf::type_id t, std::uint64_t K, std::uint64_t F, std::uint32_t n) const;
  bool mm3_swiglu_ok(const weight& w, std::uint32_t n) const;  // gate's path alone: mm3, 128 x 128, K unsplit
  void record_mm3_swiglu(const pending_matmul& m);
  bool small_matmul(std::uint64_t K, std::uint32_t n) const;
  bool use_mm_small(const weight& w, std::uint32_t n) const { return f16_operands_ok(w.type) && small_matmul(w.ne[0], n); }
  bool small_experts(std::uint32_t pairs, std::uint32_t n_expert, std::uint64_t K, std::uint64_t F) const;
  pipeline_request mm_small_req(gguf::type_id t, std::uint32_t tokens, bool grouped = false, bool scatter = false) const;
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
  void flush_encode();
  void record_combine(const pending_combine& c, const tensor* residual);
  void flush_combine();

  // --- matmul_recording.cpp: matmuls.
  void record_matmul(const pending_matmul& m);
  void record_mmvq(const pending_matmul& m);
  // --- mmvq_joined.cpp: pending one-token matvecs of one input as one dispatch: a PAIR_OUT pair
  // (decode's K and V) or a STACK_OUT stack of two or three (decode's Q, K and V).
  bool mmvq_plain_one_token(const pending_matmul& m) const;
  bool mmvq_pair_ok(const pending_matmul& a, const pending_matmul& b) const;
  void record_mmvq_pair(const pending_matmul& a, const pending_matmul& b);
  struct joined_input {
    std::uint32_t slot = 0;
    bool rms_in = false;
    std::vector<binding> b;
  };
  joined_input joined_mmvq_input(const pending_matmul& a, const binding& w, const tensor& y, const tensor& y2);
  struct stack_order {  // segments by their weights' offsets, and the range bound over them
    std::array<const pending_matmul*, 3> m{};
    std::size_t n = 0;
    std::array<std::uint64_t, 3> at{}, rows{};  // a segment's byte offset in the range, its rows
    std::uint64_t bytes = 0;                    // the range: the first's offset to the last end
  };
  stack_order mmvq_stack_order(std::span<const pending_matmul> ms) const;
  std::optional<pipeline_request> mmvq_stack_req(const stack_order& o, bool rms_in) const;
  bool mmvq_stack_ok(std::span<const pending_matmul> ms) const;
  void record_mmvq_stack(std::span<const pending_matmul> ms);
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
  // The hand-off with the GPU's share; out = the GPU's sum + the CPU's.
  void record_shared_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const tensor& logits,
                         const moe_scratch& s, const tensor& out, gpu_share_t share);
  // The GPU's part of a routed FFN whose rest the CPU computes (record_shared_moe, record_miss_share):
  // for the pairs at moe_ids 0 .. pairs-1 (ids and weights already there), each pair's input times
  // its weight where the router weights the input (Llama 4), its int8 codes, gate/up's first F rows
  // (of S columns asked: 0 all), the intermediate's codes, down's first S inputs, and the combine of
  // the pairs into out left pending. Where the weights are read from is the caller's switch.
  void record_routed_columns(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const moe_scratch& s,
                             std::uint32_t E, std::uint32_t pairs, std::uint32_t F, std::uint32_t S, const tensor& out);
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
  std::int32_t slice_percent(std::uint32_t k) const;  // of a top-k block's columns: the switch or the default
  // A slice's columns: `percent` of F rounded to multiples of lcm(cut, 32) (the CPU's and the
  // GPU's cuts); 0 where none falls inside the experts. gpu_share's, and the cache's miss share.
  std::uint32_t slice_cols(std::uint32_t F, std::uint32_t cut, std::int32_t percent) const;
  std::string gpu_share_words() const;  // the share or slice, for backend::description()
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
  // A cached hand-off's routed ids as the GPU wrote them (checked against b's experts), the
  // distinct ones in cache_distinct.
  const std::uint32_t* read_routed(const handoff& h, const cached_block& b);
  // Prefetch: the predictors (upload_cached), the prediction in a split's part (begin_cached_moe),
  // and at the split the next block's uploads, submitted on the side queue (or, with one queue,
  // on the step's, behind what was submitted before).
  void make_prefetch_predictors();
  std::uint32_t record_prediction(const cached_block& b, const tensor& x);
  void issue_prefetch(const handoff& h, const cached_block& b);
  void submit_cached(std::span<const vk::CommandBuffer> parts, const cached_block& b);  // waits on b's prefetch; no fence wait
  void wait_prefetches();  // the side queue's copies done (end of a step)
  void wait_prefetch_value(std::uint64_t value);
  void abandon_cached_step() noexcept;  // a failed step: the device idle, every cached block's slots empty
  std::uint64_t queue_expert_copies(const cached_block& b, std::uint32_t e, std::uint32_t slot);  // into cache_regions
  void record_expert_copies(const vk::raii::CommandBuffer& c, const cached_block& b) const;   // cache_regions' copies
  // A slot's expert changed (a miss's upload, a prefetch, an admission): the map follows.
  void cache_moved(cached_block& b, std::uint32_t e, std::uint32_t slot, std::int32_t evicted);
  void note_routing(cached_block& b, const std::uint32_t* ids, std::uint32_t pairs);  // decay b.freq, count the step's pairs
  void admit_cpu_misses(cached_block& b);   // after a block-step the CPU computed (cache_distinct: its experts)
  void submit_block_copies(cached_block& b);  // cache_regions' copies into b's slots: side queue, or behind the step

  // --- expert_cache_misses.cpp: short steps of the lookup form with a hand-off at each cached
  // block (expert_cache_state.hpp, cache_handoff_open). begin_miss_handoff (after the router's
  // top-k) sends x, the logits and the routed ids to the host and continues in the hand-off's
  // `cmd` with the host's ids copied into moe_ids; end_miss_handoff adds the CPU's sum after the
  // combine; run_miss_handoff is the host's part between them.
  void init_miss_handoffs(std::uint32_t max_routed);  // upload_cached, once the lookup form is known
  bool miss_handoff_step(std::uint32_t tokens) const noexcept { return cache_miss_ids && cache_split_step(tokens); }
  void begin_miss_handoff(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const tensor& logits,
                          const moe_scratch& s);
  // The GPU's share of a missed expert (expert_cache_state.hpp cache_slice_env): the percent asked
  // for, a block's columns in a step of `rows` tokens (0: none), and its recording.
  std::int32_t miss_slice_percent() const noexcept;
  std::uint32_t miss_share_cols(const moe_weights& mw, const graph::moe_params& mp, std::uint32_t rows) const;
  void record_miss_share(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const tensor& logits,
                         const moe_scratch& s, std::uint32_t S);
  void end_miss_handoff(const tensor& out);
  void run_miss_handoff(handoff& h);

  // --- expert_cache_stage.cpp: prompt steps copy a cached block's experts whole into the
  // staging pair before its kernels (upload_cached allocates it where asked for).
  void init_cache_stage();
  void record_cache_stage(const weight& gate);

  // --- expert_cache_lookup.cpp: the lookup form (expert_cache_state.hpp). The upload budget
  // of a step (STRATA_VK_CACHE_ADMIT_MB and the token bytes after it).
  std::uint64_t cache_admit_budget() const noexcept { return cache_admit_bytes + cache_admit_token_bytes * (std::max(batch_tokens, 1u) - 1); }
  vk::raii::Semaphore cache_timeline{nullptr};
  vk::raii::CommandBuffer cache_side{nullptr};
  void submit_cache_copies();                    // submit_step, after the step's submit (cache_async)
  void record_admission_copies(const vk::raii::CommandBuffer& c) const;
  vk::raii::CommandBuffer cache_update{nullptr};
  void init_cache_lookup(std::uint32_t max_routed);  // upload_cached: maps, logs, the slots' first experts
  bool cache_lookup_block(const weight& gate) const;  // this cached block's experts are read through its map
  void note_cache_lookup(const weight& gate, std::uint32_t pairs);  // while recording a part
  bool is_down_experts(const weight& w) const;
  // A cached lookup block's expert matvec: binding 0's host copy, the map (and the log) after b's bindings.
  void add_cache_lookup(pipeline_request& r, std::vector<binding>& b, const weight& w, const weight* up, bool log) const;
  void record_cache_log_copy();                     // file_part: the part's routing logs to the host
  void after_cache_lookup(const recorded_step& s);  // finish(): counters and admissions
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
  vk::raii::Semaphore timeline{nullptr};

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
  // Polls the fence up to spin_us, then wait_fence(); true: the poll saw it signalled.
  bool wait_fence_spinning(std::uint32_t spin_us);
  std::vector<vk::raii::CommandBuffer> sync_cmds;
  // The same sync in two halves, for a hand-off whose GPU share runs between them.
  std::vector<vk::raii::CommandBuffer> sync_signal_cmds, sync_wait_cmds;

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
  void record_ring_copy(const ring_copy& r);
  template <class CopyOf>
  void advance_ring(std::uint32_t& next, std::uint32_t upto, std::uint32_t items, CopyOf copy_of);  // ring_chain.hpp
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
  // grouped kernels take an expert's pairs in one pass (or the L2 holds it between passes): the
  // 30B's 512-token step at 12G ran 2,590 -> 3,695 t/s against the ring's copies (session 22).
  // Longer steps keep the ring, and so do large experts (stream_rings.hpp): a kernel that takes
  // an expert's pairs in several tiles would read its weights several times.
  bool xstream_direct() const noexcept {
    return xstream_zero_copy || host_experts || (!experts_on_cpu() && step_tokens <= xstream_direct_tokens);
  }
  // The step computes this block's experts on the CPU (always, or in this phase).
  bool cpu_moe_step(const weight& gate) const {
    const weight_entry& e = weights.at(gate.id);
    return e.host >= 0 && (e.xstream < 0 || experts_on_cpu());
  }
};

}  // namespace strata::gpu
