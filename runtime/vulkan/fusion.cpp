// Deferred work while recording a step (STRATA_VK_FUSE=0 turns it off): weighted norms folded
// into the matmuls that read them, Q/K head ops into kv_store()'s attn_prep dispatch, the MoE
// combine into the residual add; prepare() records whatever an op needs first, in order.
#include "backend_impl.hpp"

#include <algorithm>
#include <type_traits>

#include "strata/core/error.hpp"

namespace strata::gpu {
using namespace detail;

void backend::impl::prepare(std::initializer_list<tensor> reads, std::initializer_list<tensor> writes) {
  flush_encode();
  // A pending combine is older than any pending matmul (moe_ffn leaves none), and its deferred
  // down matvec reads a quantized slot a matmul's quantization could overwrite. No matmul reads
  // its norm next: the norm's dispatch (or fold) as before.
  if (combine) combine->norm_out.reset();
  flush_combine();
  for (auto& m : mats) m.norm_out.reset();  // no matmul reads the norm next: its dispatch (or fold) as before
  flush_mats();
  if (!keep_heads) flush_heads();
  for (const auto& r : reads)
    for (const auto& d : dropped)
      if (r.buf == d.buf) throw error("internal: Vulkan backend read a normalised tensor it had dropped");
  for (std::size_t i = 0; i < norms.size();) {
    bool read = false, overwritten = false;
    for (const auto& r : reads) read |= r.buf == norms[i].y.buf;
    for (const auto& w : writes) overwritten |= w.buf == norms[i].x.buf || w.buf == norms[i].y.buf;
    if (read) {
      record_norm(norms[i]);
      norms.erase(norms.begin() + std::ptrdiff_t(i));
    } else if (overwritten) {
      dropped.push_back(norms[i].y);
      norms.erase(norms.begin() + std::ptrdiff_t(i));
    } else {
      ++i;
    }
  }
  for (const auto& w : writes) {
    std::erase_if(dropped, [&](const tensor& d) { return d.buf == w.buf; });
    for (auto& q : quantized)
      if (q && q->x.buf == w.buf) q.reset();
    if (xh_holds && xh_holds->buf == w.buf) xh_holds.reset();
  }
}

void backend::impl::flush_all() {
  flush_encode();
  flush_combine();
  flush_mats();
  flush_heads();
  for (const auto& n : norms) record_norm(n);
  norms.clear();
  dropped.clear();
}

void backend::impl::flush_mats() {
  if (mmvq_stack_ok(mats)) {
    record_mmvq_stack(mats);
  } else if (mats.size() == 2 && mmvq_pair_ok(mats[0], mats[1])) {
    record_mmvq_pair(mats[0], mats[1]);
  } else if (mats.size() == 3 && mmvq_pair_ok(mats[1], mats[2])) {  // Q alone, then K and V
    record_matmul(mats[0]);
    record_mmvq_pair(mats[1], mats[2]);
  } else {
    for (const auto& m : mats) record_matmul(m);
  }
  mats.clear();
}

void backend::impl::record_norm(const pending_norm& n) {
  rms_norm_pc pc{n.x.cols, n.x.off, n.x.stride, n.y.off, n.y.stride, n.eps, n.x.rows};
  const bool weighted = n.w != nullptr, f16 = weighted && f16_beside(n.y);
  std::vector<binding> b{weighted ? bind_weight(*n.w) : bind(n.x, false), bind(n.x, false), bind(n.y, true)};
  if (weighted) b.push_back(bind_weight(*n.w));
  if (f16) {
    b.push_back(bind_id(mm_xh, true));
    pc.h_stride = n.y.cols;  // as f16_input() lays it out
  }
  dispatch(norm_req(weighted, f16), b, &pc, sizeof pc, n.x.rows);
  if (f16) holds_f16(n.y);
}

void backend::impl::record_rope(const tensor& x, std::uint32_t n_heads, const graph::rope_params& rp, const weight* ff) {
  const rope_pc pc{x.rows, n_heads, rp.n_rot, x.cols / n_heads, x.off, x.stride, rp.base, rp.freq_scale,
                   rp.neox ? 1u : 0u, ff ? 1u : 0u};
  const binding b[] = {bind(x, true), bind(x, true), bind_step(off_pos, std::uint64_t(max_rows) * 4),
                       ff ? bind_weight(*ff) : bind(x, true)};
  dispatch(req("rope", {}, {}, 4), b, &pc, sizeof pc, div_up(std::uint64_t(x.rows) * n_heads * (rp.n_rot / 2), wg));
}

void backend::impl::record_temperature(const tensor& q, const graph::position_scale_params& ps) {
  const temperature_pc pc{q.rows, q.cols, q.off, q.stride, float(ps.scale), ps.floor_base};
  const binding b[] = {bind(q, true), bind(q, true), bind_step(off_pos, std::uint64_t(max_rows) * 4)};
  dispatch(req("temperature", {}, {}, 3), b, &pc, sizeof pc, div_up(q.cols, wg), q.rows);
}

backend::impl::head_tensor& backend::impl::head_entry(const tensor& parent, std::uint32_t n_heads) {
  if (q_rot_of && q_rot_of->buf == parent.buf && q_rot_of->off == parent.off) q_rot_of.reset();  // a later op: stale
  for (auto& h : heads)
    if (h.t.buf == parent.buf && h.t.off == parent.off) {
      if (n_heads) h.n_heads = n_heads;
      return h;
    }
  heads.push_back({parent, n_heads, {}});
  return heads.back();
}

void backend::impl::flush_heads() {
  std::vector<head_tensor> hs;
  hs.swap(heads);
  for (const auto& h : hs)
    for (const auto& op : h.ops) {
      switch (op.kind) {  // norms come with their head count (n_heads 0 only for temperature)
        case head_op::norm_w: record_norm({h.t.split_rows(h.n_heads), h.t.split_rows(h.n_heads), op.w, op.eps}); break;
        case head_op::norm: record_norm({h.t.split_rows(h.n_heads), h.t.split_rows(h.n_heads), nullptr, op.eps}); break;
        case head_op::rope: record_rope(h.t, h.n_heads, op.rp, op.ff); break;
        case head_op::temp: record_temperature(h.t, op.ps); break;
      }
    }
}

std::optional<std::uint32_t> backend::impl::head_flags(const head_tensor& h, std::optional<float>& eps, std::optional<head_op>& rope,
                                                       std::optional<graph::position_scale_params>& temp) const {
  std::uint32_t flags = 0, stage = 0;
  for (const auto& op : h.ops) {
    const std::uint32_t bit = op.kind == head_op::norm_w ? 1u : op.kind == head_op::rope ? 2u : op.kind == head_op::norm ? 4u : 8u;
    if (bit <= stage) return std::nullopt;  // out of the kernel's order, or repeated
    stage = bit;
    flags |= bit;
    if (op.kind == head_op::norm_w || op.kind == head_op::norm) {
      if (eps && *eps != op.eps) return std::nullopt;
      eps = op.eps;
    }
    if (op.kind == head_op::rope) {
      if (rope && (rope->rp.neox != op.rp.neox || rope->rp.n_rot != op.rp.n_rot || rope->rp.base != op.rp.base ||
                   rope->rp.freq_scale != op.rp.freq_scale || rope->ff != op.ff))
        return std::nullopt;
      rope = op;
    }
    if (op.kind == head_op::temp) {
      if (temp && (float(temp->scale) != float(op.ps.scale) || temp->floor_base != op.ps.floor_base)) return std::nullopt;
      temp = op.ps;
    }
  }
  return flags;
}

bool backend::impl::record_attn_prep(const kv_state& kv, std::uint32_t layer, const tensor& k, const tensor& v) {
  q_rot_of.reset();  // rotated queries are this layer's or none (a q buffer serves every layer)
  const auto& cfg = kv.config();
  const std::uint32_t D = cfg.head_dim;
  if (D > 256 || D % 2 || k.cols != cfg.n_head_kv * D || v.cols != k.cols) return false;
  const head_tensor* kh = nullptr;
  const head_tensor* qh = nullptr;
  for (const auto& h : heads) {
    if (h.t.buf == k.buf && h.t.off == k.off) kh = &h;
    else if (qh) return false;  // more than one other pending tensor
    else qh = &h;
  }
  std::optional<float> eps;
  std::optional<head_op> rope;
  std::optional<graph::position_scale_params> temp;
  const std::uint32_t kf = kh ? head_flags(*kh, eps, rope, temp).value_or(~0u) : 0u;
  const std::uint32_t qf = qh ? head_flags(*qh, eps, rope, temp).value_or(~0u) : 0u;
  if (kf == ~0u || qf == ~0u) return false;
  if (kh && (kh->n_heads != cfg.n_head_kv || kh->t.rows != k.rows)) return false;
  if (qh && (qh->t.cols % D || (qh->n_heads && qh->t.cols / D != qh->n_heads) || qh->t.rows != k.rows)) return false;
  const weight* qw = nullptr;
  const weight* kw = nullptr;
  if (qh)
    for (const auto& op : qh->ops)
      if (op.kind == head_op::norm_w) qw = op.w;
  if (kh)
    for (const auto& op : kh->ops)
      if (op.kind == head_op::norm_w) kw = op.w;
  const graph::rope_params r = rope ? rope->rp : graph::rope_params{};
  const weight* ff = rope ? rope->ff : nullptr;
  const graph::position_scale_params ts = temp.value_or(graph::position_scale_params{});
  const std::uint32_t n_q = qh ? qh->t.cols / D : 0;
  const auto& ring = kv.window_ring();
  const attn_prep_pc pc{n_q, cfg.n_head_kv, D, r.n_rot, qh ? qh->t.off : 0, qh ? qh->t.stride : 0, k.off, k.stride,
                        v.off, v.stride, r.base, r.freq_scale, eps.value_or(0.0f),
                        qf | kf << 8 | (r.neox ? 1u << 16 : 0u) | (ff ? 1u << 17 : 0u), ring.rows, float(ts.scale),
                        ts.floor_base};
  const std::uint64_t B4 = std::uint64_t(max_rows) * 4;
  const binding dummy = bind(k, false);
  const binding b[] = {qh ? bind(qh->t, true) : dummy,
                       bind(k, false),
                       bind(v, false),
                       qw ? bind_weight(*qw) : dummy,
                       kw ? bind_weight(*kw) : dummy,
                       bind_id(kv.k_buffer(layer), true),
                       bind_id(kv.v_buffer(layer), true),
                       bind_step(off_slots, B4),
                       bind_step(off_pos, B4),
                       ff ? bind_weight(*ff) : dummy,
                       // compressed cache: the f16 ring of the window, its tags, the step's sequences
                       ring.rows && ring.k[layer] ? bind_id(ring.k[layer], true) : dummy,
                       ring.rows && ring.v[layer] ? bind_id(ring.v[layer], true) : dummy,
                       ring.rows ? bind_id(ring.tags[layer], true) : dummy,
                       bind_step(off_seq_row, B4)};
  // TurboQuant keys: the query heads rotated too (Q_ROT), for the grouped decode attention of the
  // steps it takes (decode steps; every step of up to q_rot_rows tokens with STRATA_VK_TQ_GQA=2;
  // the attention checks it reads these rows) where its rotations are hoisted.
  constexpr std::uint32_t q_rot_rows = 64;
  const std::uint32_t group = cfg.n_head_kv && n_q % cfg.n_head_kv == 0 ? n_q / cfg.n_head_kv : 0;
  const bool q_rot_out = qh && kv::turboquant_bits(cfg.type_k) && k.rows <= q_rot_rows && grouped_qdec(group, k.rows, single_seq) &&
                         qdec_hoists(kv, D, group, k.rows);
  std::vector<binding> bq(std::begin(b), std::end(b));
  std::vector<std::pair<std::string, std::string>> qrot_def;
  if (q_rot_out) {
    const std::uint64_t need = std::uint64_t(q_rot_rows) * n_q * D * 4;
    if (!q_rot || buf(q_rot).size() < need) q_rot = new_buffer(need, memory_kind::device, "rotated queries");
    bq.push_back(bind_id(q_rot, true));
    qrot_def.emplace_back("Q_ROT", "1");
  }
  q_rot_of = q_rot_out ? std::optional<tensor>(qh->t) : std::nullopt;
  // The codes beside the attention: the step's positions stay in the ring (ring_rows = window +
  // max_batch), so with at most `window` tokens a sequence no attention of the step reads them.
  if (kv.compressed() && encode_beside && ring.rows && k.rows <= cfg.full_precision_window) {
    auto d = kv_encode_defs(kv);
    d.emplace_back("KV_PART", "1");
    auto d1 = d;
    d1.insert(d1.end(), qrot_def.begin(), qrot_def.end());
    dispatch(req("attn_prep", {}, d1, std::uint32_t(bq.size())), bq, &pc, sizeof pc, n_q + cfg.n_head_kv, k.rows);
    d.back().second = "2";
    pending_encode e{req("attn_prep", {}, std::move(d), 14), {b, b + 14}, pc, cfg.n_head_kv, k.rows};
    e.pc.n_head = 0;  // KV-head workgroups only
    e.b[0] = e.b[10] = e.b[11] = e.b[12] = dummy;
    e.b[5].disjoint = e.b[6].disjoint = true;
    encode = std::move(e);
  } else if (kv.compressed()) {  // K and V encoded as kv_store_q does (kv_encode.glsl)
    auto d = kv_encode_defs(kv);
    d.insert(d.end(), qrot_def.begin(), qrot_def.end());
    dispatch(req("attn_prep", {}, d, std::uint32_t(bq.size())), bq, &pc, sizeof pc, n_q + cfg.n_head_kv, k.rows);
  } else {
    pending_encode e{req("attn_prep", {}, kv_defs(cfg), 10), {b, b + 10}, pc, n_q + cfg.n_head_kv, k.rows, true, qh ? qh->t : k};
    if (head_ops_attention && qh && own_rows && (short_ctx || head_ops_split)) encode = std::move(e);  // attention()'s to run
    else dispatch(e.r, e.b, &e.pc, sizeof e.pc, e.gx, e.gy);
  }
  if (kh && !kh->ops.empty()) dropped.push_back(k);  // k itself was not rewritten: reading it is a bug
  heads.clear();
  return true;
}

void backend::impl::flush_encode() {
  if (!encode) return;
  const pending_encode e = std::move(*encode);
  encode.reset();
  dispatch(e.r, e.b, &e.pc, sizeof e.pc, e.gx, e.gy);
}

void backend::impl::record_combine(const pending_combine& c, const tensor* residual) {
  moe_pc pc = c.pc;
  if (residual) {
    pc.r_off = residual->off;
    pc.r_stride = residual->stride;
  }
  std::vector<binding> b{bind_id(moe_ids, false), bind_id(moe_ids, false), bind_id(moe_wts, false),
                         bind(c.y, false), bind(c.out, true), residual ? bind(*residual, false) : bind(c.y, false)};
  std::vector<std::pair<std::string, std::string>> d{{"MOE_COMBINE", "1"}};
  if (residual) d.emplace_back("RESIDUAL", "1");
  const std::uint32_t gx = div_up(c.out.cols, wg), gy = c.out.rows;  // as moe_req
  if (c.tail && residual) {  // the next norm of out into the other slot, by the last workgroup
    d.emplace_back("NORM_TAIL", "6");
    const std::uint32_t so = last_slot ^ 1u;
    const auto tb = tail_bindings(*c.tail, so);
    b.insert(b.end(), tb.begin(), tb.end());
    const with_norm_tail<moe_pc> tp{pc, tail_pc(*c.tail)};
    dispatch(req("moe", {}, std::move(d), 12), b, &tp, sizeof tp, gx, gy);
    wrote(c.out);
    wrote(c.tail->y);
    tail_slot = last_slot = so;
    return;
  }
  if (c.norm_out && residual) {  // the next norm's first half into the other slot (moe.glsl NORM_OUT)
    const std::uint32_t so = last_slot ^ 1u;
    b.insert(b.end(), {bind_weight(*c.norm_out->w), bind_id(xq[so], true), bind_id(xs[so], true), bind_id(rms_sq[so], true)});
    const struct {
      moe_pc m;
      std::uint32_t q_stride, qs_stride;
    } np{pc, max_k / 16, max_k / 32};
    dispatch(combine_norm_out_req(), b, &np, sizeof np, gx, gy);
    wrote(c.out);
    quantized[so] = quantized_input{c.out, c.norm_out->w, c.norm_out->eps, true};
    last_slot = so;  // keep the norm's codes: the next quantize goes to the other slot
    return;
  }
  dispatch(req("moe", {}, std::move(d), 6), b, &pc, sizeof pc, gx, gy);
}

void backend::impl::flush_combine() {
  if (!combine) return;
  const pending_combine c = *combine;
  combine.reset();
  if (c.down && c.down->block && c.residual && c.norm_out && !c.tail) return record_down_block_tail(c);
  if (c.down && c.down->last_wg && c.residual) return record_down_combine(c);
  if (c.down) record_mmvq_ids(*c.down->w, nullptr, c.down->slot, 1, c.down->pairs, c.y, false, 0);
  record_combine(c, c.residual ? &*c.residual : nullptr);
}

void backend::impl::record_down_combine(const pending_combine& c) {
  const weight& w = *c.down->w;
  const tensor& r = *c.residual;
  const std::uint32_t sl = c.down->slot, so = sl ^ 1u;
  const mmvq_pc mp{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), c.down->pairs, std::uint32_t(w.row_bytes), 0, max_k / 16, 0,
                   max_k / 32, c.y.off, c.y.stride, 0, 0, 0, std::uint32_t(w.row_bytes * w.ne[1]), 0, 1};
  // Bindings 0-5 the matvec's (4 unused: no ADD_RESIDUAL), 6-10 the combine's, 11-15 the norm's
  // (NORM_TAIL = 10: its slot +0, the counter, is the combine's): 16, lavapipe's limit per stage.
  pipeline_request rq = mmvq_req(w.type, 1, w.ne[0], w.ne[1], false, false, true);
  rq.defines.emplace_back("MOE_COMBINE_TAIL", "6");
  std::vector<binding> b{bind_weight(w),          bind_id(xq[sl], false), bind_id(xs[sl], false),  bind(c.y, true),
                         bind(c.y, false),        bind_id(moe_ids, false), bind_id(tail_counter, true), bind_id(moe_wts, false),
                         bind(c.out, true),       bind(r, false),          bind(c.y, false)};
  const std::uint32_t gx = div_up(w.ne[1], mmvq_rows_per_wg(rq)), gy = c.down->pairs;
  struct combine_fields {
    std::uint32_t k, out_off, out_stride, r_off, r_stride, weighted;
  };
  const combine_fields cf{c.pc.k, c.out.off, c.out.stride, r.off, r.stride, c.pc.weighted};
  if (c.tail) {  // the next norm of out too
    rq.defines.emplace_back("NORM_TAIL", "10");
    const auto tb = tail_bindings(*c.tail, so);
    b.insert(b.end(), tb.begin() + 1, tb.end());  // without its counter
    add_cache_lookup(rq, b, w, nullptr, true);
    const norm_tail_pc t = tail_pc(*c.tail);
    const struct {
      mmvq_pc m;
      combine_fields c;
      std::uint32_t y_off, y_stride, q_stride, s_stride;
      float eps;
    } pc{mp, cf, t.y_off, t.y_stride, t.q_stride, t.s_stride, t.eps};
    rq.bindings = std::uint32_t(b.size());
    dispatch(rq, b, &pc, sizeof pc, gx, gy);
  } else {
    const struct {
      mmvq_pc m;
      combine_fields c;
    } pc{mp, cf};
    add_cache_lookup(rq, b, w, nullptr, true);
    rq.bindings = std::uint32_t(b.size());
    dispatch(rq, b, &pc, sizeof pc, gx, gy);
  }
  wrote(c.y);
  wrote(c.out);
  if (c.tail) {
    wrote(c.tail->y);
    tail_slot = last_slot = so;
  }
}

bool backend::impl::moe_block_tail_ok(const weight& down, std::uint32_t k, std::uint32_t tokens) const {
  if (!moe_block_tail || !block_counters || !fuse || !combine_norm_out || !rms_sq[0] || tokens > moe_block_tail_tokens ||
      k < 1 || !int8_unit(down.type) || down.ne[1] % 32 || down.ne[1] > max_k)
    return false;
  const pipeline_request r = expert_mmvq_req(down, std::uint32_t(down.ne[0]), std::uint32_t(down.ne[1]), false, false, false);
  const auto wg = std::find_if(r.defines.begin(), r.defines.end(), [](const auto& d) { return d.first == "WG"; });
  const std::uint32_t rows = mmvq_rows_per_wg(r);
  // moe_block_tail.glsl: a thread a row of a block, at most 8 blocks a workgroup, whole blocks or parts of one.
  return wg != r.defines.end() && std::stoul(wg->second) >= 32 && rows && rows <= 256 && (32 % rows == 0 || rows % 32 == 0);
}

// The experts' down matvec whose workgroups complete the combine block by block (mmvq.glsl
// MOE_BLOCK_TAIL): what record_combine()'s NORM_OUT dispatch writes, with no dispatch of its own.
void backend::impl::record_down_block_tail(const pending_combine& c) {
  const weight& w = *c.down->w;
  const tensor& r = *c.residual;
  const std::uint32_t sl = c.down->slot, so = sl ^ 1u, K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]);
  const mmvq_pc mp{K, N, c.down->pairs, std::uint32_t(w.row_bytes), 0, max_k / 16, 0, max_k / 32, c.y.off, c.y.stride,
                   0, 0, 0, std::uint32_t(w.row_bytes * w.ne[1]), 0, 1};
  pipeline_request rq = expert_mmvq_req(w, K, N, false, false, false);
  rq.defines.emplace_back("MOE_BLOCK_TAIL", "6");
  if (moe_block_tail_lab) rq.defines.emplace_back("BT_LAB", std::to_string(moe_block_tail_lab));  // lab: wrong results
  // 0-5 the matvec's (4 unused: no ADD_RESIDUAL), 6-14 the tail's.
  std::vector<binding> b{bind_weight(w),         bind_id(xq[sl], false),     bind_id(xs[sl], false),
                         bind(c.y, true),        bind(c.y, false),           bind_id(moe_ids, false),
                         bind_id(block_counters, true), bind_id(moe_wts, false), bind(c.out, true),
                         bind(r, false),         bind(c.y, false),           bind_weight(*c.norm_out->w),
                         bind_id(xq[so], true),  bind_id(xs[so], true),      bind_id(rms_sq[so], true)};
  add_cache_lookup(rq, b, w, nullptr, true);
  rq.bindings = std::uint32_t(b.size());
  const struct {
    mmvq_pc m;
    std::uint32_t k, out_off, out_stride, r_off, r_stride, weighted, q_stride, s_stride;
  } pc{mp, c.pc.k, c.out.off, c.out.stride, r.off, r.stride, c.pc.weighted, max_k / 16, max_k / 32};
  dispatch(rq, b, &pc, sizeof pc, div_up(N, mmvq_rows_per_wg(rq)), c.down->pairs);
  wrote(c.y);
  wrote(c.out);
  quantized[so] = quantized_input{c.out, c.norm_out->w, c.norm_out->eps, true};
  last_slot = so;  // keep the norm's codes: the next quantize goes to the other slot
}

bool backend::impl::try_norm_out(const pending_norm& n) {
  const tensor& x = n.x;
  if (!norm_out || !rms_sq[0] || !n.w || !heads.empty()) return false;
  // As the deferred norm in rms_norm(), but the producer waits: the next op decides whether the
  // producer writes the norm's first half (a matmul reading y: matmul()) or not (any other op).
  const auto defer_past = [&](auto& producer) {
    std::remove_reference_t<decltype(producer)> held;
    held.swap(producer);
    prepare({}, {n.y});
    producer.swap(held);
    std::erase_if(norms, [&](const pending_norm& o) { return o.y.buf == n.y.buf; });
    norms.push_back(n);
  };
  // The MoE combine with its residual joined (decode steps): it writes the first half itself.
  if (combine_norm_out && combine && mats.empty() && combine->residual && (!combine->down || combine->down->block) &&
      !combine->tail && same(combine->out, x) &&
      x.rows <= max_q8_rows && x.rows < mmvq_max_tokens && x.cols % 32 == 0 && x.cols <= max_k && wg % 32 == 0 &&
      x.buf != n.y.buf) {
    defer_past(combine);
    combine->norm_out = n;
    return true;
  }
  if (mats.size() != 1 || combine) return false;
  const pending_matmul& m = mats.back();
  if (!same(m.y, x) || !m.residual || m.up || m.tail || !use_mmvq(*m.w, x.rows) || x.rows > max_q8_rows ||
      x.cols % 32 || x.cols > max_k || x.cols != m.w->ne[1] || x.buf == n.y.buf)
    return false;
  // A projection that cannot own whole blocks waits only where a reader takes its block tails
  // (the router parts or product, block_norm_out).
  const bool fits = norm_out_fits(m.w->type, m.w->ne[1]);
  if (!fits && !((router_part_buf || router_product_parts || proj_rows) && block_counters && x.rows == 1 && !m.norm)) return false;
  defer_past(mats);
  mats.back().norm_out = n;
  mats.back().norm_out_by_tails = !fits;
  return true;
}

// Decode's MoE router (moe_ffn): the O projection waiting with the FFN norm's first half
// (try_norm_out) is recorded now, writing the router's logits as per-block parts beside the codes
// (mmvq.glsl ROUTER_PARTS). False: the projection, if it was waiting, is recorded without them.
bool backend::impl::record_router_parts(const weight& router, const tensor& x, const tensor& scratch) {
  const auto& e = weights.at(router.id);
  if (!router_part_buf || router.type != gguf::type_id::f32 || router.ne[1] > router_part_experts || router.ne[1] % 4 ||
      router.ne[0] != x.cols || x.rows > router_part_tokens || e.host >= 0 || e.stream >= 0 || e.xstream >= 0)
    return false;
  return record_norm_out_projection(&router, x, scratch);
}

// The O projection waiting with the FFN norm's first half for x (try_norm_out), or null.
const pending_matmul* backend::impl::norm_out_projection(const tensor& x) const {
  if (combine || mats.size() != 1 || !mats.back().norm_out || !same(mats.back().norm_out->y, x)) return nullptr;
  return &mats.back();
}

// The kernel of a waiting projection that cannot own whole blocks (norm_out_by_tails) as one
// token's block tails, or nothing where its shape does not allow them.
std::optional<pipeline_request> backend::impl::block_tail_projection_req(const pending_matmul& m, const tensor& scratch) const {
  const weight& w = *m.w;
  const std::uint32_t K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]);
  pipeline_request rq = mmvq_req(w.type, 1, K, N, false, false, false, false, false, false, false, 0);
  const auto wg = std::find_if(rq.defines.begin(), rq.defines.end(), [](const auto& d) { return d.first == "WG"; });
  const std::uint32_t rows = mmvq_rows_per_wg(rq);  // moe_block_tail.glsl: a thread a row, whole blocks or parts of one
  if (m.x.rows != 1 || m.norm || !m.residual || scratch.rows < 1 || scratch.cols != N || scratch.buf == m.y.buf || N % 32 ||
      N > max_k || wg == rq.defines.end() || std::stoul(wg->second) < 32 || !rows || rows > 256 || (32 % rows && rows % 32))
    return std::nullopt;
  rq.defines.emplace_back("MOE_BLOCK_TAIL", "6");
  return rq;
}

// The O projection waiting with the FFN norm's first half (norm_out_projection), recorded in a form
// that writes the norm's codes and block sums of x^2 for the gate/up matvec (RMS_IN), and with
// `parts_router` the router's per-block parts (ROUTER_PARTS). False: nothing waited, or the
// projection was recorded without them.
// A projection that cannot own whole blocks (norm_out_by_tails) runs as one token's block tails
// (mmvq.glsl MOE_BLOCK_TAIL without MOE_IDS): its raw rows into `scratch`, the tails add them to
// the residual and write the norm's first half (and the router's parts) block by block.
bool backend::impl::record_norm_out_projection(const weight* parts_router, const tensor& x, const tensor& scratch) {
  const pending_matmul* waiting = norm_out_projection(x);
  if (!waiting) return false;
  pending_matmul m = *waiting;
  if (!m.norm_out_by_tails) {
    mats.clear();
    m.router = parts_router;
    norm_out_recorded = router_parts_recorded = false;  // record_mmvq() sets them when its NORM_OUT form runs
    record_matmul(m);
    return parts_router ? router_parts_recorded : norm_out_recorded;
  }
  std::optional<pipeline_request> rq = block_tail_projection_req(m, scratch);
  if (!rq) return false;
  mats.clear();
  const weight& w = *m.w;
  const std::uint32_t K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]);
  const tensor& r = *m.residual;
  const std::uint32_t sl = quantize_input(m.x, nullptr, 0.0f), so = sl ^ 1u;
  const mmvq_pc mp{K, N, 1, std::uint32_t(w.row_bytes), 0, max_k / 16, 0, max_k / 32, scratch.off, scratch.stride,
                   0, 0, 0, 0, 0, 1};
  if (parts_router) {
    rq->defines.insert(rq->defines.end(), {{"ROUTER_PARTS", std::to_string(parts_router->ne[1])}, {"ROUTER_PARTS_AT", "4"}});
    if (router_parts_lab) rq->defines.emplace_back("ROUTER_PARTS_LAB", "1");
  }
  // 0-3 the matvec's, 4-5 the parts (the residual and ids of other forms; without parts unused), 6-14 the
  // tails' (7, the router's weights, unused: k = 1).
  const std::vector<binding> b{bind_weight(w),
                               bind_id(xq[sl], false),
                               bind_id(xs[sl], false),
                               bind(scratch, true),
                               parts_router ? bind_weight(*parts_router) : bind_id(xs[sl], false),
                               parts_router ? bind_id(router_part_buf, true) : bind_id(xs[sl], false),
                               bind_id(block_counters, true),
                               bind(scratch, false),
                               bind(m.y, true),
                               bind(r, false),
                               bind(scratch, false),
                               bind_weight(*m.norm_out->w),
                               bind_id(xq[so], true),
                               bind_id(xs[so], true),
                               bind_id(rms_sq[so], true)};
  rq->bindings = std::uint32_t(b.size());
  const struct {
    mmvq_pc m;
    std::uint32_t k, out_off, out_stride, r_off, r_stride, weighted, q_stride, s_stride;
  } pc{mp, 1, m.y.off, m.y.stride, r.off, r.stride, 0, max_k / 16, max_k / 32};
  dispatch(*rq, b, &pc, sizeof pc, div_up(N, mmvq_rows_per_wg(*rq)), 1);
  wrote(scratch);
  wrote(m.y);
  quantized[so] = quantized_input{m.y, m.norm_out->w, m.norm_out->eps, true};
  last_slot = so;
  return true;
}

bool backend::impl::try_norm_tail(const pending_norm& n) {
  const tensor& x = n.x;
  if (!tail_rows || !tail_counter || !n.w || x.rows > tail_rows || x.cols % 32 || x.cols > max_k ||
      x.rows > max_q8_rows || x.off % 4 || x.stride % 4 || n.y.off % 4 || n.y.stride % 4 || x.buf == n.y.buf)
    return false;
  if (!mats.empty() && same(mats.back().y, x) && mats.back().residual && !mats.back().up &&
      use_mmvq(*mats.back().w, x.rows)) {
    mats.back().tail = n;
  } else if (combine && combine->residual && same(combine->out, x) && mats.empty()) {
    combine->tail = n;
  } else {
    return false;
  }
  prepare({x}, {n.y});  // records the producer, tail included
  if (!tail_slot) throw error("internal: Vulkan backend lost the norm tail of '" + std::string(n.w->name) + "'");
  // After prepare(): writing y there dropped whatever a slot held of y's buffer.
  quantized[*tail_slot] = quantized_input{n.y, nullptr, 0.0f};
  tail_slot.reset();
  return true;
}

std::vector<binding> backend::impl::tail_bindings(const pending_norm& n, std::uint32_t slot) const {
  return {bind_id(tail_counter, true), bind(n.x, false),     bind_weight(*n.w),
          bind_id(xq[slot], true),     bind_id(xs[slot], true), bind(n.y, true)};
}

norm_tail_pc backend::impl::tail_pc(const pending_norm& n) const {
  return {n.x.off, n.x.stride, n.x.cols, n.x.rows, n.y.off, n.y.stride, max_k / 16, max_k / 32, n.eps};
}
}  // namespace strata::gpu
