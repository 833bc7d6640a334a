// A step recorded once per shape and replayed: begin() writes the step's inputs and picks the
// recorded command buffer (or starts recording), finish() submits it and copies results out.
#include "backend_impl.hpp"
#include "step_buckets.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "strata/core/error.hpp"

namespace strata::gpu {
namespace {

// Layers' parts recorded on first use beyond those recorded ahead (backend::record_only): room
// for every step size up to 64 tokens (step_buckets.hpp: 20) in its forms (one sequence or
// several, short context or long) and the prompt sizes a server sees. A recorded step held ~6 MiB
// of device memory the driver counts (H200, qwen3-8b; bench/RESULTS.md session 24), outside the
// engine's ledger: under --gpu-budget the cache keeps to the 16 steps the budget's keep-back for
// the driver was measured with (runtime/device_memory.hpp). Output parts are a few dispatches.
constexpr std::size_t max_cached_steps = 64, max_cached_steps_budgeted = 16, max_cached_outputs = 128;
// Parts recorded ahead (backend::record_only): a server's forms (64 streams, 512-token steps: ~80
// layers' parts); under --gpu-budget 12, so that 4 of the 16 stay for steps recorded on use.
constexpr std::size_t max_ahead_steps = 128, max_ahead_steps_budgeted = 12, min_cached_steps = 4;

// Fusion folds norms, SwiGLU and residual adds into the integer matvecs of decode-sized steps;
// steps that mul_mm_small takes (from mms_min tokens) run those ops on their own.
template <class Impl>
bool fuses(const Impl& P, std::uint32_t rows) {
  return P.fuse && rows <= 8 && !(P.mms && P.mm_xh && rows >= P.mms_min);
}

// Bits of a layers' part's key above its token count (begin()).
constexpr std::uint64_t key_in_place = std::uint64_t(1) << 60, key_rows_back = std::uint64_t(1) << 61;

template <class Parts>
std::size_t recorded_ahead(const Parts& parts) {
  return std::size_t(std::count_if(parts.begin(), parts.end(), [](const auto& s) { return s.second.ahead; }));
}

}  // namespace

using namespace detail;

namespace {

// An item matches a label that holds every one of its '+'-separated parts ("mmvq+SWIGLU").
bool matches(const std::vector<std::string>& items, const pipeline_request& r) {
  const std::string l = r.label();
  return std::any_of(items.begin(), items.end(), [&](std::string_view s) {
    for (std::size_t at = 0; at <= s.size();) {
      const std::size_t e = std::min(s.find('+', at), s.size());
      if (l.find(s.substr(at, e - at)) == std::string::npos) return false;
      at = e + 1;
    }
    return true;
  });
}

}  // namespace

std::uint32_t backend::step_rows(std::uint32_t n) const { return p_->step_buckets ? padded_step_rows(n) : n; }
step_recording_stats backend::recordings() const { return p_->recordings; }
std::uint32_t backend::step_granule() const {
  // The f16 GEMM's widest token tile (record_mul_mm_f16), else mul_mm's 64 (record_mul_mm).
  if (p_->step_granule) return p_->step_granule;
  if (!p_->coopmat || !p_->mm3) return 64;
  return p_->mm3_forced ? p_->mm3_shape.bn : impl::mm3_tiles[0].bn;
}

bool backend::impl::skipped(const pipeline_request& r) const { return matches(skip_kernels, r); }
bool backend::impl::repeated(const pipeline_request& r) const { return matches(repeat_kernels, r); }

void backend::impl::dispatch(const pipeline_request& r, std::span<const binding> b, const void* pc, std::uint32_t pc_bytes,
                             std::uint32_t gx, std::uint32_t gy) {
  if (!skip_kernels.empty() && skipped(r)) return;
  // Workgroup counts above the device limit (e.g. vocabulary rows) spill into z.
  const std::uint32_t lim = ctx.info().max_workgroups_x;
  std::uint32_t gz = 1;
  if (gx > lim) {
    gz = div_up(gx, lim);
    gx = div_up(gx, gz);
  }
  dispatch3(r, b, pc, pc_bytes, gx, gy, gz);
  if (pad_levels && r.shader == "attn_prep") {
    if (!pad_buffer) pad_buffer = new_buffer(1024, memory_kind::device, "lab level padding");
    const copy_rows_pc cp{32, 0, 32, 64, 32};
    const binding pb[] = {bind_id(pad_buffer, false), bind_id(pad_buffer, false), bind_id(pad_buffer, true)};
    for (std::uint32_t i = 0; i < pad_levels; ++i) rec.dispatch(pipes.get(copy_req(false)), pb, &cp, sizeof cp, 1, 1, 1);
  }
}

void backend::impl::dispatch3(const pipeline_request& r, std::span<const binding> b, const void* pc, std::uint32_t pc_bytes,
                              std::uint32_t gx, std::uint32_t gy, std::uint32_t gz) {
  if (!skip_kernels.empty() && skipped(r)) return;
  const pipeline& p = pipes.get(r);
  rec.dispatch(p, b, pc, pc_bytes, gx, gy, gz);
  if (!repeat_kernels.empty() && repeated(r)) rec.dispatch(p, b, pc, pc_bytes, gx, gy, gz);
  if (std::exchange(encode_next, false)) flush_encode();
}

void backend::begin(const graph::step_inputs& in) {
  auto& P = *p_;
  const graph::batch& b = in.tokens;
  const std::uint32_t n = std::uint32_t(b.size());
  if (!P.step) throw error("Vulkan backend: make_kv() must run before the first step");
  if (n > P.max_rows) throw error("batch of " + std::to_string(n) + " tokens exceeds the reserved " + std::to_string(P.max_rows));
  std::uint32_t n_out = 0;
  for (std::uint32_t t = 0; t < n; ++t) n_out += b.logits[t] != 0;
  const bool every_row_out = n_out == n;  // the output norm reads the rows in place (decoder.hpp)
  if (in.outputs > n_out && (n_out == 0 || in.outputs > n))  // a padded step's output rows: copies of its last
    throw error("step of " + std::to_string(n) + " tokens asks for " + std::to_string(in.outputs) + " output rows from " +
                std::to_string(n_out) + " flagged");
  const std::uint32_t outs = std::max(in.outputs, n_out);
  if (in.padding >= n) throw error("step of " + std::to_string(n) + " tokens pads " + std::to_string(in.padding));
  // A step recorded ahead (record_only) writes no inputs: nothing runs, and a step may be in flight.
  if (!P.record_only) {
    std::byte* s = P.step.mapped();
    std::memcpy(s + P.off_tokens, b.tokens.data(), n * 4);
    std::memcpy(s + P.off_pos, b.positions.data(), n * 4);
    auto* out_rows = reinterpret_cast<std::uint32_t*>(s + P.off_out_rows);
    std::uint32_t r = 0;
    for (std::uint32_t t = 0; t < n; ++t)
      if (b.logits[t]) out_rows[r++] = t;
    for (; r < outs; ++r) out_rows[r] = out_rows[r - 1];
    if (in.kv) {  // slots of the new tokens and the block tables of their sequences
      auto* slots = reinterpret_cast<std::uint32_t*>(s + P.off_slots);
      auto* seq_row = reinterpret_cast<std::uint32_t*>(s + P.off_seq_row);
      auto* blocks = reinterpret_cast<std::uint32_t*>(s + P.off_blocks);
      std::uint32_t last_seq = ~0u;
      for (std::uint32_t t = 0; t < n; ++t) {
        const std::uint32_t seq = b.seq_ids[t];
        slots[t] = in.kv->slot(seq, std::uint32_t(b.positions[t]));
        seq_row[t] = seq;
        if (seq != last_seq) {
          const auto bl = in.kv->blocks(seq);
          if (bl.size() > P.max_blocks || (std::uint64_t(seq) + 1) * P.max_blocks * 4 > P.blocks_bytes)
            throw error("Vulkan backend: the block table does not match the KV cache made by make_kv()");
          std::memcpy(blocks + std::size_t(seq) * P.max_blocks, bl.data(), bl.size() * 4);
          last_seq = seq;
        }
      }
    }
  }
  for (auto& q : P.quantized) q.reset();
  P.xh_holds.reset();
  P.scratch_plan.restart();
  P.heads.clear();
  P.step_tokens = n;
  P.batch_tokens = n - in.padding;
  P.read_dst = nullptr;
  P.ids_dst = nullptr;
  P.fuse_step = fuses(P, n);
  P.single_seq = std::all_of(b.seq_ids.begin(), b.seq_ids.end(), [&](std::uint32_t s) { return s == b.seq_ids[0]; });
  // Decode steps of a few streams, each token its sequence's only one: its attention may append the
  // step's K/V rows itself (attention.glsl HEAD_OPS), as no token of the step reads another's.
  P.own_rows = n <= 8;
  for (std::uint32_t i = 0; P.own_rows && i < n; ++i)
    for (std::uint32_t j = 0; j < i; ++j) P.own_rows &= b.seq_ids[i] != b.seq_ids[j];
  // Decode steps whose tokens all see a short context record apart from long ones: their attention
  // runs unsplit (as in a small KV cache), not as splits of the whole cache, most of them empty,
  // and a combine pass (H200, qwen3-8b tg128 in a 4,224-token cache: 255 t/s against 290).
  std::int32_t max_pos = 0;
  for (const auto p : b.positions) max_pos = std::max(max_pos, p);
  P.short_ctx = P.short_ctx_len && n <= 8 && std::uint32_t(max_pos) < P.short_ctx_len;
  // The layers' part by the step's tokens, one sequence or several, short context or long, and
  // whether it reads the hidden rows back (a model slice without the head); the output part
  // (begin_output) by its rows, in place or gathered, and what it hands back.
  // An output that reads every row in place keeps the output norm in the layers' part (as one
  // recording would: it may ride in the last matvec), so both parts' keys say so, and the output
  // part's key names the layers' form whose end state it starts from.
  const bool rows_back = in.output == graph::step_output::hidden;
  const bool in_place = every_row_out && outs > 0 && !rows_back;
  P.current_key = std::uint64_t(n) | (in_place ? key_in_place : 0) | (rows_back ? key_rows_back : 0) |
                  std::uint64_t(P.own_rows) << 59 | std::uint64_t(P.single_seq) << 62 | std::uint64_t(P.short_ctx) << 63;
  P.outputs.key = std::uint64_t(outs) | std::uint64_t(every_row_out) << 32 | std::uint64_t(in.output) << 33;
  if (in_place) P.outputs.key |= P.current_key & (std::uint64_t(3) << 62);
  if (!P.output_part)  // one part: its key holds the output's form too (n and outs < 2^24)
    P.current_key |= (std::uint64_t(outs) << 24 | std::uint64_t(every_row_out) << 48 | std::uint64_t(in.output) << 49);
  P.outputs.current = nullptr;
  P.outputs.active = P.outputs.after_norm = false;
  P.recorded_any = false;
  if (auto it = P.steps.find(P.current_key); it != P.steps.end()) {
    P.current = &it->second;
    P.replay = true;
    return;
  }
  P.current = nullptr;
  P.start_part(false);
  P.stream_step_begin();
  P.xstream_step_begin();
}

void backend::begin_output() {
  auto& P = *p_;
  if (P.outputs.active || P.outputs.after_norm) throw error("internal: begin_output() twice in a step");
  if (!P.output_part) return;
  if (P.current_key & key_in_place) P.outputs.after_norm = true;  // in place: rms_norm() enters the part
  else P.enter_output(false);
}

// implicit: read() or argmax() in a step that had no begin_output() (ops called directly; not
// the hidden rows a slice without the head reads, which belong to its layers): its output part
// may depend on the step's token count too, so its key holds that count.
void backend::impl::enter_output(bool implicit) {
  auto& P = *this;
  if (implicit && (!P.output_part || P.outputs.active || (P.current_key & key_rows_back))) return;
  const bool in_place = P.outputs.after_norm;
  P.outputs.after_norm = false;
  if (implicit) P.outputs.key |= std::uint64_t(1) << 40 | std::uint64_t(P.step_tokens) << 41;
  if (!P.replay) P.current = P.file_part(false, in_place);
  P.outputs.active = true;
  // In place, the part starts from the state its layers' part ended with (recorded_step.hpp).
  // Otherwise from what begin() leaves, whatever layers' part ran before: it relies on no
  // quantized or f16 copy, scratch slot or pending op of theirs, and its fusion follows its own
  // rows (its key holds no token count).
  P.fuse_step = fuses(P, std::uint32_t(P.outputs.key));
  for (int i = 0; i < 2; ++i) P.quantized[i] = in_place ? P.current->quantized[i] : std::nullopt;
  P.xh_holds = in_place ? P.current->xh_holds : std::nullopt;
  P.norms = in_place ? P.current->norms : std::vector<pending_norm>{};
  P.scratch_plan.restart();
  P.tail_slot.reset();
  if (auto it = P.outputs.recorded.find(P.outputs.key); it != P.outputs.recorded.end()) {
    P.outputs.current = &it->second;
    P.replay = true;
    return;
  }
  P.start_part(true);
}

void backend::record_only(bool on) {
  auto& P = *p_;
  if (P.recording || P.outputs.active) throw error("internal: record_only() inside a step");
  P.record_only = on;
}

bool backend::can_record_ahead() const {
  const std::size_t cap = p_->opt.memory_budget ? max_ahead_steps_budgeted : max_ahead_steps;
  return recorded_ahead(p_->steps) < cap && recorded_ahead(p_->outputs.recorded) < max_cached_outputs;
}

void backend::impl::start_part(bool output) {
  auto& parts = output ? outputs.recorded : steps;
  const std::size_t ahead = recorded_ahead(parts);
  // Room for parts recorded on use: beside those recorded ahead, or within the budgeted total.
  const std::size_t room = output              ? max_cached_outputs
                           : opt.memory_budget ? std::max(min_cached_steps, max_cached_steps_budgeted - std::min(ahead, max_cached_steps_budgeted))
                                               : max_cached_steps;
  if (!record_only && parts.size() >= ahead + room)  // shapes churn: start over rather than grow (parts recorded ahead stay)
    std::erase_if(parts, [](const auto& s) { return !s.second.ahead; });
  replay = false;
  recording = true;
  record_start = std::chrono::steady_clock::now();
  cache_split_open = cache_handoff_open = cache_staged_block = -1;  // a recording that threw inside a cached block's experts
  pending = {};
  pending.cmd = new_command_buffer();
  rec.begin(pending.cmd, opt.profile ? *queries : vk::QueryPool{}, output ? query_capacity - output_queries : output_queries,
            output ? output_queries : 0, output);
}

recorded_step* backend::impl::file_part(bool output, bool keep_norms) {
  // keep_norms: a norm waiting to fold into its matmuls (the output norm) waits in the state
  // the part files for the output part; everything else is recorded here.
  std::vector<pending_norm> kept;
  if (keep_norms) kept.swap(norms);
  flush_all();
  if (!output) record_cache_log_copy();  // the routing of blocks read through their slot maps, to the host
  for (int i = 0; i < 2; ++i) pending.quantized[i] = quantized[i];
  pending.xh_holds = xh_holds;
  pending.norms = std::move(kept);
  rec.end();
  recording = false;
  pending.labels = rec.labels();
  pending.weight_bytes = rec.weight_bytes();
  pending.barriers = rec.barriers();
  pending.ahead = record_only;
  recorded_any = true;
  recordings.ms += ms_since(record_start);
  auto& parts = output ? outputs.recorded : steps;
  return &parts.insert_or_assign(output ? outputs.key : current_key, std::move(pending)).first->second;
}

void backend::finish() {
  auto& P = *p_;
  if (!P.replay && !P.recording) return;  // no step begun
  if (P.outputs.after_norm) throw error("internal: begin_output() without the output norm before finish()");
  if (P.recording) {
    if (P.outputs.active) P.outputs.current = P.file_part(true);
    else P.current = P.file_part(false);
  }
  P.outputs.active = false;
  if (P.recorded_any) ++P.recordings.steps;
  if (!P.record_only && P.current) {  // the step that runs, recorded now or replayed (steps recorded ahead do not run)
    P.last_dispatches = std::uint32_t(P.current->labels.size() + (P.outputs.current ? P.outputs.current->labels.size() : 0));
    P.last_barriers = P.current->barriers + (P.outputs.current ? P.outputs.current->barriers : 0);
  }
  if (P.record_only) {
    P.replay = false;
    return;
  }
  P.submit_step();
  if (P.current && !P.current->lookups.empty()) P.after_cache_lookup(*P.current);
  if (P.streaming.layers) {  // the recorded copies ran (every streamed block once), or the CPU computed them
    if (P.stream_on_cpu()) ++P.streaming.cpu_steps, P.streaming.bytes_streamed += P.streaming.link_bytes_per_step;
    else P.streaming.bytes_streamed += P.streaming.bytes_per_step;
    P.streaming.tokens += P.batch_tokens;
    ++P.streaming.steps;
  }
  if (P.xstreaming.layers) {  // the same for routed experts streamed in prompt steps
    if (P.experts_on_cpu()) ++P.xstreaming.cpu_steps;
    else P.xstreaming.bytes_streamed += P.xstreaming.bytes_per_step;
    P.xstreaming.tokens += P.batch_tokens;
    ++P.xstreaming.steps;
  }
  if (P.read_dst) std::memcpy(P.read_dst, P.readback.mapped(), P.read_floats * 4);
  if (P.ids_dst) std::memcpy(P.ids_dst, P.ids_readback.mapped(), P.ids_count * 4);
  if (P.opt.profile) {
    const auto add = [&](const recorded_step& part, std::uint32_t first) {
      const auto n = std::uint32_t(part.labels.size());
      const auto [r, ts] = P.queries.getResults<std::uint64_t>(
          first, n + 1, (n + 1) * 8, 8, vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait);
      if (r != vk::Result::eSuccess) return;
      for (std::uint32_t i = 0; i < n; ++i) {
        auto& k = P.prof[part.labels[i]];
        k.label = part.labels[i];
        k.total_ms += double(ts[i + 1] - ts[i]) * P.ctx.info().timestamp_period_ns * 1e-6;
        k.weight_bytes += double(part.weight_bytes[i]);
        ++k.calls;
      }
    };
    add(*P.current, 0);
    if (P.outputs.current) add(*P.outputs.current, P.output_queries);
  }
  P.replay = false;
}
}  // namespace strata::gpu
