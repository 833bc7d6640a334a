// Matmul recording: f32-activation matvec (with fused norm / SwiGLU / residual), integer matvec
// on int8-quantized activations (MMVQ, QUANT_OUT), expert matvecs by id, tiled prefill matmul
// (the f16 tensor-core GEMM's own recording: f16_gemm_recording.cpp).
#include "backend_impl.hpp"

#include <algorithm>
#include <string>
#include <tuple>

#include "strata/core/error.hpp"

namespace strata::gpu {
using namespace detail;

std::uint32_t backend::impl::quantize_input(const tensor& x, const weight* norm_w, float eps, bool raw_ok) {
  for (std::uint32_t sl = 0; sl < 2; ++sl)
    if (const auto& q = quantized[sl]; q && same(q->x, x) && q->norm_w == norm_w && q->eps == eps && (raw_ok || !q->raw))
      return last_slot = sl;
  if (x.off % 4 || x.stride % 4)
    throw error("internal: quantized matmul input rows must start at multiples of 4 floats");
  if (x.cols > max_k || x.rows > max_q8_rows) throw error("internal: quantized input larger than its scratch");
  const std::uint32_t sl = last_slot ^ 1u;  // keep the slot read last (a gate/up pair may still need it)
  const quantize_pc pc{x.cols, x.off, x.stride, 0, max_k / 16, 0, max_k / 32, eps};
  const binding b[] = {bind(x, false), norm_w ? bind_weight(*norm_w) : bind(x, false), bind_id(xq[sl], true),
                       bind_id(xs[sl], true)};
  dispatch(quantize_req(norm_w != nullptr), b, &pc, sizeof pc, x.rows);
  quantized[sl] = quantized_input{x, norm_w, eps};
  return last_slot = sl;
}

void backend::impl::wrote(const tensor& y) {
  for (auto& q : quantized)
    if (q && q->x.buf == y.buf) q.reset();
  if (xh_holds && xh_holds->buf == y.buf) xh_holds.reset();
  std::erase_if(dropped, [&](const tensor& d) { return d.buf == y.buf; });
}

void backend::impl::record_matmul(const pending_matmul& m) {
  const weight& w = *m.w;
  const std::uint32_t n = m.x.rows;
  const std::uint32_t nt = n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1;
  // With its residual, or as a gate/up pair with the SwiGLU (swiglu_joins_pair), if any.
  if (m.up && !fuse_step && !m.norm && mm3_swiglu_ok(w, n)) return record_mm3_swiglu(m);
  if (!m.up && !m.norm && takes_f16_gemm(w, n)) return record_mul_mm_f16(m);  // (with its residual)
  if (!m.norm && takes_mm_reg(w, n)) return record_mul_mm_small(m);
  if (!m.norm && !m.up && !m.residual && use_narrow_gemm(w, n)) return record_narrow_gemm(m);
  if (!m.norm && !m.up && !m.residual && w.ne[2] == 1 && mmq_dense_ok(w.type, w.ne[0], n)) return record_mmq_dense(m);
  if (!m.norm && !m.up && !m.residual && use_mm_small(w, n)) {
    if (mm_parts && n >= mmk_small_min && mm3 && mm3_in_place(w.type, w.ne[0], n)) return record_mul_mm_f16(m);
    return record_mul_mm_small(m);
  }
  // An F32 matrix of few rows (an MoE router, kept off the tensor cores) gives the f32 64 x 64
  // tiles too few workgroups to fill the GPU; the matvec's (rows, 8 tokens) grid does.
  const bool narrow_f32 = coopmat && !f16_operands_ok(w.type) && w.ne[1] <= 256;
  if (!m.norm && !m.up && !m.residual && !narrow_f32 && tiled_matmul(w.type, w.ne[0], n)) return record_mul_mm(m);
  if (use_mmvq(w, n)) return record_mmvq(m);
  const tensor& x = m.norm ? m.norm->x : m.x;
  if (x.off % 4 || x.stride % 4)  // the kernel reads x as vec4
    throw error("matmul '" + std::string(w.name) + "': input rows must start at multiples of 4 floats");
  matvec_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), n, std::uint32_t(w.row_bytes), x.off, x.stride,
               m.y.off, m.y.stride, 0, 1, 0, 0, 0, 0, m.norm ? m.norm->eps : 0.0f};
  const binding wb = m.up ? bind_gate_up(w, *m.up, pc.up_off) : bind_weight(w);
  if (m.residual) {
    pc.r_off = m.residual->off;
    pc.r_stride = m.residual->stride;
  }
  std::vector<binding> b{wb, bind(x, false), bind(m.y, true), bind(x, false),
                         m.norm ? bind_weight(*m.norm->w) : bind(x, false), m.residual ? bind(*m.residual, false) : bind(x, false)};
  std::vector<std::pair<std::string, std::string>> d{
      {"NR", std::to_string(rows_for(w.ne[1]))}, {"NT", std::to_string(nt)}, {"WG", std::to_string(mv_wg)}};
  if (m.norm) d.emplace_back("NORM_INPUT", "1");
  if (m.up) d.emplace_back("SWIGLU", "1");
  if (m.residual) d.emplace_back("ADD_RESIDUAL", "1");
  const std::uint32_t gx = div_up(w.ne[1], rows_for(w.ne[1])), gy = div_up(n, nt);
  // A router's top-k by the last workgroup (moe_topk.glsl: up to 256 experts, 2 per thread at
  // most 4 x WG); every workgroup must hold rows, so the grid may not spill into z.
  if (m.topk && tail_counter && !m.norm && !m.up && !m.residual && m.topk->n_expert == w.ne[1] &&
      m.topk->n_expert <= 256 && m.topk->k <= 64 && gx <= ctx.info().max_workgroups_x) {
    d.emplace_back("TOPK_TAIL", "6");
    if (m.topk->sigmoid) d.emplace_back("ROUTER_SIGMOID", "1");
    if (const std::uint32_t s = topk_lean_slots(m.topk->n_expert, m.topk->k)) d.emplace_back("TOPK_LEAN", std::to_string(s));
    b.insert(b.end(), {bind_id(tail_counter, true), bind_id(moe_ids, true), bind_id(moe_wts, true), bind(m.y, false)});
    struct {
      matvec_pc mv;
      std::uint32_t n_expert, k;
    } const tp{pc, m.topk->n_expert, m.topk->k};
    dispatch(req("matvec", w.type, std::move(d), 10), b, &tp, sizeof tp, gx, gy);
    wrote(m.y);
    topk_done = true;
    return;
  }
  dispatch(req("matvec", w.type, std::move(d), 6), b, &pc, sizeof pc, gx, gy);
  wrote(m.y);
}

void backend::impl::record_narrow_gemm(const pending_matmul& m) {
  const weight& w = *m.w;
  if (m.x.off % 4 || m.x.stride % 4)
    throw error("matmul '" + std::string(w.name) + "': input rows must start at multiples of 4 floats");
  const std::uint32_t K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]), n = m.x.rows;
  const std::uint32_t chunk = div_up(div_up(K, narrow_splits), 32) * 32, used = div_up(K, chunk);
  const mul_mm_split_pc pc{K, N, n, std::uint32_t(w.row_bytes), m.x.off, m.x.stride, 0, N, chunk, n * N};
  const binding b[] = {bind_weight(w), bind(m.x, false), bind_id(narrow_parts, true)};
  dispatch3(narrow_req(w.type), b, &pc, sizeof pc, div_up(N, 32), div_up(n, 32), used);
  record_split_sum(narrow_parts, N, n, used, m.y, 0);
  wrote(m.y);
}

void backend::impl::record_split_sum(std::uint32_t parts, std::uint32_t N, std::uint32_t n, std::uint32_t splits,
                                     const tensor& y, std::uint32_t col0, const tensor* residual) {
  const split_k_sum_pc sp{N, n, splits, n * N, y.off + col0, y.stride, residual ? residual->off + col0 : 0,
                          residual ? residual->stride : 0};
  const binding sb[] = {bind_id(parts, false), bind(y, true), residual ? bind(*residual, false) : bind(y, false)};
  if (residual) {
    pipeline_request r = split_k_sum_req();
    r.defines.emplace_back("RESIDUAL", "1");
    r.bindings = 3;
    dispatch(r, sb, &sp, sizeof sp, div_up(std::uint64_t(N) * n, 256));
  } else {
    dispatch(split_k_sum_req(), std::span(sb, 2), &sp, sizeof sp, div_up(std::uint64_t(N) * n, 256));
  }
}

void backend::impl::record_mmvq(const pending_matmul& m) {
  const weight& w = *m.w;
  const std::uint32_t n = m.x.rows;
  const std::uint32_t nt = n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1;
  const std::uint32_t sl =
      m.norm ? quantize_input(m.norm->x, m.norm->w, m.norm->eps, true) : quantize_input(m.x, nullptr, 0.0f);
  const bool rms_in = quantized[sl] && quantized[sl]->raw;
  mmvq_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), n, std::uint32_t(w.row_bytes), 0, max_k / 16, 0, max_k / 32,
             m.y.off, m.y.stride, 0, 0, 0, 0, 0, 1};
  const binding wb = m.up ? bind_gate_up(w, *m.up, pc.up_off) : bind_weight(w);
  if (m.residual) {
    pc.r_off = m.residual->off;
    pc.r_stride = m.residual->stride;
  }
  // A SwiGLU output is only ever a matvec input: quantize it in the same dispatch, into the
  // other slot, when a workgroup owns whole 32-row blocks of it.
  const bool qout = quant_out && m.up && !m.residual && w.ne[1] % 32 == 0 && m.y.off % 4 == 0 && m.y.stride % 4 == 0 &&
                    m.y.cols <= max_k;
  const std::uint32_t so = sl ^ 1u;
  const bool tail = m.tail && m.residual && !qout;
  // The next norm's first half (NORM_OUT) into the other slot: y's rows are the norm's input.
  const bool nout = m.norm_out && !m.norm_out_by_tails && m.residual && !m.up && !tail && !rms_in && w.ne[1] % 32 == 0 &&
                    m.norm_out->x.cols == w.ne[1] && m.y.cols <= max_k && m.norm_out->w;
  std::vector<binding> b{wb, bind_id(xq[sl], false), bind_id(xs[sl], false), bind(m.y, true),
                         m.residual ? bind(*m.residual, false) : bind(m.y, false), bind_id(xq[sl], false),
                         bind_id(xq[so], qout || nout), bind_id(xs[so], qout || nout)};
  if (nout || rms_in) {
    b.push_back(nout ? bind_weight(*m.norm_out->w) : bind_id(xq[sl], false));
    b.push_back(bind_id(rms_sq[so], nout));
  }
  if (rms_in) b.push_back(bind_id(rms_sq[sl], false));
  auto r = mmvq_req(w.type, nt, w.ne[0], w.ne[1], m.up != nullptr, m.residual.has_value(), false, qout, false, tail, nout,
                    rms_in ? std::uint32_t(w.ne[0]) : 0u);
  norm_out_recorded = nout;
  router_parts_recorded = nout && m.router;
  if (router_parts_recorded) {  // the router's logits as per-block parts (moe_ffn); binding 10 unused
    b.insert(b.end(), {bind_id(xq[sl], false), bind_weight(*m.router), bind_id(router_part_buf, true)});
    r.defines.insert(r.defines.end(), {{"ROUTER_PARTS", std::to_string(m.router->ne[1])}, {"ROUTER_PARTS_AT", "11"}});
    if (router_parts_lab) r.defines.emplace_back("ROUTER_PARTS_LAB", "1");
    r.bindings = 13;
  }
  const std::uint32_t gx = div_up(w.ne[1], mmvq_rows_per_wg(r)), gy = div_up(n, nt);
  if (tail) {  // the next norm of y into the other slot, by the last workgroup
    const auto tb = tail_bindings(*m.tail, so);
    b.insert(b.end(), tb.begin(), tb.end());
    const with_norm_tail<mmvq_pc> tp{pc, tail_pc(*m.tail)};
    dispatch(r, b, &tp, sizeof tp, gx, gy);
  } else if (rms_in) {
    const struct {
      mmvq_pc m;
      float eps;
    } rp{pc, m.norm->eps};
    dispatch(r, b, &rp, sizeof rp, gx, gy);
  } else {
    dispatch(r, b, &pc, sizeof pc, gx, gy);
  }
  wrote(m.y);
  if (nout) {
    quantized[so] = quantized_input{m.y, m.norm_out->w, m.norm_out->eps, true};
    last_slot = so;  // keep the norm's codes: the next quantize goes to the slot just read
  }
  if (qout) {
    quantized[so] = quantized_input{m.y, nullptr, 0.0f};
    last_slot = sl;  // the next quantize goes to the other slot than the one just read
  }
  if (tail) {
    wrote(m.tail->y);
    tail_slot = so;
    last_slot = so;  // keep the norm's rows: the next quantize goes to the slot just read
  }
}

void backend::impl::record_mul_mm(const pending_matmul& m) {
  const weight& w = *m.w;
  if (m.x.off % 4 || m.x.stride % 4)
    throw error("matmul '" + std::string(w.name) + "': input rows must start at multiples of 4 floats");
  const matvec_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), m.x.rows, std::uint32_t(w.row_bytes), m.x.off,
                     m.x.stride, m.y.off, m.y.stride, 0, 0, 0, 0, 0, 0, 0.0f};
  const bool f16_ok = coopmat && f16_operands_ok(w.type);
  if (f16_ok && mm3 && w.ne[0] % 16 == 0 && (mm_scratch || w.type == gguf::type_id::f16 || mm3_in_place(w.type, w.ne[0], m.x.rows)))
    return record_mul_mm_f16(m);
  const binding b[] = {bind_weight(w), bind(m.x, false), bind(m.y, true)};
  if (f16_ok && mma2) {
    const mma2_tile t = mma2_tile_for(w.ne[1], m.x.rows);
    dispatch(mma2_req(w.type, t), b, &pc, sizeof pc, div_up(w.ne[1], t.bm), div_up(m.x.rows, t.bn));
  } else {
    dispatch(mul_mm_req(w.type), b, &pc, sizeof pc, div_up(w.ne[1], 64), div_up(m.x.rows, 64));
  }
  wrote(m.y);
}

void backend::impl::record_f16_rows(const tensor& x, std::uint32_t rows, std::uint32_t dst, std::uint32_t div) {
  const std::uint32_t K = x.cols;
  const gather_f16_pc pc{K, x.off, x.stride, 0, K / 8, moe_sorted_off, div};
  const bool gather = div > 0;
  const binding src = bind(x, false);
  const binding b[] = {src, src, bind_id(dst, true), gather ? bind_id(moe_groups, false) : src};
  dispatch(gather ? req("copy_rows", {}, {{"WG", "128"}, {"TO_F16", "1"}, {"INDEXED", "1"}}, 4)
                  : req("copy_rows", {}, {{"WG", "128"}, {"TO_F16", "1"}}, 3),
           std::span(b, gather ? 4 : 3), &pc, sizeof pc, div_up(K / 8, 128), rows);
}

void backend::impl::record_moe_group(std::uint32_t n_expert, std::uint32_t k, std::uint32_t pairs, std::uint32_t chunk) {
  const moe_pc pc{n_expert, k, pairs, 0, 0, moe_sorted_off, 0, 0};
  const binding b[] = {bind_id(moe_ids, false), bind_id(moe_ids, false), bind_id(moe_wts, false),
                       bind_id(moe_ids, false), bind_id(moe_ids, false), bind_id(moe_groups, true)};
  dispatch(moe_group_req(chunk), b, &pc, sizeof pc, 1);
}

std::pair<std::uint32_t, std::uint32_t> backend::impl::f16_input(const tensor& x) {
  if (!xh_holds || !same(*xh_holds, x)) {
    record_f16_rows(x, x.rows, mm_xh);
    holds_f16(x);
  }
  return {xh_at, x.cols};
}

bool backend::impl::swiglu_joins_pair(const tensor& gate, const tensor& up, const tensor& out) const {
  if (fuse_step || !fuse || !mm_fuse || !mm_fuse_more || !xh_swiglu_at || mats.size() != 2) return false;
  const pending_matmul &a = mats[0], &b = mats[1];
  if (!same(a.y, gate) || !same(b.y, up) || !same(out, gate) || !same(a.x, b.x) || a.residual || b.residual || a.up ||
      a.norm || b.norm)
    return false;
  const weight &g = *a.w, &u = *b.w;
  // One binding over gate .. up; the rows' loads need 16-byte alignment of up's start.
  return adjacent(g, u) && g.ne[0] == u.ne[0] && g.ne[2] == 1 && g.ne[1] % 16 == 0 &&
         (weights.at(u.id).offset - weights.at(g.id).offset) % 16 == 0 &&
         ((f16_beside(out) && takes_mm_reg(g, gate.rows)) || mm3_swiglu_ok(g, gate.rows));
}

void backend::impl::record_mul_mm_small(const pending_matmul& m) {
  const weight& w = *m.w;
  const std::uint32_t K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]), n = m.x.rows;
  const auto [x_off, x_stride] = f16_input(m.x);
  mm_small_pc pc{K, N, n, std::uint32_t(w.row_bytes), x_off, x_stride, m.y.off, m.y.stride, 0, 0};
  if (m.up) {  // SWIGLU (swiglu_joins_pair): one binding over gate .. up, out's f16 copy in the other region
    const binding wb = bind_gate_up(w, *m.up, pc.up_off);
    pc.h_off = x_off == 0 ? xh_swiglu_at : 0;
    pc.h_stride = m.y.cols;
    const binding sb[] = {wb, bind_id(mm_xh, false), bind(m.y, true), bind_id(mm_xh, true)};
    dispatch(mm_reg_req(w.type, n, N, false, true), sb, &pc, sizeof pc, N / 16, div_up(n, 8 * mm_reg_tiles(n)));
    wrote(m.y);
    holds_f16(m.y, pc.h_off);
    return;
  }
  const binding b[] = {bind_weight(w), bind_id(mm_xh, false), bind(m.y, true),
                       m.residual ? bind(*m.residual, false) : bind(m.y, true)};
  // mul_mm_reg where the format's unit and the probed fragments allow: the same operands and grid
  // rows, 8-token tiles; the residual add in its store.
  if (m.residual) {
    pc.r_off = m.residual->off;
    pc.r_stride = m.residual->stride;
  }
  if (use_mm_reg(w.type, n))
    dispatch(mm_reg_req(w.type, n, N, m.residual.has_value()), std::span(b, m.residual ? 4 : 3), &pc, sizeof pc, div_up(N, 32),
             div_up(n, 8 * mm_reg_tiles(n)));
  else if (m.residual)
    throw error("internal: matmul '" + std::string(w.name) + "' with a residual on mul_mm_small");
  else
    dispatch(mm_small_req(w.type, n), std::span(b, 3), &pc, sizeof pc, div_up(N, 32), div_up(n, mm_small_tokens(n)));
  wrote(m.y);
}

void backend::impl::record_mm_small_experts(const weight& w, const tensor& out, bool scatter, std::uint32_t pairs,
                                            std::uint32_t chunks) {
  enter_expert(w);
  const std::uint32_t K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]);
  const mm_small_pc pc{K, N, pairs, std::uint32_t(w.row_bytes), 0, K, out.off, out.stride,
                       std::uint32_t(w.row_bytes * w.ne[1]), moe_sorted_off};
  const binding b[] = {bind_weight(w), bind_id(moe_xh, false), bind(out, true), bind_id(moe_groups, false)};
  dispatch(mm_small_req(w.type, mms_moe_chunk, true, scatter), b, &pc, sizeof pc, div_up(N, 32), chunks);
  wrote(out);
}

std::uint32_t backend::impl::group_experts(std::uint32_t n_expert, std::uint32_t in_div, std::uint32_t pairs, std::uint32_t chunk) {
  record_moe_group(n_expert, in_div, pairs, chunk);  // the grouping reads only n_expert and pairs
  return std::min(moe_max_chunks, div_up(pairs, chunk) + n_expert);
}

void backend::impl::record_pair_swiglu(const tensor& g, const tensor& u, std::uint32_t pairs) {
  const elementwise_pc ep{g.cols, g.off, g.stride, u.off, u.stride, g.off, g.stride};
  const binding eb[] = {bind(g, false), bind(g, false), bind(u, false), bind(g, true)};
  dispatch(elementwise_req("OP_SWIGLU"), eb, &ep, sizeof ep, div_up(g.cols, wg), pairs);
  wrote(g);
}

void backend::impl::record_moe_small(const moe_weights& mw, const tensor& in, std::uint32_t in_div, std::uint32_t pairs,
                                     std::uint32_t n_expert, const tensor& g, const tensor& u, const tensor& y) {
  const std::uint32_t chunks = group_experts(n_expert, in_div, pairs, mms_moe_chunk);
  record_f16_rows(in, pairs, moe_xh, in_div);  // each pair's input row, as f16, in expert order
  record_mm_small_experts(*mw.gate_exps, g, false, pairs, chunks);  // rows in expert order
  record_mm_small_experts(*mw.up_exps, u, false, pairs, chunks);
  record_pair_swiglu(g, u, pairs);
  record_f16_rows(g, pairs, moe_xh);
  record_mm_small_experts(*mw.down_exps, y, true, pairs, chunks);  // each pair's row back in place for the combine
}

bool backend::impl::mmq_ok(gguf::type_id t, std::uint64_t K) const {
  return mmq_layout && mmq_moe && detail::has_mmq_unit(t) && K % 64 == 0 && K <= max_k;
}

std::uint32_t kernel_variants::mmq_chunk_for(std::uint32_t pairs, std::uint32_t n_expert) const {
  if (mmq_moe_chunk) return mmq_moe_chunk;
  const std::uint32_t per_expert = pairs / std::max<std::uint32_t>(1, n_expert);
  return per_expert >= 24 ? 64 : per_expert >= 12 ? 32 : 16;
}

mma2_tile kernel_variants::mmq_moe_tile(std::uint32_t chunk) const {
  if (mmq_moe_shape.bm) return {mmq_moe_shape.bm, chunk, mmq_moe_shape.wm, mmq_moe_shape.wn};
  return {128, chunk, 32, std::max<std::uint32_t>(16, chunk / 2)};
}

pipeline_request kernel_variants::mmq_req(gguf::type_id t, const mma2_tile& s, bool grouped, bool split) const {
  std::vector<std::pair<std::string, std::string>> d{
      {"WG", std::to_string(s.bm / s.wm * (s.bn / s.wn) * 32)}, {"COOPMAT", "1"}, {"MMQ", "1"},
      {"BM", std::to_string(s.bm)}, {"BN", std::to_string(s.bn)}, {"WM", std::to_string(s.wm)},
      {"WN", std::to_string(s.wn)}, {"MMA_DR", mmq_layout->row_offsets}, {"MMA_DC", mmq_layout->col_offsets}};
  if (grouped) d.emplace_back("MOE_GROUPED", "1");
  if (split) d.emplace_back("SPLIT_K", "1");
  return req("mul_mmq", t, std::move(d), grouped ? 5 : 4);
}

void backend::impl::record_mmq_dense(const pending_matmul& m) {
  const weight& w = *m.w;
  const std::uint32_t K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]), n = m.x.rows;
  const mma2_tile t = mmq_dense_tile(n);
  const std::uint32_t sl = quantize_input(m.x, nullptr, 0.0f);
  const std::uint32_t tiles = div_up(N, t.bm) * div_up(n, t.bn), units = K / 64;
  // Splits until split_target workgroups (as k_splits), each at least 8 units (512) of K long.
  std::uint32_t splits = split_k ? std::min<std::uint32_t>({div_up(split_target, tiles), 8, units / 8}) : 1;
  while (splits > 1 && std::uint64_t(splits) * n * N > mm_parts_floats) --splits;
  if (!mm_parts || splits < 2) {
    const mmq_pc pc{K, N, n, std::uint32_t(w.row_bytes), 0, max_k / 16, 0, max_k / 32, m.y.off, m.y.stride};
    const binding b[] = {bind_weight(w), bind_id(xq[sl], false), bind_id(xs[sl], false), bind(m.y, true)};
    dispatch(mmq_req(w.type, t, false), b, &pc, sizeof pc, div_up(N, t.bm), div_up(n, t.bn));
    wrote(m.y);
    return;
  }
  const std::uint32_t chunk = div_up(units, splits) * 64, used = div_up(K, chunk);
  const mmq_pc pc{K, N, n, std::uint32_t(w.row_bytes), 0, max_k / 16, 0, max_k / 32, 0, N, 0, 0, 1, chunk, n * N};
  const binding b[] = {bind_weight(w), bind_id(xq[sl], false), bind_id(xs[sl], false), bind_id(mm_parts, true)};
  dispatch3(mmq_req(w.type, t, false, true), b, &pc, sizeof pc, div_up(N, t.bm), div_up(n, t.bn), used);
  record_split_sum(mm_parts, N, n, used, m.y, 0);
  wrote(m.y);
}

void backend::impl::record_moe_mmq(const moe_weights& mw, const tensor& in, std::uint32_t in_div, std::uint32_t pairs,
                                   std::uint32_t n_expert, const tensor& g, const tensor& u, const tensor& y) {
  const std::uint32_t chunk = mmq_chunk_for(pairs, n_expert);
  const std::uint32_t chunks = group_experts(n_expert, in_div, pairs, chunk);
  const mma2_tile t = mmq_moe_tile(chunk);
  // Pair p's activations are int8 row p / div of the slot; its output goes to row p of out.
  auto gemm = [&](const weight& w, std::uint32_t slot, std::uint32_t div, const tensor& out) {
    enter_expert(w);
    const std::uint32_t K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]);
    const mmq_pc pc{K, N, pairs, std::uint32_t(w.row_bytes), 0, max_k / 16, 0, max_k / 32, out.off, out.stride,
                    std::uint32_t(w.row_bytes * w.ne[1]), moe_sorted_off, div};
    const binding b[] = {bind_weight(w), bind_id(xq[slot], false), bind_id(xs[slot], false), bind(out, true),
                         bind_id(moe_groups, false)};
    dispatch(mmq_req(w.type, t, true), b, &pc, sizeof pc, div_up(N, t.bm), chunks);
    wrote(out);
  };
  const std::uint32_t sl = quantize_input(in, nullptr, 0.0f);
  gemm(*mw.gate_exps, sl, in_div, g);
  gemm(*mw.up_exps, sl, in_div, u);
  record_pair_swiglu(g, u, pairs);
  if (mmq_ok(*mw.down_exps)) {
    gemm(*mw.down_exps, quantize_input(g, nullptr, 0.0f), 1, y);
  } else {  // mul_mm_small's chunks, the pairs' rows as f16 in that order, written back to their rows
    const std::uint32_t small_chunks = group_experts(n_expert, in_div, pairs, mms_moe_chunk);
    record_f16_rows(g, pairs, moe_xh, 1);
    record_mm_small_experts(*mw.down_exps, y, true, pairs, small_chunks);
  }
}

pipeline_request backend::impl::expert_mmvq_req(const weight& w, std::uint32_t K, std::uint32_t N, bool swiglu, bool qout,
                                                bool grouped) const {
  // n_cols: the stored row's width (whether its blocks are stored in groups), not the K read.
  auto r = mmvq_req(w.type, grouped ? moe_chunk : 1, w.ne[0], N, swiglu, false, true, qout, grouped);
  // Short expert rows (mmvq_short_lpr, default 8): lane groups of N lanes, so a 768-wide row's 12
  // units do not leave 20 of 32 lanes idle.
  if (const std::uint32_t sg = ctx.info().subgroup_size;
      mmvq_short_lpr && K <= 1024 && sg % mmvq_short_lpr == 0 && mmvq_short_lpr < sg) {
    std::erase_if(r.defines, [](const auto& d) { return d.first == "SG_LPR"; });
    for (auto& [k, v] : r.defines)
      if (k == "LPR") v = std::to_string(mmvq_short_lpr);
    r.defines.emplace_back("SG_CLUSTER", "1");
    if (!qout && !grouped) set_mmvq_shape(r, mmvq_short_expert);
  }
  if (mmvq_expert_forced && !qout && !grouped) set_mmvq_shape(r, mmvq_expert);
  return r;
}

void backend::impl::record_mmvq_ids(const weight& w, const weight* up, std::uint32_t sl, std::uint32_t in_div, std::uint32_t pairs,
                                    const tensor& y, bool qout, std::uint32_t chunks, const std::optional<topk_in_t>& topk,
                                    expert_cols part) {
  enter_expert(w);  // a streamed block's item: its copy landed, the next one's issued
  const bool grouped = chunks > 0;
  const std::uint32_t K = part.k ? part.k : std::uint32_t(w.ne[0]), N = part.rows ? part.rows : std::uint32_t(w.ne[1]);
  mmvq_pc pc{K, N, pairs, std::uint32_t(w.row_bytes), 0, max_k / 16, 0,
             max_k / 32, y.off, y.stride, 0, 0, 0, std::uint32_t(w.row_bytes * w.ne[1]), grouped ? moe_sorted_off : 0,
             in_div};
  const binding wb = up ? bind_gate_up(w, *up, pc.up_off) : bind_weight(w);
  const std::uint32_t so = sl ^ 1u;
  std::vector<binding> b{wb, bind_id(xq[sl], false), bind_id(xs[sl], false), bind(y, true), bind(y, false),
                         bind_id(grouped ? moe_groups : moe_ids, false), bind_id(xq[so], qout), bind_id(xs[so], qout)};
  auto r = expert_mmvq_req(w, K, N, up != nullptr, qout, grouped);
  if (topk && !grouped) {  // the top-k prologue (TOPK_IN below)
    if (topk_lab) r.defines.emplace_back("TOPK_LAB", std::to_string(topk_lab));  // lab: wrong results
    // as every other top-k of the step
    if (const std::uint32_t s = topk_lean_slots(topk->n_expert, in_div)) r.defines.emplace_back("TOPK_LEAN", std::to_string(s));
  }
  const std::uint32_t gx = div_up(N, mmvq_rows_per_wg(r)), gy = grouped ? chunks : pairs;
  if (topk && !grouped && topk->parts) {
    // The router's parts and NORM_OUT's codes: bindings 8-9 unused, 10 the input's block sums of
    // x^2 (RMS_IN), 11-13 moe_topk.glsl's ids, weights and parts, 14 the sums again.
    const std::uint32_t E = topk->n_expert, blocks = K / 32, n_parts = topk->n_parts ? topk->n_parts : blocks;
    const auto wg = std::find_if(r.defines.begin(), r.defines.end(), [](const auto& d) { return d.first == "WG"; });
    const std::uint32_t threads = wg == r.defines.end() ? 64 : std::uint32_t(std::stoul(wg->second));
    // Threads an expert quad's parts: every thread a quad of one segment where the workgroup allows.
    const std::uint32_t segs = std::clamp<std::uint32_t>(std::min(threads / std::max<std::uint32_t>(1, E / 4), n_parts), 1, 8);
    r.defines.insert(r.defines.end(), {{"TOPK_IN", "10"}, {"RMS_IN", std::to_string(K)}, {"TOPK_PARTS", std::to_string(blocks)},
                                       {"TOPK_SEGS", std::to_string(segs)}});
    if (n_parts != blocks) r.defines.emplace_back("TOPK_LPARTS", std::to_string(n_parts));
    const bool lean = std::any_of(r.defines.begin(), r.defines.end(), [](const auto& d) { return d.first == "TOPK_LEAN"; });
    if (topk_direct && lean && topk->n_parts && n_parts <= 4) r.defines.emplace_back("TOPK_DIRECT", "1");
    if (topk->sigmoid) r.defines.emplace_back("ROUTER_SIGMOID", "1");
    if (router_parts_lab && !topk->n_parts) r.defines.emplace_back("ROUTER_PARTS_LAB", "1");
    b.insert(b.end(), {bind(y, false), bind(y, false), bind_id(rms_sq[sl], false), bind_id(moe_ids, true), bind_id(moe_wts, true),
                       bind_id(topk->parts_buf, false), bind_id(rms_sq[sl], false)});
    add_cache_lookup(r, b, w, up, false);
    r.bindings = std::uint32_t(b.size());
    const struct {
      mmvq_pc m;
      std::uint32_t n_expert, l_off, l_stride;
      float eps;
    } tp{pc, E, 0, n_parts * E, topk->eps};
    dispatch(r, b, &tp, sizeof tp, gx, gy);
  } else if (topk && !grouped) {  // bindings 10-12: moe_topk.glsl's ids (written), weights, logits; 8-9 unused
    r.defines.emplace_back("TOPK_IN", "9");
    if (topk->sigmoid) r.defines.emplace_back("ROUTER_SIGMOID", "1");
    b.insert(b.end(), {bind(y, false), bind(y, false), bind_id(moe_ids, true), bind_id(moe_wts, true), bind(topk->logits, false)});
    add_cache_lookup(r, b, w, up, false);
    r.bindings = std::uint32_t(b.size());
    const struct {
      mmvq_pc m;
      std::uint32_t n_expert, l_off, l_stride;
    } tp{pc, topk->n_expert, topk->logits.off, topk->logits.stride};
    dispatch(r, b, &tp, sizeof tp, gx, gy);
  } else {
    add_cache_lookup(r, b, w, up, !up && is_down_experts(w));
    r.bindings = std::uint32_t(b.size());
    dispatch(r, b, &pc, sizeof pc, gx, gy);
  }
  wrote(y);
  if (qout) {
    quantized[so] = quantized_input{y, nullptr, 0.0f};
    last_slot = sl;
  }
}

bool backend::impl::adjacent(const weight& g, const weight& u) const {
  const auto& ge = weights.at(g.id);
  const auto& ue = weights.at(u.id);
  return g.type == u.type && g.row_bytes == u.row_bytes && g.ne[1] == u.ne[1] && g.ne[2] == u.ne[2] &&
         ge.chunk == ue.chunk && ue.offset > ge.offset && ue.offset - ge.offset < (1ull << 32);
}

}  // namespace strata::gpu
