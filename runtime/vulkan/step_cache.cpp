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

// Room for every step size up to 64 tokens (step_buckets.hpp: 20) in its forms (logits or
// argmax, one sequence or several, short context or long) and the prompt sizes a server sees.
// A recorded step holds ~6 MiB of device memory the driver counts (H200, qwen3-8b; bench/RESULTS.md
// session 24), outside the engine's ledger: under --gpu-budget the cache keeps to the 16 steps
// the budget's keep-back for the driver was measured with (runtime/device_memory.hpp).
constexpr std::uint32_t max_cached_steps = 64, max_cached_steps_budgeted = 16;

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
  rec.dispatch(pipes.get(r), b, pc, pc_bytes, gx, gy, gz);
  if (!repeat_kernels.empty() && repeated(r)) rec.dispatch(pipes.get(r), b, pc, pc_bytes, gx, gy, gz);
  if (std::exchange(encode_next, false)) flush_encode();
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
  rec.dispatch(pipes.get(r), b, pc, pc_bytes, gx, gy, gz);
  if (!repeat_kernels.empty() && repeated(r)) rec.dispatch(pipes.get(r), b, pc, pc_bytes, gx, gy, gz);
  if (std::exchange(encode_next, false)) flush_encode();
}

void backend::begin(const graph::step_inputs& in) {
  auto& P = *p_;
  const graph::batch& b = in.tokens;
  const std::uint32_t n = std::uint32_t(b.size());
  if (!P.step) throw error("Vulkan backend: make_kv() must run before the first step");
  if (n > P.max_rows) throw error("batch of " + std::to_string(n) + " tokens exceeds the reserved " + std::to_string(P.max_rows));
  std::byte* s = P.step.mapped();
  std::memcpy(s + P.off_tokens, b.tokens.data(), n * 4);
  std::memcpy(s + P.off_pos, b.positions.data(), n * 4);
  auto* out_rows = reinterpret_cast<std::uint32_t*>(s + P.off_out_rows);
  std::uint32_t n_out = 0;
  for (std::uint32_t t = 0; t < n; ++t)
    if (b.logits[t]) out_rows[n_out++] = t;
  const bool every_row_out = n_out == n;  // the output norm reads the rows in place (decoder.hpp)
  if (in.outputs > n_out) {  // a padded step's output rows: copies of its last
    if (n_out == 0 || in.outputs > n)
      throw error("step of " + std::to_string(n) + " tokens asks for " + std::to_string(in.outputs) + " output rows from " +
                  std::to_string(n_out) + " flagged");
    for (; n_out < in.outputs; ++n_out) out_rows[n_out] = out_rows[n_out - 1];
  }
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
  for (auto& q : P.quantized) q.reset();
  P.xh_holds.reset();
  P.scratch_plan.restart();
  P.heads.clear();
  P.step_tokens = n;
  if (in.padding >= n) throw error("step of " + std::to_string(n) + " tokens pads " + std::to_string(in.padding));
  P.batch_tokens = n - in.padding;
  P.read_dst = nullptr;
  // Fusion folds norms, SwiGLU and residual adds into the integer matvecs; steps that mul_mm_small
  // takes (from mms_min tokens) run those ops on their own.
  P.fuse_step = P.fuse && n <= 8 && !(P.mms && P.mm_xh && n >= P.mms_min);
  P.single_seq = std::all_of(b.seq_ids.begin(), b.seq_ids.end(), [&](std::uint32_t s) { return s == b.seq_ids[0]; });
  // The shape of the recorded step: tokens, output rows, one sequence or several, and what it
  // hands back (an embedding step of n_out rows is not the logits step of n_out rows).
  // Decode steps whose tokens all see a short context record apart from long ones: their attention
  // runs unsplit (as in a small KV cache), not as splits of the whole cache, most of them empty,
  // and a combine pass (H200, qwen3-8b tg128 in a 4,224-token cache: 255 t/s against 290).
  std::int32_t max_pos = 0;
  for (const auto p : b.positions) max_pos = std::max(max_pos, p);
  P.short_ctx = P.short_ctx_len && n <= 8 && std::uint32_t(max_pos) < P.short_ctx_len;
  P.current_key = std::uint64_t(n) | std::uint64_t(n_out) << 32 | std::uint64_t(every_row_out) << 59 |
                  std::uint64_t(in.output) << 60 | std::uint64_t(P.single_seq) << 62 | std::uint64_t(P.short_ctx) << 63;
  P.ids_dst = nullptr;
  if (auto it = P.steps.find(P.current_key); it != P.steps.end()) {
    P.current = &it->second;
    P.replay = true;
    return;
  }
  if (P.steps.size() >= (P.opt.memory_budget ? max_cached_steps_budgeted : max_cached_steps))
    P.steps.clear();  // shapes churn: start over rather than grow
  P.replay = false;
  P.recording = true;
  P.record_start = std::chrono::steady_clock::now();
  P.pending = {};
  P.pending.cmd = P.new_command_buffer();
  P.rec.begin(P.pending.cmd, P.opt.profile ? *P.queries : vk::QueryPool{}, P.query_capacity);
  P.stream_step_begin();
  P.xstream_step_begin();
}

void backend::finish() {
  auto& P = *p_;
  if (!P.replay) {
    if (!P.recording) return;
    P.flush_all();
    P.rec.end();
    P.recording = false;
    P.pending.labels = P.rec.labels();
    P.pending.weight_bytes = P.rec.weight_bytes();
    P.last_dispatches = P.rec.dispatches();
    P.current = &P.steps.insert_or_assign(P.current_key, std::move(P.pending)).first->second;
    ++P.recordings.steps;
    P.recordings.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - P.record_start).count();
  }
  P.submit_step();
  if (P.streaming.layers) {  // the recorded copies ran (every streamed block once), or the CPU computed them
    if (P.stream_on_cpu()) ++P.streaming.cpu_steps;
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
    const auto n = std::uint32_t(P.current->labels.size());
    const auto [r, ts] = P.queries.getResults<std::uint64_t>(
        0, n + 1, (n + 1) * 8, 8, vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait);
    if (r == vk::Result::eSuccess)
      for (std::uint32_t i = 0; i < n; ++i) {
        auto& k = P.prof[P.current->labels[i]];
        k.label = P.current->labels[i];
        k.total_ms += double(ts[i + 1] - ts[i]) * P.ctx.info().timestamp_period_ns * 1e-6;
        k.weight_bytes += double(P.current->weight_bytes[i]);
        ++k.calls;
      }
  }
}
}  // namespace strata::gpu
