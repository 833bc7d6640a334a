// Decode's K and V projections as one integer matvec dispatch (STRATA_VK_MMVQ_PAIR=1,
// mmvq.glsl PAIR_OUT): two pending one-token matvecs of one input, format and shape, stored
// adjacently (as a gate/up pair), each lane group computing row r of both.
#include "backend_impl.hpp"

#include <vector>

namespace strata::gpu {
using namespace detail;

bool backend::impl::mmvq_pair_ok(const pending_matmul& a, const pending_matmul& b) const {
  const auto plain = [&](const pending_matmul& m) {
    const weight_entry& e = weights.at(m.w->id);
    return !m.residual && !m.up && !m.gemm_pair && !m.tail && !m.norm_out && !m.topk && !m.router && m.x.rows == 1 &&
           m.w->ne[2] == 1 && e.stream < 0 && e.xstream < 0 && e.host < 0 && e.cache < 0 && use_mmvq(*m.w, 1) &&
           m.y.buf != m.x.buf;
  };
  const bool same_norm = a.norm.has_value() == b.norm.has_value() && (!a.norm || (same(a.norm->y, b.norm->y) && a.norm->w == b.norm->w));
  return mmvq_pair && plain(a) && plain(b) && same(a.x, b.x) && same_norm && a.y.buf != b.y.buf && adjacent(*a.w, *b.w);
}

// As record_mmvq's plain form, for both: rows r of a and of b in one lane group (mmvq.glsl PAIR_OUT).
void backend::impl::record_mmvq_pair(const pending_matmul& a, const pending_matmul& b) {
  const weight& w = *a.w;
  const std::uint32_t sl = a.norm ? quantize_input(a.norm->x, a.norm->w, a.norm->eps, true) : quantize_input(a.x, nullptr, 0.0f);
  const bool rms_in = quantized[sl] && quantized[sl]->raw;
  mmvq_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), 1, std::uint32_t(w.row_bytes), 0, max_k / 16, 0, max_k / 32,
             a.y.off, a.y.stride, b.y.off, b.y.stride, 0, 0, 0, 1};
  const binding wb = bind_gate_up(w, *b.w, pc.up_off);
  const std::uint32_t so = sl ^ 1u;
  std::vector<binding> bs{wb, bind_id(xq[sl], false), bind_id(xs[sl], false), bind(a.y, true),
                          bind(b.y, true), bind_id(xq[sl], false), bind_id(xq[so], false), bind_id(xs[so], false)};
  if (rms_in) bs.insert(bs.end(), {bind_id(xq[sl], false), bind_id(rms_sq[so], false), bind_id(rms_sq[sl], false)});
  auto r = mmvq_req(w.type, 1, w.ne[0], w.ne[1], false, false, false, false, false, false, false, rms_in ? std::uint32_t(w.ne[0]) : 0u);
  r.defines.emplace_back("PAIR_OUT", "1");
  // The format's own shape, not dense Q8_0's 32-row one-token workgroups: K and V's 1,024 rows
  // would be 32 workgroups of twice the bytes, the level's longest beside Q's.
  set_mmvq_shape(r, mmvq_shape(w.type, w.ne[1]));
  const std::uint32_t gx = div_up(w.ne[1], mmvq_rows_per_wg(r));
  if (rms_in) {
    const struct {
      mmvq_pc m;
      float eps;
    } rp{pc, a.norm->eps};
    dispatch(r, bs, &rp, sizeof rp, gx, 1);
  } else {
    dispatch(r, bs, &pc, sizeof pc, gx, 1);
  }
  wrote(a.y);
  wrote(b.y);
}

}  // namespace strata::gpu
