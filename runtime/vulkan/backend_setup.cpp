// Vulkan backend setup: device options, weight upload, pipelines built up front (the KV cache and
// the step-input buffer: kv_setup.cpp).
#include "backend_impl.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "quant_layout.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"
#include "strata/tiers/demand.hpp"
#include "strata/tiers/engine_layout.hpp"

namespace strata::gpu {
using clock_type = std::chrono::steady_clock;

using namespace detail;

backend::impl::impl(const backend_options& o)
    : opt(o), ctx(o.device), pipes(ctx, o.cache_dir.empty() ? default_cache_dir() : o.cache_dir) {
  coopmat = ctx.info().nv_coopmat;
  read_env();
  rec.set_lab_no_barrier(lab_no_barrier);
  rec.set_lab_no_barrier_before(lab_no_barrier_before);
  rec.set_barrier_all(barrier_all);
  ctx.set_memory_budget(opt.memory_budget);
  if (!opt.cached_expert_layers.empty()) {
    if (opt.expert_slots == 0) throw error("--expert-cache 0: the expert cache needs at least one slot per layer");
    if (opt.profile)
      throw error("the expert cache and per-kernel profiling cannot run together (a step runs one of two recorded parts)");
  }
  if (!opt.cpu_expert_layers.empty() || !opt.cached_expert_layers.empty())
    host = std::make_unique<cpu_experts>(opt.cpu_threads);
  pool = vk::raii::CommandPool(ctx.device(), vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer,
                                                                       ctx.queue_family()));
  fence = vk::raii::Fence(ctx.device(), vk::FenceCreateInfo());
  init_handoff();
  if (opt.profile) {
    if (!ctx.info().timestamps) throw error("GPU '" + ctx.info().name + "' has no timestamp queries: cannot profile");
    query_capacity = 16384;
    output_queries = query_capacity - 1024;  // the output part's timestamps (step_cache.cpp)
    queries = vk::raii::QueryPool(ctx.device(), vk::QueryPoolCreateInfo({}, vk::QueryType::eTimestamp, query_capacity));
  }
}

backend::backend(const backend_options& opt) : p_(std::make_unique<impl>(opt)) {}

backend::~backend() {
  if (!p_) return;
  p_->report_handoff_times();
  try {  // nothing in flight (a side queue's copies included) when the buffers go
    p_->ctx.device().waitIdle();
  } catch (...) {
  }
}

std::string backend::description() const {
  const auto& i = p_->ctx.info();
  std::string d = "vulkan (" + i.name + ", " + i.driver + ", subgroup " + std::to_string(i.subgroup_size) + ")";
  if (p_->host && !p_->opt.cpu_expert_layers.empty())
    d += " with the routed experts of " + std::to_string(p_->opt.cpu_expert_layers.size()) + " MoE layers on the CPU (" +
         std::to_string(p_->host->threads()) + " threads)";
  if (!p_->opt.cached_expert_layers.empty())
    d += (p_->opt.cpu_expert_layers.empty() ? " with " : " and ") + std::to_string(p_->opt.expert_slots) +
         " GPU expert slots (SLRU) for each of " + std::to_string(p_->opt.cached_expert_layers.size()) +
         " MoE layers whose experts live in host memory";
  if (const auto& s = p_->xstreaming; s.layers)
    d += ", the routed experts of " + std::to_string(s.layers) + " of them also streamed through a 2-slot GPU ring in steps of more than " +
         std::to_string(s.cpu_tokens) + " tokens" +
         (p_->xstream_direct_tokens > s.cpu_tokens
              ? " (read from pinned host memory by the kernels themselves in steps of up to " +
                    std::to_string(p_->xstream_direct_tokens) + ")"
              : std::string()) +
         p_->gpu_share_words();
  if (const auto& s = p_->streaming; s.layers)
    d += std::string(d.find(" with ") == std::string::npos ? " with" : ",") + " the dense FFN of " +
         std::to_string(s.layers) + " blocks streamed from pinned host memory through a 2-slot GPU ring" +
         (s.cpu_tokens ? " (computed on the CPU, " + std::to_string(p_->ffn_host->threads()) + " threads, in steps of <= " +
                             std::to_string(s.cpu_tokens) + " tokens)"
                       : std::string());
  if (p_->host || p_->ffn_host)
    d += std::string("; hand-offs: ") + p_->handoff_path() + (p_->handoff_hot ? ", CPU workers kept hot through a step" : "");
  return d;
}

memory_use_bytes backend::memory_use() const {
  const memory_ledger& l = p_->ctx.ledger();
  const device_memory now = p_->ctx.memory_now();
  return {l.weights, l.kv, l.scratch, l.budget, now.budget_ext ? now.usage_bytes : 0};
}

handoff_stats backend::handoffs() const { return p_->handoff_counts; }


std::uint32_t backend::handoffs_per_step() const {
  return p_->current ? std::uint32_t(p_->current->handoffs.size()) : 0;
}

bool backend::is_cpu_device() const { return p_->ctx.info().is_cpu; }

const startup_stats& backend::startup() const noexcept { return p_->stats; }

std::uint32_t backend::dispatches_per_step() const { return p_->last_dispatches; }
std::uint32_t backend::barriers_per_step() const { return p_->last_barriers; }

std::vector<kernel_time> backend::profile() const {
  std::vector<kernel_time> out;
  for (const auto& [k, v] : p_->prof) out.push_back(v);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.total_ms > b.total_ms; });
  return out;
}

void backend::reset_profile() { p_->prof.clear(); }

buffer backend::alloc(std::uint32_t rows, std::uint32_t cols) {
  const std::uint32_t id = p_->new_buffer(std::uint64_t(rows) * cols * 4, memory_kind::device,
                                          "activations " + std::to_string(rows) + "x" + std::to_string(cols));
  return buffer(id, rows, cols);
}

weight backend::load(const gguf::tensor_info& t) {
  if (!gpu_supports(t.type))
    throw error("tensor '" + std::string(t.name) + "' has type " + std::string(gguf::name_of(t.type)) +
                ", which the Vulkan backend does not support");
  if (t.ne[1] > 1 && t.ne[0] % 16 != 0)  // matrices (vectors: norms, rope_freqs are read per element)
    throw error("tensor '" + std::string(t.name) + "' has rows of " + std::to_string(t.ne[0]) +
                " elements; the Vulkan kernels need a multiple of 16");
  weight w;
  w.id = std::uint32_t(p_->weights.size());
  w.type = t.type;
  for (int d = 0; d < 4; ++d) w.ne[d] = t.ne[d];
  w.row_bytes = t.row_bytes();
  w.name = t.name;
  // Routed experts of a block the CPU computes stay in host memory, as the CPU kernels want them.
  const auto& cpu_layers = p_->opt.cpu_expert_layers;
  const std::int32_t layer = tiers::layer_of(t.name);
  if (p_->host && tiers::classify(t.name, false) == tiers::tensor_kind::routed_experts &&
      std::find(cpu_layers.begin(), cpu_layers.end(), std::uint32_t(layer)) != cpu_layers.end()) {
    p_->weights.push_back({&t, 0, 0, 0, std::int32_t(p_->host->load(t))});
    const auto& streamed = p_->opt.streamed_expert_layers;  // ... and streamed in prompt steps (expert_stream.cpp)
    if (std::find(streamed.begin(), streamed.end(), std::uint32_t(layer)) != streamed.end())
      p_->load_xstream(t, std::uint32_t(layer), w.id);
    return w;
  }
  // Routed experts of a GPU-cached block: host memory plus slots on the GPU (expert_cache.cpp).
  const auto& cached_layers = p_->opt.cached_expert_layers;
  if (tiers::classify(t.name, false) == tiers::tensor_kind::routed_experts &&
      std::find(cached_layers.begin(), cached_layers.end(), std::uint32_t(layer)) != cached_layers.end()) {
    p_->load_cached(t, std::uint32_t(layer), w.id);
    return w;
  }
  if (p_->load_streamed(t, w.id)) return w;  // dense FFN of a streamed block (layer_stream.cpp)
  p_->weights.push_back({&t, 0, 0, t.data.size()});
  if (t.ne[1] > 1 && t.ne[2] == 1) p_->scratch_plan.add_weight(t.name, w.id);
  return w;
}

void backend::reserve(std::uint32_t max_tokens, std::uint32_t max_routed) {
  auto& P = *p_;
  if (P.uploaded) return;
  const auto& info = P.ctx.info();
  // Weights: pack into chunks the device can bind whole, check they fit, upload.
  const std::uint64_t limit = std::min<std::uint64_t>({info.max_storage_range, info.max_allocation, 2ull << 30});
  arena_layout layout(limit, std::max<std::uint64_t>(section_align, info.min_storage_align));
  std::uint64_t total = 0;
  std::size_t on_gpu = 0;
  for (auto& e : P.weights) {
    if (e.host >= 0 || e.stream >= 0) continue;
    ++on_gpu;
    const auto pl = layout.place(e.bytes, std::string(e.info->name));
    e.chunk = pl.chunk;
    e.offset = pl.offset;
    total += e.bytes;
  }
  if (info.device_local_bytes && total > info.device_local_bytes)
    throw error("model weights need " + gib_text(total) + " of GPU memory but '" + info.name + "' has " +
                gib_text(info.device_local_bytes) + "; use -ngl to keep some layers on the CPU, or --backend cpu");
  if (const auto& l = P.ctx.ledger(); l.budget && l.total() + total > l.budget)
    throw error("--gpu-budget " + format_byte_size(l.budget) + " does not hold the " + std::to_string(on_gpu) +
                " weight tensors placed on the GPU (" + format_byte_size(total) + ") beside the " +
                format_byte_size(l.total()) + " of activations already allocated; lower -ngl, move experts to the CPU "
                "(--n-cpu-moe, --cpu-moe) or let --fit place the model");
  const auto t0 = clock_type::now();
  for (std::size_t c = 0; c < layout.chunk_sizes().size(); ++c)
    P.chunks.emplace_back(P.ctx, layout.chunk_sizes()[c], memory_kind::device, "weights (chunk " + std::to_string(c) + ")");
  P.make_ring(std::max<std::uint64_t>(tiers::ring_align, info.min_storage_align), limit, max_tokens);
  P.make_xring(std::max<std::uint64_t>(tiers::ring_align, info.min_storage_align), limit);
  {
    // Staging no larger than the weights: a small model's upload needs no 64 MiB host block.
    uploader up(P.ctx, std::clamp<std::uint64_t>(total, 64ull << 10, uploader::default_staging_bytes));
    std::uint64_t done = 0;
    for (const auto& e : P.weights) {
      if (e.host >= 0 || e.cache >= 0 || e.stream >= 0) continue;  // slots are filled on a miss or per step
      const gguf::tensor_info& t = *e.info;
      if (!grouped_rows(t.type, t.ne[0])) {
        up.copy(t.data, P.chunks[e.chunk].handle(), e.offset);
      } else {  // rows rewritten in the GPU's layout straight into the staging buffer
        up.copy(t.data, P.chunks[e.chunk].handle(), e.offset, t.row_bytes(),
                [&t](std::span<const std::byte> rows, std::byte* out) { copy_gpu_rows(t.type, t.ne[0], rows, out); });
      }
      if (P.opt.progress) P.opt.progress({"upload", done += e.bytes, total, "bytes"});
    }
    up.flush();
  }
  P.stats.upload_ms = ms_since(t0);
  P.stats.weight_bytes = total;
  P.uploaded = true;
  P.max_rows = max_tokens;
  P.max_q8_rows = std::max(max_tokens, max_routed);  // an MoE step quantizes token x expert rows

  // Pipelines every model needs, plus per-format matvecs, built in parallel now.
  std::vector<pipeline_request> reqs;
  std::set<gguf::type_id> mat_formats, id_formats;
  for (const auto& e : P.weights) {
    const auto* t = e.info;
    if (!impl::gpu_reads(e)) continue;
    if (t->ne[2] > 1) id_formats.insert(t->type);
    else if (t->ne[1] > 1) mat_formats.insert(t->type);
    if (t->name == "token_embd.weight") reqs.push_back(impl::req("get_rows", t->type, {}, 3));
  }
  // Decode-shaped matvecs (one token) in the variants fusion produces; other token counts are
  // built on first use (and cached on disk like the rest).
  std::set<std::pair<gguf::type_id, std::uint32_t>> mat_shapes;
  for (const auto& e : P.weights)
    if (e.info->ne[2] == 1 && e.info->ne[1] > 1) mat_shapes.insert({e.info->type, P.rows_for(e.info->ne[1])});
  for (const auto& [f, nr] : mat_shapes)
    for (const auto& v : std::vector<std::vector<std::pair<std::string, std::string>>>{
             {}, {{"NORM_INPUT", "1"}}, {{"NORM_INPUT", "1"}, {"SWIGLU", "1"}}, {{"ADD_RESIDUAL", "1"}}}) {
      if (!P.fuse && !v.empty()) continue;
      std::vector<std::pair<std::string, std::string>> d{
          {"NR", std::to_string(nr)}, {"NT", "1"}, {"WG", std::to_string(P.mv_wg)}};
      d.insert(d.end(), v.begin(), v.end());
      reqs.push_back(impl::req("matvec", f, std::move(d), 6));
    }
  // f16 scratch of the tensor-core GEMM (one or two slots): the largest matrix the tiled path
  // multiplies, at most scratch_slot_halves (64 Mi; bigger ones are expanded a slice of rows at a
  // time) but at least a slice of 128 rows.
  if (P.coopmat && P.mm3) {
    std::uint64_t most = 0, widest_k = 0;
    for (const auto& e : P.weights)
      if (e.info->ne[2] == 1 && e.info->ne[1] > 1 && e.info->ne[0] % 16 == 0 && e.info->type != gguf::type_id::f16 &&
          impl::f16_operands_ok(e.info->type) && !P.mm3_in_place(e.info->type, e.info->ne[0], P.max_rows)) {
        most = std::max<std::uint64_t>(most, std::uint64_t(e.info->ne[0]) * e.info->ne[1]);
        widest_k = std::max<std::uint64_t>(widest_k, e.info->ne[0]);
      }
    if (most) {
      P.mm_scratch_halves = std::min<std::uint64_t>(most, std::max<std::uint64_t>(P.scratch_slot_halves, 128 * widest_k));
      P.mm_scratch = P.new_buffer(P.mm_scratch_halves * 2, memory_kind::device, "f16 weight scratch (prefill)");
      P.scratch_plan.set_slots(P.mm_scratch, P.mm3_ahead ? P.new_buffer(P.mm_scratch_halves * 2, memory_kind::device,
                                                                        "f16 weight scratch, second slot (prefill)")
                                                         : P.mm_scratch);
      for (auto f : mat_formats)
        if (f != gguf::type_id::f16 && impl::f16_operands_ok(f)) reqs.push_back(impl::dequant_req(f));
    }
    std::uint32_t widest = 0;
    for (const auto& e : P.weights)
      if (e.info->ne[2] == 1 && e.info->ne[1] > 1 && e.info->ne[0] % 16 == 0)
        widest = std::max<std::uint32_t>(widest, std::uint32_t(e.info->ne[0]));
    if (P.mm3_xf16 && widest) {
      P.mm_xh_cols = widest;
      // 64 rows of slack: mul_mm_small multiplies whole 16-token tiles (the extra rows are never stored).
      // Behind them, with mul_mm_reg's SWIGLU form, the rows it writes while it reads the first ones,
      // and with the f16 GEMM's (prompt steps, mm3_swiglu_ok) a whole step's.
      const bool fused_swiglu = P.fuse && P.mm_fuse && P.mm_fuse_more;
      const std::uint64_t rows_a = P.max_rows + 64;
      std::uint64_t rows_b = fused_swiglu && P.mms && P.mmr ? P.mmr_max + 64 : 0;
      // The prompt steps' fused GEMM (mm3_swiglu_ok: 128+ tokens of a format read in place, Q4_K
      // below mm3_scratch_min unless STRATA_VK_MMQ=2, or through the scratch): only as many rows
      // as it can take.
      if (fused_swiglu && !P.mma_n8 && P.max_rows >= 128 &&
          (P.mm_scratch ||
           std::any_of(mat_formats.begin(), mat_formats.end(), [&](gguf::type_id f) { return P.mm3_in_place(f, 64, 128); }))) {
        const std::uint64_t most =
            P.mmq >= 2 || P.mm_scratch ? P.max_rows : std::min<std::uint64_t>(P.max_rows, P.mm3_scratch_min - 1);
        rows_b = std::max<std::uint64_t>(rows_b, most + 64);
      }
      P.mm_xh = P.new_buffer((rows_a + rows_b) * widest * 2, memory_kind::device, "f16 activations (tensor-core matmuls)");
      P.xh_swiglu_at = rows_b ? std::uint32_t(rows_a * widest) : 0;
      P.xh_b_rows = std::uint32_t(rows_b);
      reqs.push_back(impl::req("copy_rows", {}, {{"WG", "128"}, {"TO_F16", "1"}}, 3));
      if (P.fuse && P.mm_fuse && P.mms) {  // the f16 copy beside a norm's or SwiGLU's output (f16_beside)
        reqs.push_back(impl::norm_req(true, true));
        reqs.push_back(impl::elementwise_req("OP_SWIGLU", true));
      }
      if (P.mms)
        for (auto f : mat_formats)
          if (impl::f16_operands_ok(f))
            for (std::uint32_t tokens = 16; tokens <= 64; tokens += 16) reqs.push_back(P.mm_small_req(f, tokens));
      if (P.mms && P.mmr && P.coopmat &&
          std::any_of(mat_formats.begin(), mat_formats.end(), [](gguf::type_id f) { return detail::has_mmr_unit(f); })) {
        P.mmr_layout = probe_f16_fragments(P.ctx, P.pipes);
        if (P.mmr_layout)
          for (auto f : mat_formats)
            if (detail::has_mmr_unit(f))
              for (const std::uint32_t tokens : {8u, 16u, 32u, 64u})
                for (const std::uint64_t rows : {4096u, 8192u})  // both warp counts
                  for (const bool residual : {false, true})
                    if (tokens / 2 < P.mmr_max && !(residual && rows == 8192u)) {
                      reqs.push_back(P.mm_reg_req(f, tokens, rows, residual));
                      if (!residual && P.xh_swiglu_at) reqs.push_back(P.mm_reg_req(f, tokens, rows, false, true));
                    }
      }
    }
    // Split-K partial products: room for the largest S x tokens x rows any GEMM of a step of
    // max_rows, 64, 32 or 16 tokens asks for (at most 32 Mi floats; a GEMM that would need more
    // takes fewer splits). Under --gpu-budget the placement is planned to the byte without this
    // speed buffer: split K stays off there.
    if (P.ctx.ledger().budget) P.split_k = false;
    if (P.split_k) {
      std::uint64_t most_parts = 0;
      for (const auto& e : P.weights) {
        const auto& w = *e.info;
        if (w.ne[2] != 1 || w.ne[1] <= 1 || w.ne[0] % 16 || !impl::f16_operands_ok(w.type)) continue;
        for (const std::uint32_t n : {P.max_rows, 64u, 32u, 16u}) {
          if (n > P.max_rows) continue;
          const mma2_tile t = P.mm3_tile_for(n);
          const bool whole = w.type == gguf::type_id::f16 || P.mm3_in_place(w.type, w.ne[0], n);  // else scratch slices
          const std::uint64_t rows = whole ? w.ne[1] : std::min<std::uint64_t>(w.ne[1], P.scratch_slice_rows(w.ne[0]));
          const std::uint32_t s = P.k_splits(t, div_up(rows, t.bm) * div_up(n, t.bn), w.ne[0]);
          if (s > 1) most_parts = std::max<std::uint64_t>(most_parts, std::uint64_t(s) * n * rows);
        }
      }
      P.mm_parts_floats = std::min<std::uint64_t>(most_parts, 32ull << 20);
      if (P.mm_parts_floats) {
        P.mm_parts = P.new_buffer(P.mm_parts_floats * 4, memory_kind::device, "split-K partial products");
        reqs.push_back(impl::split_k_sum_req());
        if (P.fuse && P.mm_fuse_more) {  // with the residual add (record_split_sum)
          reqs.push_back(impl::split_k_sum_req());
          reqs.back().defines.emplace_back("RESIDUAL", "1");
          reqs.back().bindings = 3;
        }
      }
    }
    // With the grid's token-fast form beside the unsplit ones where steps span several token tiles.
    // Plain unsplit ones also with the residual add in the store (takes_f16_gemm, add()).
    const auto add_gemm = [&](pipeline_request r, bool split, bool f16_weights, std::uint32_t bn, bool plain = false) {
      std::vector<pipeline_request> forms{r};
      if (plain && !split && P.fuse && P.mm_fuse_more) {
        forms.push_back(r);
        forms.back().defines.emplace_back("RESIDUAL", "1");
        forms.back().bindings = 4;
      }
      for (auto& f : forms) {
        if (!split && P.max_rows > bn && (P.mm3_tok_fast >= 2 || (P.mm3_tok_fast == 1 && f16_weights))) {
          pipeline_request tf = f;
          tf.defines.emplace_back("TOK_FAST", "1");
          reqs.push_back(std::move(tf));
        }
        reqs.push_back(std::move(f));
      }
    };
    for (const mma2_tile t0 : impl::mm3_tiles) {
      const mma2_tile t = P.mm3_forced ? P.mm3_shape : t0;
      for (const bool split : {false, true}) {
        if (split && !P.mm_parts) continue;
        add_gemm(P.mm3_req(t, P.mm_xh != 0, gguf::type_id::f16, split), split, true, t.bn, true);
        // The SwiGLU GEMM over the scratch's gate/up parts (record_mm3_swiglu_scratch).
        if (!split && P.mm_scratch && P.mm_xh && P.max_rows >= 128 && P.xh_b_rows > P.mms_max + 64 && t.wm == 32 &&
            t.bm == 128 && t.bn == 128 && !P.mma_n8 && P.mm_fuse_more)
          add_gemm(P.mm3_req(t, true, gguf::type_id::f16, false, true), false, true, t.bn);
        if (P.mm_xh)
          for (auto f : mat_formats)
            if (P.mm3_in_place(f, 64, P.max_rows) || (P.mmk_small_min <= P.mms_max && P.mm3_in_place(f, 64, P.mms_max)) ||
                P.mm3_in_place(f, 64, std::min(P.max_rows, std::max(P.mm3_scratch_min, 2u) - 1))) {
              add_gemm(P.mm3_req(t, true, f, split), split, false, t.bn, true);
              // The gate/up/SwiGLU form of the prompt steps' tiles (mm3_swiglu_ok).
              if (!split && P.max_rows >= 128 && P.xh_b_rows > P.mms_max + 64 && t.wm == 32 && t.bm == 128 && t.bn == 128 &&
                  !P.mma_n8 && P.mm_fuse_more)
                add_gemm(P.mm3_req(t, true, f, false, true), false, false, t.bn);
            }
      }
    }
  }
  // Narrow f32 matrices' split-K partials (record_narrow_gemm): S x max_rows x rows of the widest.
  // Not under --gpu-budget, whose placement is planned to the byte without this speed buffer.
  if (P.narrow_gemm && P.max_rows >= impl::narrow_min_tokens && !P.ctx.ledger().budget) {
    std::uint64_t most = 0;
    std::set<gguf::type_id> types;
    for (const auto& e : P.weights)
      if (impl::gpu_reads(e) && impl::narrow_matrix(*e.info)) {
        most = std::max<std::uint64_t>(most, std::uint64_t(impl::narrow_splits) * P.max_rows * e.info->ne[1]);
        types.insert(e.info->type);
      }
    for (const auto t : types) reqs.push_back(impl::narrow_req(t));
    if (most) {
      P.narrow_parts_floats = most;
      P.narrow_parts = P.new_buffer(most * 4, memory_kind::device, "narrow f32 GEMM partial products");
      if (!P.mm_parts) reqs.push_back(impl::split_k_sum_req());
    }
  }
  for (auto f : mat_formats) {
    reqs.push_back(P.mul_mm_req(f));
    if (P.coopmat && P.mma2 && impl::f16_operands_ok(f))
      for (const mma2_tile t : {mma2_tile{128, 128, 64, 32}, mma2_tile{128, 64, 64, 32}, mma2_tile{64, 64, 32, 32}})
        reqs.push_back(P.mma2_req(f, P.mma2_forced ? P.mma2_shape : t));
  }
  // Integer matvec: scratch for one quantized input, decode-shaped pipelines per format.
  for (const auto& e : P.weights)
    if (impl::gpu_reads(e) && P.int8_unit(e.info->type) && e.info->ne[1] > 1) P.max_k = std::max<std::uint32_t>(P.max_k, std::uint32_t(e.info->ne[0]));
  // The routers' experts, in one pass: the lean top-k's form depends on them all (k is assumed to
  // fit), the router parts on the f32 routers of at most 256 experts.
  std::uint32_t routed = 0, routed_f32 = 0;
  for (const auto& e : P.weights)
    if (e.info->name.ends_with("ffn_gate_inp.weight")) {
      routed = std::max(routed, std::uint32_t(e.info->ne[1]));
      if (e.info->type == gguf::type_id::f32 && e.info->ne[1] <= 256) routed_f32 = std::max(routed_f32, std::uint32_t(e.info->ne[1]));
    }
  if (P.mmvq && P.max_k) {
    P.max_k = (P.max_k + 255) / 256 * 256;

    for (int sl = 0; sl < 2; ++sl) {
      P.xq[sl] = P.new_buffer(std::uint64_t(P.max_q8_rows) * P.max_k, memory_kind::device, "int8 activations");
      P.xs[sl] = P.new_buffer(std::uint64_t(P.max_q8_rows) * P.max_k / 32 * 16, memory_kind::device, "int8 activation scales");
      if (P.norm_out && P.fuse)
        P.rms_sq[sl] = P.new_buffer(std::uint64_t(P.max_q8_rows) * P.max_k / 32 * 4, memory_kind::device, "norm block sums");
    }
    if (P.router_parts && P.rms_sq[0]) {  // decode routers' logits as per-block parts (moe_ffn, ROUTER_PARTS)
      P.router_part_experts = routed_f32;
      if (P.router_part_experts)
        P.router_part_buf = P.new_buffer(std::uint64_t(P.router_part_tokens) * P.max_k / 32 * P.router_part_experts * 4,
                                         memory_kind::device, "router logit parts");
    }
    for (bool norm : {false, true}) reqs.push_back(P.quantize_req(norm));
    for (const auto& e : P.weights)
      if (P.int8_unit(e.info->type) && e.info->ne[2] == 1 && e.info->ne[1] > 1)
        for (int v = 0; v < 3 + (P.tail_rows > 0); ++v)
          reqs.push_back(P.mmvq_req(e.info->type, 1, e.info->ne[0], e.info->ne[1], v == 1, v >= 2, false,
                                    v == 1 && P.quant_out && e.info->ne[1] % 32 == 0, false, v == 3));
    std::uint64_t embd = 0;  // the residual stream's width: the norms between matvecs have it
    for (const auto& e : P.weights)
      if (e.info->name == "token_embd.weight") embd = e.info->ne[0];
    if (P.rms_sq[0])  // decode's NORM_OUT producers and RMS_IN readers
      for (const auto& e : P.weights)
        if (P.int8_unit(e.info->type) && e.info->ne[2] == 1 && e.info->ne[1] > 1) {
          const auto t = e.info->type;
          const auto K = std::uint32_t(e.info->ne[0]);
          const bool q32 = e.info->ne[1] % 32 == 0;
          if (q32 && e.info->ne[1] == embd && P.norm_out_fits(t, e.info->ne[1])) reqs.push_back(P.mmvq_req(t, 1, e.info->ne[0], e.info->ne[1], false, true, false, false, false, false, true));
          if (K == embd) {
            reqs.push_back(P.mmvq_req(t, 1, e.info->ne[0], e.info->ne[1], false, false, false, false, false, false, false, K));
            reqs.push_back(P.mmvq_req(t, 1, e.info->ne[0], e.info->ne[1], true, false, false, P.quant_out && q32, false, false, false, K));
          }
        }
  }
  // Counters of work run by the last workgroup to arrive start at 0; each tail puts its counter back.
  const auto zeroed_counters = [&](std::uint32_t count, const char* what) {
    const std::uint32_t id = P.new_buffer(std::uint64_t(count) * 4, memory_kind::device, what);
    const std::vector<std::uint32_t> zeros(count, 0);
    uploader up(P.ctx, zeros.size() * 4);
    up.copy(std::as_bytes(std::span(zeros)), P.buf(id).handle(), 0);
    up.flush();
    return id;
  };
  if (P.tail_rows && P.fuse) P.tail_counter = zeroed_counters(4, "last-workgroup counter");
  if (P.fuse && P.rms_sq[0] && ((P.moe_block_tail && !id_formats.empty()) || P.block_norm_out))
    P.block_counters = zeroed_counters(P.moe_block_tail_tokens * (P.max_k / 32), "block tail counters");
  if (P.block_norm_out && P.block_counters)  // a one-token projection's raw rows before its block tails
    P.proj_rows = P.new_buffer(std::uint64_t(P.max_k) * 4, memory_kind::device, "block-tail projection rows");
  for (const auto& e : P.weights)
    if (impl::gpu_reads(e) && e.info->ne[2] > 1) reqs.push_back(P.matvec_req(e.info->type, 1, true, e.info->ne[1]));
  if (!id_formats.empty()) {
    reqs.push_back(impl::moe_req("MOE_TOPK", false, P.topk_lean_slots(routed, 1)));
    reqs.push_back(impl::moe_req("MOE_TOPK", true, P.topk_lean_slots(routed, 1)));
    reqs.push_back(impl::moe_req("MOE_GATHER"));
    reqs.push_back(impl::moe_req("MOE_COMBINE"));
    reqs.push_back(impl::req("moe", {}, {{"MOE_COMBINE", "1"}, {"RESIDUAL", "1"}}, 6));
    if (P.tail_counter) reqs.push_back(impl::req("moe", {}, {{"MOE_COMBINE", "1"}, {"RESIDUAL", "1"}, {"NORM_TAIL", "6"}}, 12));
    if (P.rms_sq[0]) reqs.push_back(impl::combine_norm_out_req());
    if (P.mmvq && P.max_k && P.moe_grouped) reqs.push_back(impl::moe_group_req());
    if (P.mmvq && P.max_k) reqs.push_back(impl::req("quantize_q8", {}, {{"WG", "128"}, {"NORM", "1"}, {"WRITE_Y", "1"}}, 5));
  }
  for (bool w : {false, true}) reqs.push_back(impl::norm_req(w));
  reqs.push_back(impl::req("rope", {}, {}, 4));
  reqs.push_back(impl::req("temperature", {}, {}, 3));
  reqs.push_back(impl::elementwise_req("OP_ADD"));
  reqs.push_back(impl::elementwise_req("OP_SWIGLU"));
  reqs.push_back(impl::copy_req(false));
  reqs.push_back(impl::copy_req(true));
  const auto t1 = clock_type::now();
  P.pipes.prepare(reqs, P.opt.progress);
  P.stats.pipelines_ms += ms_since(t1);

  // Host-visible copy target of read(): as large as the largest activation buffer (the logits).
  std::uint64_t largest = 0;
  for (const auto& b : P.buffers) largest = std::max(largest, b.size());
  P.readback = gpu_buffer(P.ctx, largest, memory_kind::readback, "logits readback");
  P.ids_readback = gpu_buffer(P.ctx, std::max<std::uint64_t>(std::uint64_t(max_tokens) * 4, 16), memory_kind::readback,
                              "argmax readback");

  // MoE routing buffers.
  P.moe_ids = P.new_buffer(std::uint64_t(max_routed) * 4 + 16, memory_kind::device, "MoE expert ids");
  P.moe_wts = P.new_buffer(std::uint64_t(max_routed) * 4 + 16, memory_kind::device, "MoE expert weights");
  if (P.host) P.host->reserve(max_tokens, max_routed);
  P.upload_cached(max_routed);
  if (!id_formats.empty() && P.mmvq && P.max_k && P.moe_grouped) {
    P.moe_max_chunks = div_up(max_routed, impl::moe_chunk) + 256;  // at most one partial chunk per expert
    P.moe_sorted_off = 4 + 3 * P.moe_max_chunks;
    P.moe_groups = P.new_buffer((std::uint64_t(P.moe_sorted_off) + max_routed) * 4, memory_kind::device, "MoE pairs by expert");
    std::uint32_t widest = 0;  // expert inputs: the hidden state (gate, up) and the FFN width (down)
    std::uint32_t n_expert = 0;
    for (const auto& e : P.weights)
      if (e.info->ne[2] > 1) {
        n_expert = std::max(n_expert, std::uint32_t(e.info->ne[2]));
        if (e.info->ne[0] % 64 == 0) widest = std::max(widest, std::uint32_t(e.info->ne[0]));
      }
    // Only grouped steps (impl::grouped_experts) run the experts on the tensor cores.
    if (P.coopmat && P.mms && P.mms_moe && widest && max_routed >= 256 && impl::grouped_experts(max_routed, n_expert)) {
      // 64 rows of slack: a chunk's tiles are whole 16-row tiles.
      P.moe_xh_cols = widest;
      P.moe_xh = P.new_buffer((std::uint64_t(max_routed) + 64) * widest * 2, memory_kind::device, "MoE activations by expert (f16)");
      std::vector<pipeline_request> mr{impl::moe_group_req(P.mms_moe_chunk),
                                       impl::req("copy_rows", {}, {{"WG", "128"}, {"TO_F16", "1"}, {"INDEXED", "1"}}, 4)};
      for (auto f : id_formats) {
        mr.push_back(P.mm_small_req(f, P.mms_moe_chunk, true));
        mr.push_back(P.mm_small_req(f, P.mms_moe_chunk, true, true));
      }
      // Int8 tensor cores for the formats with an int8 unit (record_moe_mmq), once the probe
      // shows the accumulator layout the epilogue needs.
      if (P.mmq_moe && P.ctx.info().nv_coopmat_int8 &&
          std::any_of(id_formats.begin(), id_formats.end(), [](gguf::type_id f) { return detail::has_mmq_unit(f); })) {
        P.mmq_layout = probe_mma_layout(P.ctx, P.pipes);
        if (P.mmq_layout)
          for (const std::uint32_t c : {16u, 32u, 64u}) {
            if (P.mmq_moe_chunk && c != P.mmq_moe_chunk) continue;
            mr.push_back(impl::moe_group_req(c));
            for (auto f : id_formats)
              if (detail::has_mmq_unit(f)) mr.push_back(P.mmq_req(f, P.mmq_moe_tile(c), true));
          }
      }
      P.pipes.prepare(mr, P.opt.progress);
    }
  }
  // Int8 tensor cores for plain matmuls of mmq_dense_min..mmq_dense_max tokens (record_mmq_dense).
  if (P.mmq_dense && P.coopmat && P.ctx.info().nv_coopmat_int8 && P.max_k && P.max_rows >= P.mmq_dense_min &&
      std::any_of(mat_formats.begin(), mat_formats.end(), [](gguf::type_id f) { return detail::has_mmq_unit(f); })) {
    if (!P.mmq_layout) P.mmq_layout = probe_mma_layout(P.ctx, P.pipes);
    if (P.mmq_layout) {
      std::vector<pipeline_request> dr;
      for (const std::uint32_t n : {16u, 32u, 64u})
        for (auto f : mat_formats)
          if (detail::has_mmq_unit(f) && n >= P.mmq_dense_min / 16 * 16 && n <= std::max<std::uint32_t>(16, P.max_rows)) {
            dr.push_back(P.mmq_req(f, impl::mmq_dense_tile(n), false));
            if (P.mm_parts) dr.push_back(P.mmq_req(f, impl::mmq_dense_tile(n), false, true));
          }
      P.pipes.prepare(dr, P.opt.progress);
    }
  }
  // The prompt attention keeps its softmax in registers where the accumulators have mma.sync's layout.
  if (P.coopmat && P.flash_attention && P.fa_regs) {
    const auto layout = P.mmq_layout ? P.mmq_layout : probe_mma_layout(P.ctx, P.pipes);
    P.fa_quad = layout && layout->quad;
  }
  // Hand-offs meet the GPU at flag words only where a probe shows the GPU sees the host's go
  // word in time (handoff_poll.cpp); else the timeline path. Never on a CPU device (lavapipe):
  // its bounded spin runs on the host's own cores, so whether it outlasts the probe's 50 ms
  // depended on the machine's load (a loaded CI box took flag words and a later step's wait
  // gave up: "the GPU's wait for the host timed out").
  if (P.handoff_poll) P.handoff_poll = !P.ctx.info().is_cpu && P.probe_polling();
  if (P.miss_slice_percent() <= 0) P.cache_stats.miss_slice_percent = 0;  // its default needs the flag words
}

}  // namespace strata::gpu
