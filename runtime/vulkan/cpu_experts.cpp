// The MoE hand-off of the Vulkan backend (cpu_experts.hpp): the CPU side (the CPU backend's
// routing and expert kernels over host views of the hand-off buffers) and the recording side (the
// copies around it and the command buffer split). The host must see the router's output before
// it can start, and the GPU must see the experts' sum before the next op: how the parts of a
// step are submitted and waited on around the CPU's work is handoff_submit.cpp.
#include "cpu_experts.hpp"

#include <cstdlib>
#include <numeric>
#include <string_view>
#include <vector>

#include "backend_impl.hpp"
#include "scoped_value.hpp"
#include "strata/core/error.hpp"
#include "strata/kernels/cpu/backend.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::gpu {

using namespace detail;

struct cpu_experts::state {
  kernels::cpu::backend be;
  std::vector<kernels::cpu::weight> weights;
  kernels::cpu::buffer xin, gate, up, y;  // max_tokens x n_used rows, as wide as the widest tensor side
  std::uint32_t max_rows = 0;

  explicit state(unsigned threads)
      : be(threads ? threads : kernels::cpu::thread_pool::physical_cores(), rt::select_kernel_table(rt::best_isa())) {
    // A/B lab switch: the experts' four pool jobs per step instead of one (same bits).
    if (const char* v = std::getenv("STRATA_VK_HANDOFF_FUSE"); v && std::string_view(v) == "0") be.set_moe_fuse_pairs(0);
  }
};

cpu_experts::cpu_experts(unsigned threads) : s_(std::make_unique<state>(threads)) {}
cpu_experts::~cpu_experts() = default;

unsigned cpu_experts::threads() const noexcept { return s_->be.threads(); }
kernels::cpu::thread_pool& cpu_experts::pool() noexcept { return s_->be.pool(); }

std::uint32_t cpu_experts::load(const gguf::tensor_info& t) {
  if (t.ne[2] < 2 || t.ne[3] != 1)
    throw error("tensor '" + std::string(t.name) + "' is not an expert tensor [n_in, n_out, n_expert]");
  s_->weights.push_back(s_->be.load(t));
  return std::uint32_t(s_->weights.size() - 1);
}

void cpu_experts::reserve(std::uint32_t max_tokens, std::uint32_t max_pairs) {
  std::uint32_t width = 0;
  for (const auto& w : s_->weights) width = std::max({width, std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1])});
  auto& S = *s_;
  S.xin = S.be.alloc(max_pairs, width);
  S.gate = S.be.alloc(max_pairs, width);
  S.up = S.be.alloc(max_pairs, width);
  S.y = S.be.alloc(max_pairs, width);
  S.be.reserve(max_tokens, max_pairs);
  S.max_rows = max_tokens;
}

std::uint32_t cpu_experts::slice_align(std::uint32_t gate, std::uint32_t up, std::uint32_t down) const {
  const auto& g = s_->weights.at(gate);
  const auto& u = s_->weights.at(up);
  const auto& d = s_->weights.at(down);
  if (!g.packed || !u.packed || !d.packed || g.kernels != u.kernels) return 0;
  return kernels::cpu::moe_runner::slice_align(d);
}

void cpu_experts::run(const task& t, const float* x, const float* logits, float* out) {
  auto& S = *s_;
  if (t.rows > S.max_rows) throw error("CPU experts: " + std::to_string(t.rows) + " rows exceed the reserved " + std::to_string(S.max_rows));
  using ct = kernels::cpu::tensor;
  const ct xv{const_cast<float*>(x), t.rows, t.cols, t.cols};  // read only: the experts' input
  const ct lv{const_cast<float*>(logits), t.rows, t.n_expert, t.n_expert};
  const ct ov{out, t.rows, t.cols, t.cols};
  const auto& g = S.weights.at(t.gate);
  const auto& u = S.weights.at(t.up);
  const auto& d = S.weights.at(t.down);
  const auto ff = std::uint32_t(g.ne[1]);
  S.be.moe_route(lv, t.params);
  graph::moe_params mp = t.params;
  if (t.ranks && t.ranks < mp.n_used) {  // the GPU computes the other ranks (record_shared_moe)
    S.be.moe_keep_first_ranks(mp.n_used, t.ranks);
    mp.n_used = t.ranks;
  }
  const graph::moe_scratch<ct> s{lv, S.xin.all().first_cols(t.cols), S.gate.all().first_cols(ff),
                                 S.up.all().first_cols(ff), S.y.all().first_cols(t.cols)};
  S.be.moe_experts({nullptr, &g, &u, &d}, mp, xv, s, ov, t.ff_begin);
}

void backend::impl::record_cpu_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x,
                                   const tensor& logits, const tensor& out) {
  begin_cpu_moe(mw, mp, x, logits, out, 0);
  rec.resume(pending.handoffs.back().cmd, "cpu experts (hand-off: host work + submit)");
  end_cpu_moe(out, false);
}

void backend::impl::begin_cpu_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x,
                                  const tensor& logits, const tensor& out, std::uint32_t ranks) {
  const std::uint32_t n = x.rows, C = x.cols, E = logits.cols;
  if (out.cols != C || out.rows != n) throw error("moe_ffn: output shape does not match the input");
  record_handoff_in(x, logits);

  // The step continues in a new command buffer, after the CPU's part, reading the CPU's sum from
  // this hand-off's own region of hand_out.
  std::uint32_t slot = 0;
  for (const handoff& o : pending.handoffs) slot += o.ffn < 0 && o.cache < 0;
  if (slot >= hand_slots)
    throw error("internal: " + std::to_string(slot + 1) + " CPU-expert hand-offs in one step, hand_out holds " +
                std::to_string(hand_slots));
  rec.end();
  handoff& h = pending.handoffs.emplace_back();
  h.out_slot = slot;
  const auto host_index = [&](const weight* w) { return std::uint32_t(weights.at(w->id).host); };
  h.task = {host_index(mw.gate_exps), host_index(mw.up_exps), host_index(mw.down_exps), mp, n, C, E, ranks};
  h.cmd = new_command_buffer();
}

void backend::impl::end_cpu_moe(const tensor& out, bool add) {
  const std::uint32_t C = out.cols, slot = pending.handoffs.back().out_slot;
  if (add) prepare({out}, {out});
  else prepare({}, {out});
  const copy_rows_pc po{C, slot * max_rows * C, C, out.off, out.stride};
  const binding bo[] = {bind_id(hand_out, false), bind_id(hand_out, false), bind(out, true)};
  dispatch(copy_req(false, add), bo, &po, sizeof po, div_up(C, wg), out.rows);
}

std::int32_t backend::impl::slice_percent(std::uint32_t k) const {
  // Top-1 blocks (Llama 4) slice by default: on an H200 x2 host (32 threads) Scout's decode at
  // 12 GiB gained 7-14% with 20% of the columns on the GPU (1,536 of 8,192), less with 12% or
  // 25%; at 24 GiB 8% with 12% or 25% (bench/RESULTS.md, session 23). The host's memory serves
  // both the CPU's reads and the GPU's over PCIe, so the gain is far below the two rates' sum.
  // The 30B's top-8 blocks of small experts lost 18% (256 of 768 columns): off for top-k. Only
  // where the slice overlaps the CPU's work (flag words): the timeline and fence paths run it first.
  if (gpu_slice_env >= 0) return gpu_slice_env;
  return k == 1 && handoff_poll ? top1_slice_percent : 0;
}

backend::impl::gpu_share_t backend::impl::gpu_share(const moe_weights& mw, const graph::moe_params& mp,
                                                    std::uint32_t rows) const {
  const std::uint32_t k = mp.n_used;
  const std::int32_t percent = slice_percent(k);
  if (rows != 1 || (gpu_share_env <= 0 && percent <= 0)) return {};
  if (mw.gate_inp->ne[1] > 256 || k > 64) return {};  // the GPU's top-k (moe_topk.glsl) ranks up to 256 experts, k <= 64
  const weight &g = *mw.gate_exps, &u = *mw.up_exps, &d = *mw.down_exps;
  if (weights.at(g.id).xstream < 0 || weights.at(u.id).xstream < 0 || weights.at(d.id).xstream < 0) return {};  // no pinned copy
  if (!int8_expert_ok(g) || !int8_expert_ok(u) || !int8_expert_ok(d) || !adjacent(g, u) || std::uint64_t(k) > max_q8_rows) return {};
  // Off unless asked for: on the H200 hosts 2 of 8 ranks gained 6-14% with 16 CPU threads and
  // lost 5% with 32, where the CPU's time hardly fell with fewer experts (bench/RESULTS.md,
  // session 22); a default needs the CPU's and the link's rates measured at start-up.
  if (gpu_share_env > 0) {
    if (k < 2 || mp.weighting == graph::moe_weighting::input) return {};  // ranks of input-weighted experts: not built
    return {std::min<std::uint32_t>(std::uint32_t(gpu_share_env), k - 1), 0};
  }
  const auto idx = [&](const weight& w) { return std::uint32_t(weights.at(w.id).host); };
  const std::uint32_t cols = slice_cols(std::uint32_t(g.ne[1]), host->slice_align(idx(g), idx(u), idx(d)), percent);
  if (!cols) return {};
  return {0, cols};
}

std::uint32_t backend::impl::slice_cols(std::uint32_t F, std::uint32_t cut, std::int32_t percent) const {
  // A slice cuts where both sides can: whole packed row groups and down blocks on the CPU
  // (cpu_experts::slice_align), whole 32-column blocks of int8 activations on the GPU.
  if (!cut || percent <= 0) return 0;
  const std::uint32_t align = std::lcm(cut, 32u);
  const std::uint32_t cols = std::uint32_t((std::uint64_t(F) * std::uint32_t(percent) / 100 + align / 2) / align * align);
  return cols == 0 || cols >= F || cols > max_k ? 0 : cols;
}

std::string backend::impl::gpu_share_words() const {
  const std::string where = " from the pinned copy in 1-token steps";
  if (gpu_share_env > 0)
    return ", the GPU computing the last " + std::to_string(gpu_share_env) + " of each token's expert ranks" + where;
  const std::int32_t percent = slice_percent(1);
  if (percent <= 0) return {};
  return ", the GPU computing the first " + std::to_string(percent) + "% of each routed expert's columns" +
         (gpu_slice_env >= 0 ? "" : " in top-1 blocks") + where;
}

void backend::impl::record_shared_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x,
                                      const tensor& logits, const moe_scratch& s, const tensor& out, gpu_share_t share) {
  const std::uint32_t k = mp.n_used, E = logits.cols;
  // Ranks: the GPU takes ranks first .. k-1 of the token's experts; a slice (gpu_share: the only
  // form where the router weights the input): all k, columns 0 .. S-1.
  const std::uint32_t first = share.ranks ? k - share.ranks : 0, pairs = k - first, S = share.ff_cols;
  begin_cpu_moe(mw, mp, x, logits, out, first);  // first 0: the CPU ranks them all
  handoff& h = pending.handoffs.back();
  h.task.ff_begin = S;
  // The GPU's intermediate columns: the first S, or all of its ranks' experts.
  const std::uint64_t F_all = mw.gate_exps->ne[1], F = S ? S : F_all;
  for (const weight* w : {mw.gate_exps, mw.up_exps, mw.down_exps})
    h.share_bytes += std::uint64_t(pairs) * w->row_bytes * w->ne[1] * F / F_all;
  h.share = new_command_buffer();
  rec.resume(h.share, "cpu experts: the GPU's share (host work + submit)");
  prepare({x, logits}, {s.gate.first_rows(pairs).first_cols(std::uint32_t(F)), s.up.first_rows(pairs), s.y.first_rows(pairs),
                        s.xin.first_rows(pairs), out});
  // The ranks' experts and weights (normalised over all k) at moe_ids / moe_wts 0 .. pairs-1:
  // the CPU ranks the same logits the same way and takes the rest.
  const moe_pc tp{E, k, first, logits.off, logits.stride, 0, 0, 0};
  const binding tb[] = {bind_id(moe_ids, true), bind_id(moe_ids, true), bind_id(moe_wts, true),
                        bind(logits, false), bind(logits, false), bind(logits, false)};
  dispatch(moe_req("MOE_TOPK", mp.gating == graph::moe_gating::sigmoid, topk_lean_slots(E, k)), tb, &tp, sizeof tp, 1);
  {
    const scoped_value bind_host(host_experts, true);  // the expert matvecs bind the pinned host copies
    record_routed_columns(mw, mp, x, s, E, pairs, std::uint32_t(F), S, out);
  }
  flush_all();
  for (auto& q : quantized) q.reset();
  rec.end();
  rec.resume(h.cmd, "cpu experts (hand-off: the CPU's share)");
  end_cpu_moe(out, true);  // out += the CPU's sum
}

void backend::impl::record_routed_columns(const moe_weights& mw, const graph::moe_params& mp, const tensor& x,
                                          const moe_scratch& s, std::uint32_t E, std::uint32_t pairs, std::uint32_t F,
                                          std::uint32_t S, const tensor& out) {
  const std::uint32_t C = x.cols;
  const bool weight_input = mp.weighting == graph::moe_weighting::input;
  const tensor g = s.gate.first_rows(pairs).first_cols(F), y = s.y.first_rows(pairs), xin = s.xin.first_rows(pairs);
  tensor in = x;
  std::uint32_t in_div = pairs;
  if (weight_input) {  // Llama 4: each pair's input times its weight (as moe_ffn on the GPU)
    const moe_pc pc{E, mp.n_used, C, x.off, x.stride, xin.off, xin.stride, 0};
    const binding b[] = {bind_id(moe_ids, false), bind_id(moe_ids, false), bind_id(moe_wts, false),
                         bind(x, false), bind(xin, true), bind(xin, true)};
    dispatch(moe_req("MOE_GATHER"), b, &pc, sizeof pc, div_up(C, wg), pairs);
    in = xin;
    in_div = 1;
  }
  const std::uint32_t sl = quantize_input(in, nullptr, 0.0f);
  const bool qout = quant_out && F % 32 == 0 && F <= max_k && g.off % 4 == 0 && g.stride % 4 == 0;
  record_mmvq_ids(*mw.gate_exps, mw.up_exps, sl, in_div, pairs, g, qout, 0, std::nullopt, {S, 0});
  const std::uint32_t sd = quantize_input(g, nullptr, 0.0f);
  record_mmvq_ids(*mw.down_exps, nullptr, sd, 1, pairs, y, false, 0, std::nullopt, {0, S});
  combine = pending_combine{moe_pc{E, pairs, C, y.off, y.stride, out.off, out.stride, weight_input ? 0u : 1u}, y, out, {}, {}, {}, {}};
}

void backend::impl::handoff_buffers(std::uint32_t C, std::uint32_t E) {
  if (!hand_in) {
    hand_cols = C;
    hand_in = new_buffer(std::uint64_t(max_rows) * (C + E) * 4, memory_kind::readback, "MoE hand-off to the CPU");
    hand_slots = std::max<std::uint32_t>(1, std::uint32_t(opt.cpu_expert_layers.size()));
    hand_out = new_buffer(std::uint64_t(max_rows) * C * 4 * hand_slots, handoff_out_kind(), "MoE hand-off from the CPU");
  }
  if (C != hand_cols || buf(hand_in).size() < std::uint64_t(max_rows) * (C + E) * 4)
    throw error("internal: MoE blocks of different widths in one model");
}

void backend::impl::record_handoff_in(const tensor& x, const tensor& logits) {
  const std::uint32_t n = x.rows, C = x.cols, E = logits.cols;
  handoff_buffers(C, E);
  prepare({x, logits}, {});
  const copy_rows_pc px{C, x.off, x.stride, 0, C};
  const binding bx[] = {bind(x, false), bind(x, false), bind_id(hand_in, true)};
  dispatch(copy_req(false), bx, &px, sizeof px, div_up(C, wg), n);
  const copy_rows_pc pl{E, logits.off, logits.stride, max_rows * C, E};
  const binding bl[] = {bind(logits, false), bind(logits, false), bind_id(hand_in, true)};
  dispatch(copy_req(false), bl, &pl, sizeof pl, div_up(E, wg), n);
}

const vk::raii::CommandBuffer& backend::impl::recording_cmd() const {
  return pending.handoffs.empty() ? pending.cmd : pending.handoffs.back().cmd;
}

void backend::impl::run_handoff_on_cpu(const handoff& h) {
  const auto* in = reinterpret_cast<const float*>(buf(hand_in).mapped());
  host->run(h.task, in, in + std::size_t(max_rows) * hand_cols,
            reinterpret_cast<float*>(buf(hand_out).mapped()) + std::size_t(h.out_slot) * max_rows * hand_cols);
}

}  // namespace strata::gpu
