// One-token matvecs of one input joined into one integer matvec dispatch:
// - the stack (mmvq.glsl STACK_OUT; on, STRATA_VK_MMVQ_STACK=0 turns it off): two or three
//   matrices of one format and row width (decode's Q, K and V) as one matvec over their rows
//   stacked, each workgroup's rows inside one matrix;
// - the pair (mmvq.glsl PAIR_OUT; off, it lost on the H100: STRATA_VK_MMVQ_PAIR=1): two matrices of
//   one format and shape stored adjacently (decode's K and V, as a gate/up pair), each lane group
//   computing row r of both.
// Either way every row's sum is the one its own dispatch computes: fewer dispatches in the
// projections' level, the same logits.
#include "backend_impl.hpp"

#include <algorithm>
#include <vector>

namespace strata::gpu {
using namespace detail;

bool backend::impl::mmvq_plain_one_token(const pending_matmul& m) const {
  const weight_entry& e = weights.at(m.w->id);
  return !m.residual && !m.up && !m.gemm_pair && !m.tail && !m.norm_out && !m.topk && !m.router && m.x.rows == 1 &&
         m.w->ne[2] == 1 && e.stream < 0 && e.xstream < 0 && e.host < 0 && e.cache < 0 && use_mmvq(*m.w, 1) &&
         m.y.buf != m.x.buf;
}

namespace {
bool same_norm(const pending_matmul& a, const pending_matmul& b) {
  return a.norm.has_value() == b.norm.has_value() && (!a.norm || (a.norm->y == b.norm->y && a.norm->w == b.norm->w));
}
}  // namespace

bool backend::impl::mmvq_pair_ok(const pending_matmul& a, const pending_matmul& b) const {
  return mmvq_pair && mmvq_plain_one_token(a) && mmvq_plain_one_token(b) && same(a.x, b.x) && same_norm(a, b) &&
         a.y.buf != b.y.buf && adjacent(*a.w, *b.w);
}

// The plain form's input slot, bindings 0-7 (y and y2 at 3 and 4) and, with the norm folded in
// (RMS_IN), bindings 8-10, as record_mmvq binds them.
backend::impl::joined_input backend::impl::joined_mmvq_input(const pending_matmul& a, const binding& w, const tensor& y,
                                                             const tensor& y2) {
  joined_input in;
  in.slot = a.norm ? quantize_input(a.norm->x, a.norm->w, a.norm->eps, true) : quantize_input(a.x, nullptr, 0.0f);
  in.rms_in = quantized[in.slot] && quantized[in.slot]->raw;
  const std::uint32_t sl = in.slot, so = sl ^ 1u;
  in.b = {w, bind_id(xq[sl], false), bind_id(xs[sl], false), bind(y, true), bind(y2, true), bind_id(xq[sl], false),
          bind_id(xq[so], false), bind_id(xs[so], false)};
  if (in.rms_in) in.b.insert(in.b.end(), {bind_id(xq[sl], false), bind_id(rms_sq[so], false), bind_id(rms_sq[sl], false)});
  return in;
}

// As record_mmvq's plain form, for both: rows r of a and of b in one lane group (mmvq.glsl PAIR_OUT).
void backend::impl::record_mmvq_pair(const pending_matmul& a, const pending_matmul& b) {
  const weight& w = *a.w;
  mmvq_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), 1, std::uint32_t(w.row_bytes), 0, max_k / 16, 0, max_k / 32,
             a.y.off, a.y.stride, b.y.off, b.y.stride, 0, 0, 0, 1};
  const binding wb = bind_gate_up(w, *b.w, pc.up_off);
  const joined_input in = joined_mmvq_input(a, wb, a.y, b.y);
  auto r = mmvq_req(w.type, 1, w.ne[0], w.ne[1], false, false, false, false, false, false, false, in.rms_in ? std::uint32_t(w.ne[0]) : 0u);
  r.defines.emplace_back("PAIR_OUT", "1");
  // The format's own shape, not dense Q8_0's 32-row one-token workgroups: K and V's 1,024 rows
  // would be 32 workgroups of twice the bytes, the level's longest beside Q's.
  set_mmvq_shape(r, mmvq_shape(w.type, w.ne[1]));
  const std::uint32_t gx = div_up(w.ne[1], mmvq_rows_per_wg(r));
  if (in.rms_in) {
    const struct {
      mmvq_pc m;
      float eps;
    } rp{pc, a.norm->eps};
    dispatch(r, in.b, &rp, sizeof rp, gx, 1);
  } else {
    dispatch(r, in.b, &pc, sizeof pc, gx, 1);
  }
  wrote(a.y);
  wrote(b.y);
}

// The stack's segments in the order of their weights' offsets (the first at the bound range's
// start: the kernel reads segment 0 at offset 0).
backend::impl::stack_order backend::impl::mmvq_stack_order(std::span<const pending_matmul> ms) const {
  stack_order o{};
  o.n = std::min<std::size_t>(ms.size(), o.m.size());
  const auto at = [&](const pending_matmul* m) { return weights.at(m->w->id).offset; };
  for (std::size_t i = 0; i < o.n; ++i) {  // insertion by offset (at most three)
    std::size_t j = i;
    for (; j > 0 && at(o.m[j - 1]) > at(&ms[i]); --j) o.m[j] = o.m[j - 1];
    o.m[j] = &ms[i];
  }
  for (std::size_t i = 0; i < o.n; ++i) {
    const weight_entry& e = weights.at(o.m[i]->w->id);
    o.at[i] = e.offset - at(o.m[0]);
    o.rows[i] = std::uint64_t(o.m[i]->w->ne[1]);
    o.bytes = std::max(o.bytes, o.at[i] + e.bytes);
  }
  return o;
}

// The stack's request (its shape from the rows of all its matrices); nullopt when a segment's
// rows are not whole workgroups of it (a workgroup's rows would span two matrices).
std::optional<pipeline_request> backend::impl::mmvq_stack_req(const stack_order& o, bool rms_in) const {
  const weight& w = *o.m[0]->w;
  auto r = mmvq_req(w.type, 1, w.ne[0], o.rows[0] + o.rows[1] + o.rows[2], false, false, false, false, false, false, false,
                    rms_in ? std::uint32_t(w.ne[0]) : 0u);
  if (mmvq_stack_shape_forced) set_mmvq_shape(r, mmvq_stack_shape);
  const std::uint32_t per = mmvq_rows_per_wg(r);
  for (std::size_t i = 0; i + 1 < o.n; ++i)
    if (o.rows[i] % per != 0) return std::nullopt;
  r.defines.emplace_back("STACK_OUT", "1");
  r.bindings = 12;  // Y3 at 11, after RMS_IN's 8-10 (bound either way)
  return r;
}

bool backend::impl::mmvq_stack_ok(std::span<const pending_matmul> ms) const {
  if (!mmvq_stack || ms.size() < 2 || ms.size() > 3) return false;
  const stack_order o = mmvq_stack_order(ms);
  const pending_matmul& a = *o.m[0];
  const std::uint32_t chunk = weights.at(a.w->id).chunk;
  for (std::size_t i = 0; i < o.n; ++i) {
    const pending_matmul& m = *o.m[i];
    if (!mmvq_plain_one_token(m) || !same(m.x, a.x) || !same_norm(m, a) || m.w->type != a.w->type ||
        m.w->row_bytes != a.w->row_bytes || m.w->ne[0] != a.w->ne[0] || weights.at(m.w->id).chunk != chunk)
      return false;
    for (std::size_t j = 0; j < i; ++j)
      if (m.y.buf == o.m[j]->y.buf) return false;  // distinct outputs (one may not overwrite another's)
  }
  // One bound range with 32-bit byte offsets, the rows' counts 32-bit push constants.
  if (o.bytes >= (1ull << 32) || o.rows[0] + o.rows[1] + o.rows[2] >= (1ull << 31)) return false;
  // The shape, and so whether segments are whole workgroups, is the same with RMS_IN or without.
  return mmvq_stack_req(o, false).has_value();
}

// As record_mmvq's plain form over the matrices' rows stacked (mmvq.glsl STACK_OUT).
void backend::impl::record_mmvq_stack(std::span<const pending_matmul> ms) {
  const stack_order o = mmvq_stack_order(ms);
  const weight& w = *o.m[0]->w;
  binding wb = bind_weight(w);
  wb.range.bytes = o.bytes;
  const tensor &y = o.m[0]->y, &y2 = o.m[1]->y, &y3 = o.m[o.n - 1]->y;  // a stack of two has no third segment
  const auto u32 = [](std::uint64_t v) { return std::uint32_t(v); };  // within 32 bits (mmvq_stack_ok)
  mmvq_pc pc{u32(w.ne[0]), u32(o.rows[0] + o.rows[1] + o.rows[2]), 1, u32(w.row_bytes), 0, max_k / 16, 0, max_k / 32,
             y.off, y.stride, y2.off, y2.stride, u32(o.at[1]), u32(o.at[2]), u32(o.rows[0]), u32(o.rows[0] + o.rows[1])};
  const joined_input in = joined_mmvq_input(*o.m[0], wb, y, y2);
  std::vector<binding> b = in.b;
  if (!in.rms_in) b.insert(b.end(), {bind_id(xq[in.slot], false), bind_id(xq[in.slot], false), bind_id(xq[in.slot], false)});
  b.push_back(bind(y3, true));
  const pipeline_request r = *mmvq_stack_req(o, in.rms_in);
  const std::uint32_t gx = div_up(pc.N, mmvq_rows_per_wg(r));
  if (in.rms_in) {
    const struct {
      mmvq_pc m;
      float eps;
      std::uint32_t y3_off, y3_stride;
    } rp{pc, o.m[0]->norm->eps, y3.off, y3.stride};
    dispatch(r, b, &rp, sizeof rp, gx, 1);
  } else {
    const struct {
      mmvq_pc m;
      std::uint32_t y3_off, y3_stride;
    } rp{pc, y3.off, y3.stride};
    dispatch(r, b, &rp, sizeof rp, gx, 1);
  }
  for (std::size_t i = 0; i < o.n; ++i) wrote(o.m[i]->y);
}

}  // namespace strata::gpu
