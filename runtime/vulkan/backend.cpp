#include "backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend_impl.hpp"
#include "strata/core/error.hpp"

// The graph ops of the contract (graph/backend_contract.hpp): each checks its shapes, lets the fusion
// state decide what to defer (fusion.cpp) and records its dispatches; replayed, only host-side I/O.
namespace strata::gpu {
using namespace detail;

void backend::embed(const weight& table, tensor out) {
  auto& P = *p_;
  if (P.replay) return;
  P.prepare({}, {out});
  const std::uint32_t n = out.rows;
  const get_rows_pc pc{std::uint32_t(table.ne[0]), std::uint32_t(table.row_bytes), out.off, out.stride};
  const binding b[] = {P.bind_weight(table), P.bind_step(P.off_tokens, std::uint64_t(P.max_rows) * 4), P.bind(out, true)};
  P.dispatch(impl::req("get_rows", table.type, {}, 3), b, &pc, sizeof pc, div_up(table.ne[0] / 16, wg), n);
}

void backend::rms_norm(tensor x, const weight* w, float eps, tensor y) {
  auto& P = *p_;
  if (!P.replay) record_rms_norm(x, w, eps, y);
  if (P.outputs.after_norm) P.enter_output(false);  // the output norm of an in-place output (step_cache.cpp)
}

void backend::record_rms_norm(tensor x, const weight* w, float eps, tensor y) {
  auto& P = *p_;
  const bool weighted = w && *w;
  if (weighted && (w->type != gguf::type_id::f32 || w->ne[0] != x.cols))
    throw error("norm weight '" + std::string(w->name) + "' must be F32 with " + std::to_string(x.cols) + " elements");
  const impl::pending_norm n{x, y, weighted ? w : nullptr, eps};
  // Per-head norms in place (Q/K norms: rows = tokens x heads, one head per row) wait for
  // kv_store()'s attn_prep dispatch.
  if (P.fuse && impl::same(x, y) && x.cols == x.stride && x.cols <= 256 && P.step_tokens &&
      x.rows % P.step_tokens == 0 && !P.outputs.active) {
    P.keep_heads = true;
    P.prepare({x}, {});
    P.keep_heads = false;
    const std::uint32_t n_heads = x.rows / P.step_tokens;
    const tensor parent{x.buf, x.off, P.step_tokens, x.cols * n_heads, x.cols * n_heads};
    P.head_entry(parent, n_heads).ops.push_back({weighted ? impl::head_op::norm_w : impl::head_op::norm,
                                                 weighted ? w : nullptr, eps, {}});
    return;
  }
  // Run by the dispatch that writes x (its last workgroup), or deferred (fused into the matmuls
  // that read the result).
  if (P.fuse_step && weighted && x.rows == y.rows && x.cols == y.cols && P.try_norm_tail(n)) return;
  if (P.fuse_step && weighted && x.rows == y.rows && x.cols == y.cols && P.try_norm_out(n)) return;
  if (P.fuse_step && weighted && x.rows == y.rows && x.cols == y.cols && x.cols % 16 == 0) {
    P.prepare({x}, {y});
    std::erase_if(P.norms, [&](const impl::pending_norm& o) { return o.y.buf == y.buf; });
    P.norms.push_back(n);
    return;
  }
  P.prepare({x}, {y});
  P.record_norm(n);
}

void backend::matmul(const weight& w, tensor x, tensor y) {
  auto& P = *p_;
  if (P.replay) return;
  if (x.cols != w.ne[0] || y.cols != w.ne[1] || x.rows != y.rows)
    throw error("matmul shape mismatch for '" + std::string(w.name) + "': weight [" + std::to_string(w.ne[0]) + ", " +
                std::to_string(w.ne[1]) + "], input " + std::to_string(x.rows) + "x" + std::to_string(x.cols) + ", output " +
                std::to_string(y.rows) + "x" + std::to_string(y.cols));
  if (P.weights[w.id].stream >= 0) {  // a streamed FFN (layer_stream.cpp): on the CPU in this step, or its ring slot
    if (!P.stream_on_cpu()) P.enter_streamed(w);
    else if (!P.linked(w)) return P.record_cpu_ffn(w, x, y);  // else its slot holds it: the copy ran beside the CPU
  }
  impl::pending_matmul m{.w = &w, .x = x, .y = y};
  if (!P.fuse_step) {
    // mul_mm_reg and the f16 GEMM wait (the next prepare() records them): a residual add may join
    // their store, and a second matmul of the same input may wait beside it (a gate/up pair:
    // swiglu() joins them, on the f16 GEMM where mm3_swiglu_ok, which then takes no residual).
    const bool gemm = P.mm3_swiglu_ok(w, x.rows);
    const bool reg = P.fuse && P.mm_fuse && P.weights[w.id].stream < 0 &&
                     (P.takes_mm_reg(w, x.rows) || gemm || (P.mm_fuse_more && P.takes_f16_gemm(w, x.rows)));
    m.gemm_pair = gemm;
    const bool pair = reg && P.mats.size() == 1 && impl::same(P.mats.back().x, x) && !P.mats.back().residual &&
                      y.buf != x.buf && y.buf != P.mats.back().y.buf;
    std::vector<impl::pending_matmul> held;
    if (pair) held.swap(P.mats);
    P.prepare({x}, {y});
    if (pair) P.mats.swap(held);
    if (reg) P.mats.push_back(m);
    else P.record_matmul(m);
    return;
  }
  // Input from a deferred norm: fold it in. Otherwise the usual read/write preparation, but
  // keep earlier deferred matmuls of the same input waiting (a gate/up pair may follow).
  const auto it = std::find_if(P.norms.begin(), P.norms.end(), [&](const auto& n) { return impl::same(n.y, x); });
  if (it != P.norms.end()) m.norm = *it;
  const bool chain = !P.mats.empty() && impl::same(P.mats.back().x, x) && !P.mats.back().residual && !P.mats.back().up;
  // A producer waiting with the next norm's first half (try_norm_out) keeps it when this matmul
  // reads that norm; one that cannot own whole blocks writes it from its block tails now
  // (block_norm_out), or drops it.
  // (An integer matvec reads the codes; another reader folds the norm in itself and would gain nothing.)
  if (const impl::pending_matmul* pm = m.norm && P.proj_rows ? P.norm_out_projection(m.norm->y) : nullptr;
      pm && pm->norm_out_by_tails && P.use_mmvq(w, x.rows)) {
    const auto N = std::uint32_t(pm->w->ne[1]);
    P.record_norm_out_projection(nullptr, m.norm->y, tensor{P.proj_rows, 0, 1, N, N});
  }
  for (auto& pm : P.mats)
    if (pm.norm_out && (pm.norm_out_by_tails || !(m.norm && impl::same(pm.norm_out->y, m.norm->y)))) pm.norm_out.reset();
  if (P.combine && P.combine->norm_out) {  // the combine writing this norm's first half (try_norm_out)
    if (!(m.norm && impl::same(P.combine->norm_out->y, m.norm->y))) P.combine->norm_out.reset();
    P.flush_combine();
  }
  if (!chain) P.flush_mats();
  if (!m.norm) {
    std::vector<impl::pending_matmul> held;
    held.swap(P.mats);
    P.prepare({x}, {y});
    P.mats.swap(held);
  } else {
    for (std::size_t i = 0; i < P.norms.size();) {  // norms reading / writing y
      if (P.norms[i].x.buf == y.buf || (P.norms[i].y.buf == y.buf && !impl::same(P.norms[i].y, x))) {
        P.dropped.push_back(P.norms[i].y);
        P.norms.erase(P.norms.begin() + std::ptrdiff_t(i));
      } else {
        ++i;
      }
    }
  }
  // At most two wait (a gate/up pair, or K and V), three when they stack (Q, K and V).
  if (P.mats.size() == 3 || (P.mats.size() == 2 && !P.mmvq_stack_ok(std::array{P.mats[0], P.mats[1], m}))) {
    P.record_matmul(P.mats.front());
    P.mats.erase(P.mats.begin());
  }
  P.mats.push_back(m);
}

void backend::rope(tensor x, std::uint32_t n_heads, const graph::rope_params& rp, const weight* freq_factors) {
  auto& P = *p_;
  if (P.replay) return;
  if (P.fuse && x.cols == x.stride && x.rows == P.step_tokens) {  // waits for kv_store()'s attn_prep
    P.keep_heads = true;
    P.prepare({x}, {});
    P.keep_heads = false;
    auto& op = P.head_entry(x, n_heads).ops.emplace_back();
    op.kind = impl::head_op::rope;
    op.rp = rp;
    op.ff = freq_factors && *freq_factors ? freq_factors : nullptr;
    return;
  }
  P.prepare({x}, {x});
  P.record_rope(x, n_heads, rp, freq_factors && *freq_factors ? freq_factors : nullptr);
}

void backend::scale_by_position(tensor q, const graph::position_scale_params& ps) {
  auto& P = *p_;
  if (P.replay) return;
  if (P.fuse && q.cols == q.stride && q.rows == P.step_tokens) {  // waits for kv_store()'s attn_prep
    P.keep_heads = true;
    P.prepare({q}, {});
    P.keep_heads = false;
    auto& op = P.head_entry(q, 0).ops.emplace_back();
    op.kind = impl::head_op::temp;
    op.ps = ps;
    return;
  }
  P.prepare({q}, {q});
  P.record_temperature(q, ps);
}

void backend::kv_store(kv_state& kv, std::uint32_t layer, tensor k, tensor v) {
  auto& P = *p_;
  if (P.replay) return;
  const auto& cfg = kv.config();
  if (P.fuse && (P.tq_prep || !kv.compressed())) {  // head norms, RoPE and the append in one dispatch
    P.keep_heads = true;
    P.prepare({k, v}, {});
    P.keep_heads = false;
    if (P.record_attn_prep(kv, layer, k, v)) return;
  }
  P.prepare({k, v}, {});
  if (kv.compressed()) {
    const auto& r = kv.window_ring();
    const kv_store_q_pc pc{k.rows, cfg.n_head_kv, k.off, k.stride, v.off, v.stride, r.rows};
    const std::uint64_t B4 = std::uint64_t(P.max_rows) * 4;
    const binding dummy = P.bind(k, false);
    // attn_prep's binding numbers (kv_encode.glsl declares the cache side for both)
    const binding bd[] = {dummy,
                          P.bind(k, false),
                          P.bind(v, false),
                          dummy,
                          dummy,
                          P.bind_id(kv.k_buffer(layer), true),
                          P.bind_id(kv.v_buffer(layer), true),
                          P.bind_step(P.off_slots, B4),
                          P.bind_step(P.off_pos, B4),
                          dummy,
                          r.rows && r.k[layer] ? P.bind_id(r.k[layer], true) : dummy,
                          r.rows && r.v[layer] ? P.bind_id(r.v[layer], true) : dummy,
                          r.rows ? P.bind_id(r.tags[layer], true) : dummy,
                          P.bind_step(P.off_seq_row, B4)};
    P.dispatch(impl::req("kv_store_q", {}, impl::kv_encode_defs(kv), 14), bd, &pc, sizeof pc, cfg.n_head_kv, k.rows);
    return;
  }
  const kv_store_pc pc{k.rows, cfg.row_elems(), k.off, k.stride, v.off, v.stride};
  const binding bd[] = {P.bind(k, false), P.bind(k, false), P.bind(v, false), P.bind_id(kv.k_buffer(layer), true),
                        P.bind_id(kv.v_buffer(layer), true), P.bind_step(P.off_slots, std::uint64_t(P.max_rows) * 4)};
  P.dispatch(impl::req("kv_store", {}, impl::kv_defs(cfg), 6), bd, &pc, sizeof pc, div_up(cfg.row_elems(), wg), k.rows);
}

void backend::swiglu(tensor gate, tensor up, tensor out) {
  auto& P = *p_;
  if (P.replay || P.ffn_open >= 0) return;  // a streamed FFN the CPU computes whole (layer_stream.cpp)
  if (P.fuse_step && P.mats.size() == 2 && impl::same(P.mats[0].y, gate) && impl::same(P.mats[1].y, up) &&
      impl::same(out, gate) && !P.mats[0].residual && !P.mats[1].residual) {
    if (P.adjacent(*P.mats[0].w, *P.mats[1].w)) {
      P.mats[0].up = P.mats[1].w;
      P.mats.pop_back();
      P.flush_mats();
      return;
    }
  }
  if (P.swiglu_joins_pair(gate, up, out)) {  // one dispatch: gate, up, SwiGLU, f16 copy
    P.mats[0].up = P.mats[1].w;
    P.mats.pop_back();
    P.flush_mats();
    return;
  }
  P.prepare({gate, up}, {out});
  elementwise_pc pc{gate.cols, gate.off, gate.stride, up.off, up.stride, out.off, out.stride};
  if (P.f16_beside(out)) {  // with the f16 copy the down matmul reads (f16_input's layout)
    pc.h_stride = out.cols;
    const binding b[] = {P.bind(gate, false), P.bind(gate, false), P.bind(up, false), P.bind(out, true), P.bind_id(P.mm_xh, true)};
    P.dispatch(impl::elementwise_req("OP_SWIGLU", true), b, &pc, sizeof pc, div_up(gate.cols / 2, wg), gate.rows);
    P.holds_f16(out);
    return;
  }
  const binding b[] = {P.bind(gate, false), P.bind(gate, false), P.bind(up, false), P.bind(out, true)};
  P.dispatch(impl::elementwise_req("OP_SWIGLU"), b, &pc, sizeof pc, div_up(gate.cols, wg), gate.rows);
}

void backend::add(tensor a, tensor b2, tensor out) {
  auto& P = *p_;
  if (P.replay) return;
  // The residual add after an MoE layer joins its deferred combine: out = other + sum.
  if (P.combine && !P.combine->residual && P.mats.empty()) {
    const impl::pending_combine c = *P.combine;
    const tensor* other = impl::same(b2, c.out) ? &a : impl::same(a, c.out) ? &b2 : nullptr;
    if (other && other->rows == c.out.rows && other->cols == c.out.cols && out.rows == c.out.rows &&
        out.cols == c.out.cols && other->buf != c.y.buf && out.buf != c.y.buf) {
      P.combine.reset();
      const tensor r = *other;
      P.prepare({r}, {out});
      impl::pending_combine f = c;
      f.out = out;
      f.pc.d_off = out.off;
      f.pc.d_stride = out.stride;
      f.residual = r;
      P.combine = f;  // waits one more op: the next norm may join as its tail
      return;
    }
  }
  // (Matmuls wait in mats where fusion is on; one alone for a pair (gemm_pair) no longer pairs.)
  if (P.mats.size() == 1 && impl::same(P.mats.back().y, b2) && impl::same(out, a) && !P.mats.back().up &&
      !P.mats.back().residual && (!P.mats.back().gemm_pair || P.takes_f16_gemm(*P.mats.back().w, P.mats.back().x.rows)) &&
      a.buf != P.mats.back().x.buf && (!P.mats.back().norm || P.mats.back().norm->x.buf != a.buf)) {
    P.mats.back().residual = a;  // y = a + W.x, written over a
    P.mats.back().y = out;
    // The matmul still waits (the next norm may join it as its tail, try_norm_tail()); the rest
    // of the preparation for writing out happens now.
    std::vector<impl::pending_matmul> held;
    held.swap(P.mats);
    P.prepare({}, {out});
    P.mats.swap(held);
    return;
  }
  P.prepare({a, b2}, {out});
  const elementwise_pc pc{a.cols, a.off, a.stride, b2.off, b2.stride, out.off, out.stride};
  const binding b[] = {P.bind(a, false), P.bind(a, false), P.bind(b2, false), P.bind(out, true)};
  P.dispatch(impl::elementwise_req("OP_ADD"), b, &pc, sizeof pc, div_up(a.cols, wg), a.rows);
}

void backend::select_rows(tensor x, tensor out) {
  auto& P = *p_;
  if (P.replay) return;
  P.prepare({x}, {out});
  const copy_rows_pc pc{x.cols, x.off, x.stride, out.off, out.stride};
  const binding b[] = {P.bind(x, false), P.bind(x, false), P.bind(out, true),
                       P.bind_step(P.off_out_rows, std::uint64_t(P.max_rows) * 4)};
  P.dispatch(impl::copy_req(true), b, &pc, sizeof pc, div_up(x.cols, wg), out.rows);
}

void backend::read(tensor src, std::span<float> dst) {
  auto& P = *p_;
  const std::size_t n = std::size_t(src.rows) * src.cols;
  if (dst.size() < src.cols)
    throw error("read: destination of " + std::to_string(dst.size()) + " floats holds no row of " + std::to_string(src.cols));
  if (P.readback.size() < n * 4) throw error("read: " + std::to_string(n) + " floats exceed the readback buffer");
  P.read_dst = dst.data();
  // The recorded copy brings every row; the host takes those dst holds (a padded step's own rows).
  P.read_floats = std::min(n, dst.size() / src.cols * src.cols);
  P.enter_output(true);
  if (P.replay) return;
  P.prepare({src}, {});
  const copy_rows_pc pc{src.cols, src.off, src.stride, 0, src.cols};
  const binding b[] = {P.bind(src, false), P.bind(src, false),
                       {{P.readback.handle(), 0, P.readback.size(), 0}, true}};
  P.dispatch(impl::copy_req(false), b, &pc, sizeof pc, div_up(src.cols, wg), src.rows);
}

void backend::argmax(tensor src, std::span<std::int32_t> dst) {
  auto& P = *p_;
  if (dst.empty()) throw error("argmax: no room for an id");
  if (!P.ids_readback || P.ids_readback.size() < std::uint64_t(src.rows) * 4)  // reserve() sizes it for max_rows
    throw error("argmax: " + std::to_string(src.rows) + " rows exceed the reserved " + std::to_string(P.max_rows));
  P.ids_dst = dst.data();
  P.ids_count = std::uint32_t(std::min<std::size_t>(src.rows, dst.size()));
  P.enter_output(true);
  if (P.replay) return;
  P.prepare({src}, {});
  const argmax_pc pc{src.cols, src.off, src.stride};
  const binding b[] = {P.bind(src, false), P.bind(src, false), {{P.ids_readback.handle(), 0, P.ids_readback.size(), 0}, true}};
  // 1,024 threads where the device has them (a 150K-word row: 19 batches of loads a thread); a
  // power of two for the tree reduction.
  std::uint32_t wg_argmax = 128;
  while (wg_argmax < 1024 && wg_argmax * 2 <= P.ctx.info().max_workgroup_threads) wg_argmax *= 2;
  P.dispatch(impl::req("argmax", {}, {{"WG", std::to_string(wg_argmax)}}, 3), b, &pc, sizeof pc, src.rows);
}

void backend::write(tensor dst, std::span<const float> src) {
  auto& P = *p_;
  const std::size_t n = std::size_t(dst.rows) * dst.cols;
  if (src.size() < n) throw error("write: source too small");
  if (!P.input) {
    if (P.replay) throw error("internal: write() first seen while replaying a step");
    std::uint64_t largest = 0;
    for (const auto& b : P.buffers) largest = std::max(largest, b.size());
    P.input = P.new_buffer(largest, memory_kind::upload, "hidden-state input");
  }
  if (P.buf(P.input).size() < n * 4) throw error("write: " + std::to_string(n) + " floats exceed the input buffer");
  if (!P.record_only) std::memcpy(P.buf(P.input).mapped(), src.data(), n * 4);
  if (P.replay) return;
  P.prepare({}, {dst});
  const copy_rows_pc pc{dst.cols, 0, dst.cols, dst.off, dst.stride};
  const binding b[] = {P.bind_id(P.input, false), P.bind_id(P.input, false), P.bind(dst, true)};
  P.dispatch(impl::copy_req(false), b, &pc, sizeof pc, div_up(dst.cols, wg), dst.rows);
}

void backend::moe_ffn(const moe_weights& mw, const graph::moe_params& mp, tensor x, const moe_scratch& s, tensor out) {
  auto& P = *p_;
  const std::uint32_t k = mp.n_used;
  if (P.replay) return;
  // Experts on the CPU (always, or in this phase: expert_stream.cpp): router here, then a hand-off.
  if (P.cpu_moe_step(*mw.gate_exps)) {
    const tensor logits = s.logits.first_rows(x.rows);
    P.prepare({x}, {logits});
    matmul(*mw.gate_inp, x, logits);
    P.flush_mats();
    if (const auto share = P.gpu_share(mw, mp, x.rows)) return P.record_shared_moe(mw, mp, x, logits, s, out, share);
    return P.record_cpu_moe(mw, mp, x, logits, out);
  }
  const std::uint32_t n = x.rows, E = std::uint32_t(mw.gate_inp->ne[1]), pairs = n * k;
  if (E > 256 || k > 64)
    throw error("MoE with " + std::to_string(E) + " experts, " + std::to_string(k) + " used: the GPU router supports up to 256 and 64");
  const bool sigmoid = mp.gating == graph::moe_gating::sigmoid;
  const bool weight_input = mp.weighting == graph::moe_weighting::input;
  // Integer expert matvecs for every step size (formats with an int8 unit): expert matrices are
  // small and each sees only its share of the pairs, so a matvec that reads each weight unit once
  // for a chunk of pairs beats expanding every expert to f16 for the tiled GEMM.
  const bool int8 = P.int8_expert_ok(*mw.gate_exps) && P.int8_expert_ok(*mw.up_exps) && P.int8_expert_ok(*mw.down_exps) &&
                    pairs <= P.max_q8_rows;
  // Grouped by expert once a step routes more than two pairs per expert (prefill, large batches;
  // impl::grouped_experts). Below, each pair's matvec reads its expert itself.
  const std::uint32_t chunks =
      int8 && P.moe_groups && impl::grouped_experts(pairs, E) ? std::min(pairs, div_up(pairs, impl::moe_chunk) + E) : 0;
  // GPU-cached experts: read through the slot map on the GPU (lookup: the integer matvecs only),
  // else the host maps the routed ids to slots at a split after the router (expert_cache.cpp;
  // short steps with STRATA_VK_CACHE_CPU_MISSES, whose misses the CPU computes).
  const bool cached = P.cached_experts(*mw.gate_exps);
  // Short steps whose misses the CPU may compute: in the lookup form with a hand-off after the
  // router where it exists (expert_cache_misses.cpp; a grouped step keeps the plain lookup form:
  // the kernels skip per pair), else split.
  const bool short_misses = cached && P.cache_split_step(n);
  const bool lookup = cached && int8 && P.cache_lookup_block(*mw.gate_exps) && (!short_misses || P.miss_handoff_step(n));
  const bool miss_handoff = lookup && short_misses && !chunks;
  // Tensor cores where the step is grouped: each expert's pairs as chunks of f16 rows on mul_mm_small.
  const bool small = !lookup && mw.gate_exps->ne[0] == mw.up_exps->ne[0] &&
                     P.small_experts(pairs, E, mw.gate_exps->ne[0], mw.down_exps->ne[0]);
  // x is the FFN norm's output: when that norm is still deferred, one quantize dispatch writes
  // both x (f32, for the router) and its int8 rows (for the experts).
  std::optional<impl::pending_norm> norm;
  if (int8 && !weight_input && x.cols % 32 == 0 && x.cols <= P.max_k)
    if (const auto it = std::find_if(P.norms.begin(), P.norms.end(), [&](const auto& nm) { return impl::same(nm.y, x); });
        it != P.norms.end() && it->w) {
      norm = *it;
      P.norms.erase(it);
    }
  const bool split = cached && !lookup;  // the host's split after the router
  const bool streamed = P.weights.at(mw.gate_exps->id).xstream >= 0;  // read from the expert ring (enter_expert)
  const bool topk_in_ok = P.topk_in && int8 && !chunks && !small && !weight_input && n <= 8 && !split && !miss_handoff &&
                          P.adjacent(*mw.gate_exps, *mw.up_exps);
  // Decode: the O projection waiting with this norm's first half (try_norm_out) writes the router's
  // logits as per-block parts too (record_router_parts); the gate/up matvec's top-k sums them and
  // reads the codes, so neither the router nor the experts' input quantize takes a dispatch.
  // Not where the graph reads x again (a shared expert): the parts leave x unwritten.
  // With router_product the parts are two, from products precomputed at load (record_router_product).
  const bool parts_ok = norm && topk_in_ok && !mp.input_reused;
  const bool product = parts_ok && P.record_router_product(*mw.gate_inp, x, s.y.first_rows(n));
  const bool parts = product || (parts_ok && P.record_router_parts(*mw.gate_inp, x, s.y.first_rows(n)));
  P.prepare({norm ? norm->x : x}, {s.logits, s.xin, s.gate, s.up, s.y, out});
  if (parts) P.dropped.push_back(x);  // the norm's rows are never written: no later op may read them
  if (norm && !parts) {
    const std::uint32_t sl = P.last_slot ^ 1u;
    quantize_pc pc{x.cols, norm->x.off, norm->x.stride, 0, P.max_k / 16, 0, P.max_k / 32, norm->eps, x.off, x.stride};
    const binding b[] = {P.bind(norm->x, false), P.bind_weight(*norm->w), P.bind_id(P.xq[sl], true), P.bind_id(P.xs[sl], true),
                         P.bind(x, true)};
    P.dispatch(impl::req("quantize_q8", {}, {{"WG", "128"}, {"NORM", "1"}, {"WRITE_Y", "1"}}, 5), b, &pc, sizeof pc, n);
    for (auto& q : P.quantized)
      if (q && q->x.buf == x.buf) q.reset();
    P.quantized[sl] = impl::quantized_input{x, nullptr, 0.0f};
    P.last_slot = sl;
  }
  const tensor logits = s.logits.first_rows(n);
  // Decode: the router folds the norm in itself (matvec.glsl NORM_INPUT over the norm's input),
  // so it does not wait for the quantize dispatch above: both read the residual stream and run
  // side by side, a level less per MoE layer.
  if (norm && !parts && P.router_norm && n <= 8 && !split)
    P.record_matmul(impl::pending_matmul{.w = mw.gate_inp, .x = x, .y = logits, .norm = *norm});
  else if (!parts)
    matmul(*mw.gate_inp, x, logits);
  // Decode-sized steps: the router matvec's last workgroup may run the top-k (STRATA_VK_TAIL).
  if (n <= P.tail_rows && !P.mats.empty() && impl::same(P.mats.back().y, logits))
    P.mats.back().topk = impl::pending_matmul::topk_t{E, k, sigmoid};
  P.topk_done = false;
  P.flush_mats();
  // Decode: the gate/up matvec ranks the logits itself (mmvq.glsl TOPK_IN), so no top-k
  // dispatch sits between the router and the experts.
  const bool topk_in = parts || (topk_in_ok && !P.topk_done);
  if (!P.topk_done && !topk_in) {
    const moe_pc pc{E, k, 0, logits.off, logits.stride, 0, 0, 0};
    const binding b[] = {P.bind_id(P.moe_ids, true), P.bind_id(P.moe_ids, true), P.bind_id(P.moe_wts, true),
                         P.bind(logits, false), P.bind(logits, false), P.bind(logits, false)};
    P.dispatch(impl::moe_req("MOE_TOPK", sigmoid, P.topk_lean_slots(E, k)), b, &pc, sizeof pc, n);
  }
  P.topk_done = false;
  // GPU-cached experts: the host maps the routed ids to slots here (expert_cache.cpp); the
  // matvecs below read the slots with the same kernels. In the lookup form the kernels map them.
  if (split) P.begin_cached_moe(mw, mp, x, logits);
  if (miss_handoff) P.begin_miss_handoff(mw, mp, x, logits, s);
  if (lookup) P.note_cache_lookup(*mw.gate_exps, pairs);
  // Long prompt steps: the block's experts copied whole to the GPU first (expert_cache_stage.cpp);
  // never in a hand-off step, where the host may send the block to the CPU after the router.
  if (lookup && !miss_handoff && P.cache_stage_step(n)) P.record_cache_stage(*mw.gate_exps);
  tensor in = x;
  std::uint32_t in_div = k;
  if (weight_input) {
    const tensor xin = s.xin.first_rows(pairs);
    const moe_pc pc{E, k, x.cols, x.off, x.stride, xin.off, xin.stride, 0};
    const binding b[] = {P.bind_id(P.moe_ids, false), P.bind_id(P.moe_ids, false), P.bind_id(P.moe_wts, false),
                         P.bind(x, false), P.bind(xin, true), P.bind(xin, true)};
    P.dispatch(impl::moe_req("MOE_GATHER"), b, &pc, sizeof pc, div_up(x.cols, wg), pairs);
    in = xin;
    in_div = 1;
  }
  const tensor g = s.gate.first_rows(pairs), u = s.up.first_rows(pairs), y = s.y.first_rows(pairs);
  std::optional<impl::pending_combine::down_t> down;
  if (chunks && !small) P.record_moe_group(E, k, pairs, impl::moe_chunk);
  if (small && int8 && P.mmq_ok(*mw.gate_exps) && P.mmq_ok(*mw.up_exps)) {
    P.record_moe_mmq(mw, in, in_div, pairs, E, g, u, y);
  } else if (small) {
    P.record_moe_small(mw, in, in_div, pairs, E, g, u, y);
  } else if (int8) {
    const std::uint32_t sl = parts ? P.last_slot : P.quantize_input(in, nullptr, 0.0f);
    const std::uint64_t F = mw.gate_exps->ne[1];
    if (P.adjacent(*mw.gate_exps, *mw.up_exps)) {
      const bool qout = P.quant_out && F % 32 == 0 && F <= P.max_k && g.off % 4 == 0 && g.stride % 4 == 0;
      P.record_mmvq_ids(*mw.gate_exps, mw.up_exps, sl, in_div, pairs, g, qout, chunks,
                        topk_in ? std::optional(impl::topk_in_t{logits, E, sigmoid, parts, parts ? norm->eps : 0.0f,
                                                                     product ? P.router_product_parts : P.router_part_buf,
                                                                     product ? 2u : 0u})
                                : std::nullopt);
    } else {
      P.record_mmvq_ids(*mw.gate_exps, nullptr, sl, in_div, pairs, g, false, chunks);
      P.record_mmvq_ids(*mw.up_exps, nullptr, sl, in_div, pairs, u, false, chunks);
      swiglu(g, u, g);
      P.flush_mats();
    }
    const std::uint32_t sd = P.quantize_input(g, nullptr, 0.0f);
    // Decode: down waits with the combine; the residual add and the next norm join it as tails per 32-row block
    // (block: record_down_block_tail) or by its last workgroup (last_wg: STRATA_VK_TAIL, record_down_combine).
    const bool block = P.moe_block_tail_ok(*mw.down_exps, k, n);
    const bool last_wg = n <= P.tail_rows && P.tail_counter && y.off % 4 == 0 && y.stride % 4 == 0;
    if (!chunks && !split && !miss_handoff && !streamed && (block || last_wg))
      down = impl::pending_combine::down_t{mw.down_exps, sd, pairs, block, last_wg};
    else
      P.record_mmvq_ids(*mw.down_exps, nullptr, sd, 1, pairs, y, false, chunks);
  } else {
    auto matvec_id = [&](const weight& w, tensor xi, std::uint32_t div, tensor yo) {
      P.enter_expert(w);
      const matvec_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), pairs, std::uint32_t(w.row_bytes), xi.off,
                         xi.stride, yo.off, yo.stride, std::uint32_t(w.row_bytes * w.ne[1]), div, 0, 0, 0, 0, 0.f};
      const binding b[] = {P.bind_weight(w), P.bind(xi, false), P.bind(yo, true), P.bind_id(P.moe_ids, false)};
      P.dispatch(P.matvec_req(w.type, 1, true, w.ne[1]), b, &pc, sizeof pc, div_up(w.ne[1], P.rows_for(w.ne[1])), pairs);
      P.wrote(yo);
    };
    matvec_id(*mw.gate_exps, in, in_div, g);
    matvec_id(*mw.up_exps, in, in_div, u);
    swiglu(g, u, g);
    P.flush_mats();
    matvec_id(*mw.down_exps, g, 1, y);
  }
  // The combine waits for the decoder's residual add (add() folds it in), else the next op.
  P.combine = impl::pending_combine{moe_pc{E, k, out.cols, y.off, y.stride, out.off, out.stride, weight_input ? 0u : 1u},
                                    y, out, {}, {}, down, {}};
  if (split) P.end_cached_moe(out);
  if (miss_handoff) P.end_miss_handoff(out);
}

}  // namespace strata::gpu
