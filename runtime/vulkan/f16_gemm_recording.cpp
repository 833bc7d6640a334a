// The prompt steps' f16 tensor-core GEMM (mul_mm_f16.glsl): where its f16 weights come from (an
// F16 file's, Q4_K read in place, the f16 copies of f16_copies.cpp, or the two-slot scratch
// dequant_f16 fills ahead of each GEMM, scratch_schedule.hpp), and gate, up and the SwiGLU as one GEMM.
#include "backend_impl.hpp"

#include <algorithm>
#include <string>
#include <tuple>

#include "strata/core/error.hpp"

namespace strata::gpu {
using namespace detail;

void backend::impl::record_mul_mm_f16(const pending_matmul& m) {
  const weight& w = *m.w;
  const std::uint32_t K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]), n = m.x.rows;
  const mma2_tile t = mm3_tile_for(n);
  const bool xf16 = mm_xh && K <= mm_xh_cols && n <= max_rows && K % 8 == 0;
  if (!xf16 && (m.x.off % 4 || m.x.stride % 4))  // the kernel reads f32 rows as vec4
    throw error("matmul '" + std::string(w.name) + "': input rows must start at multiples of 4 floats");
  const f16_copy* copy = n >= f16_copy_min_tokens ? f16_copy_of(w.id) : nullptr;  // read instead of expanding (f16_copies.cpp)
  const bool in_place = !copy && xf16 && mm3_in_place(w.type, K, n);
  const gguf::type_id w_read = in_place ? w.type : gguf::type_id::f16;  // the format the GEMM reads
  const pipeline_request g = mm3_req(t, xf16, w_read);
  std::uint32_t x_off = m.x.off, x_stride = m.x.stride;
  binding xb = bind(m.x, false);
  if (xf16) {
    std::tie(x_off, x_stride) = f16_input(m.x);
    xb = bind_id(mm_xh, false);
  }
  // One GEMM over rows [r0, r0 + rows) of the weights bound as wb, split over K where its tiles
  // alone leave SMs idle; `beside` records what may run with it (before a split's sum). With a
  // residual (add() joined it, matmul() held the GEMM for that), y = residual + product.
  const tensor* res = m.residual ? &*m.residual : nullptr;
  auto gemm = [&](const binding& wb, std::uint32_t r0, std::uint32_t rows, std::uint32_t row_bytes, auto&& beside) {
    std::uint32_t splits = k_splits(t, div_up(rows, t.bm) * div_up(n, t.bn), K);
    while (splits > 1 && std::uint64_t(splits) * n * rows > mm_parts_floats) --splits;
    if (splits < 2) {
      mm_f16_pc pc{K, rows, n, 0, x_off, x_stride, m.y.off + r0, m.y.stride, row_bytes};
      const binding b[] = {wb, xb, bind(m.y, true), res ? bind(*res, false) : xb};
      pipeline_request gr = g;
      if (res) {
        pc.r_off = res->off + r0;
        pc.r_stride = res->stride;
        gr.defines.emplace_back("RESIDUAL", "1");
        gr.bindings = 4;
      }
      const std::span<const binding> bs(b, res ? 4 : 3);
      if (n > t.bn && tok_fast_gemm(w_read == gguf::type_id::f16, K, rows)) {  // token tiles fastest
        gr.defines.emplace_back("TOK_FAST", "1");
        dispatch(gr, bs, &pc, sizeof pc, div_up(n, t.bn), div_up(rows, t.bm));
      } else {
        dispatch(gr, bs, &pc, sizeof pc, div_up(rows, t.bm), div_up(n, t.bn));
      }
      beside();
      return;
    }
    const std::uint32_t chunk = div_up(div_up(K, splits), 64) * 64, used = div_up(K, chunk);
    const mm_f16_pc pc{K, rows, n, 0, x_off, x_stride, 0, rows, row_bytes, chunk, n * rows};
    const binding b[] = {wb, xb, bind_id(mm_parts, true)};
    dispatch3(mm3_req(t, xf16, w_read, true), b, &pc, sizeof pc, div_up(rows, t.bm),
              div_up(n, t.bn), used);
    beside();
    record_split_sum(mm_parts, rows, n, used, m.y, r0, res);
  };
  if (w.type == gguf::type_id::f16 || in_place || copy) {  // weights start section_align (256 bytes) apart
    gemm(copy ? bind_f16_copy(*copy, 0, K) : bind_weight(w), 0, N, in_place ? std::uint32_t(w.row_bytes) : 0u, [] {});
    wrote(m.y);
    return;
  }
  const std::uint32_t slice = scratch_slice_rows(K);
  for (std::uint32_t r0 = 0; r0 < N; r0 += slice) {
    const scratch_unit u{w.id, r0, std::min(slice, N - r0)};
    const auto [slot, expand] = scratch_plan.take(u);
    if (expand) record_expansion(u, slot);
    if (r0 == 0) scratch_plan.multiplied(w.name);
    // The next rows' expansion in the same level as this GEMM: the other slot was last read by
    // the GEMM before this one, which the barrier this one waits for (its slot was written) ends.
    gemm(bind_id(slot, false), r0, u.rows, 0, [&] {
      if (const auto next = scratch_next(w, u, n)) record_expansion(*next, scratch_plan.prepare(*next));
    });
  }
  wrote(m.y);
}

std::uint64_t backend::scratch_hits() const { return p_->scratch_plan.hits(); }

std::uint32_t matmul_scratch::scratch_slice_rows(std::uint64_t K) const {
  return std::uint32_t(std::max<std::uint64_t>(128, mm_scratch_halves / K / 128 * 128));
}

std::uint32_t matmul_scratch::swiglu_part_rows(std::uint64_t K, std::uint64_t F) const {
  return std::uint32_t(std::min<std::uint64_t>(F, mm_scratch_halves / (2 * K) / 64 * 64));
}

// u's rows into `slot`; a pair's up rows right after gate's. Up's write is `disjoint`: gate's,
// just before, already waits for the slot's earlier readers and makes the slot's next reader
// wait for both (tracked, it would put a barrier between the halves, one that waits for the GEMM
// the expansion is meant to run beside).
void backend::impl::record_expansion(const scratch_unit& u, std::uint32_t slot) {
  for (const std::uint32_t id : {u.weight, u.up}) {
    if (id == ~0u) continue;
    const auto& t = *weights.at(id).info;
    weight w;
    w.id = id;
    const std::uint32_t o_off = id == u.up ? std::uint32_t(u.rows * (t.ne[0] / 8)) : 0u;
    const dequant_f16_pc dq{std::uint32_t(t.ne[0]), std::uint32_t(t.row_bytes()), u.r0, u.rows, o_off};
    binding db[] = {bind_weight(w), bind_id(slot, true)};
    db[1].disjoint = id == u.up;
    dispatch(dequant_req(t.type), db, &dq, sizeof dq, div_up(std::uint64_t(u.rows) * (t.ne[0] / 16), 256));
  }
}

// What to expand while u's GEMM runs: u's weight's next slice, or the first slice of the weight
// the schedule expects next, if that one goes through the scratch at n tokens too and its bytes
// are where they stay (not a streamed ring slot or an expert cache slot, filled later).
std::optional<scratch_unit> backend::impl::scratch_next(const weight& w, const scratch_unit& u, std::uint32_t n) const {
  if (scratch_plan.slot(0) == scratch_plan.slot(1)) return std::nullopt;  // one slot (STRATA_VK_MM3_AHEAD=0)
  if (u.r0 + u.rows < w.ne[1])
    return scratch_unit{w.id, u.r0 + u.rows, std::min<std::uint32_t>(u.rows, std::uint32_t(w.ne[1]) - u.r0 - u.rows), u.up};
  const auto next = scratch_plan.next(w.name);
  if (!next) return std::nullopt;
  const auto [id, up] = *next;
  if (n >= f16_copy_min_tokens && f16_copy_of(id)) return std::nullopt;  // its GEMM reads its f16 copy
  const auto resident = [&](std::uint32_t i) { return impl::resident(weights.at(i)); };
  const auto& t = *weights.at(id).info;
  const std::uint64_t K = t.ne[0];
  if (!resident(id) || (up != ~0u && !resident(up)) || t.ne[2] != 1 || t.ne[1] < 2 || K % 16 ||
      t.type == gguf::type_id::f16 || !f16_operands_ok(t.type))
    return std::nullopt;
  const bool xf16 = mm_xh && K <= mm_xh_cols && n <= max_rows && K % 8 == 0;
  if (xf16 && mm3_in_place(t.type, K, n)) return std::nullopt;
  if (up != ~0u) {  // a pair multiplied as one SwiGLU GEMM, if it still is
    if (!mm3_swiglu_ok(t.type, K, t.ne[1], n) || weights.at(up).info->type != t.type) return std::nullopt;
    return scratch_unit{id, 0, swiglu_part_rows(K, t.ne[1]), up};
  }
  return scratch_unit{id, 0, std::min<std::uint32_t>(scratch_slice_rows(K), std::uint32_t(t.ne[1]))};
}

// Gate, up and the SwiGLU as one GEMM (mm3_swiglu_ok, swiglu_joins_pair): 2F interleaved rows of
// the range bound over gate .. up; out = silu(gate) * up as f32 and its f16 copy in the region of
// mm_xh the input is not in, where the down matmul reads it.
void backend::impl::record_mm3_swiglu(const pending_matmul& m) {
  const weight& w = *m.w;
  const std::uint32_t K = std::uint32_t(w.ne[0]), F = std::uint32_t(w.ne[1]), n = m.x.rows;
  const mma2_tile t = mm3_tile_for(n);
  const auto [x_off, x_stride] = f16_input(m.x);
  if (f16_pair_copy(w, *m.up, n) || !mm3_in_place(w.type, K, n)) return record_mm3_swiglu_scratch(m, x_off, x_stride);
  mm_f16_pc pc{K, 2 * F, n, 0, x_off, x_stride, m.y.off, m.y.stride, std::uint32_t(w.row_bytes)};
  const binding wb = bind_gate_up(w, *m.up, pc.up_off);
  pc.h_off = x_off == 0 ? xh_swiglu_at : 0;
  pc.h_stride = F;
  binding b[] = {wb, bind_id(mm_xh, false), bind(m.y, true), bind_id(mm_xh, true)};
  // Parts of at most swiglu_part_bytes of weights, rows fastest in each, so a weight tile's next
  // token tile comes while it is still in L2 (H200, qwen3-8b pp512: one dispatch over both
  // matrices -0.5% against the separate matmuls, 16 MB parts +0.6%; bench/RESULTS.md session 30).
  // The parts write disjoint rows and read what the first part's barrier covers: no barrier
  // between them.
  const std::uint32_t rows = 2 * F;
  const std::uint64_t fit = std::min<std::uint64_t>(rows, swiglu_part_bytes / std::max<std::uint64_t>(1, w.row_bytes));
  const std::uint32_t per = std::max<std::uint32_t>(t.bm, std::uint32_t(fit) / t.bm * t.bm);
  pipeline_request g = mm3_req(t, true, w.type, false, true);
  const bool tok_fast = n > t.bn && tok_fast_gemm(false, K, rows);
  if (tok_fast) g.defines.emplace_back("TOK_FAST", "1");
  for (std::uint32_t r0 = 0; r0 < rows; r0 += per) {
    pc.row0 = r0;
    const std::uint32_t row_tiles = div_up(std::min(per, rows - r0), t.bm), tok_tiles = div_up(n, t.bn);
    if (tok_fast) dispatch(g, b, &pc, sizeof pc, tok_tiles, row_tiles);
    else dispatch(g, b, &pc, sizeof pc, row_tiles, tok_tiles);
    for (std::size_t i = 1; i < std::size(b); ++i) b[i].disjoint = true;
    b[0].weights = false;  // the profile counts the range's bytes once, not once a part
  }
  wrote(m.y);
  holds_f16(m.y, pc.h_off);
}

// The same over the scratch: parts of P rows of gate and P of up expanded into one slot (the next
// part, or the next GEMM's weights, into the other while this part multiplies). Each part's
// dispatch waits for its slot's expansion, so parts are ordinary bindings, not disjoint ones.
// With f16 copies of gate and up in one buffer (f16_copies.cpp) the same parts read the copies.
void backend::impl::record_mm3_swiglu_scratch(const pending_matmul& m, std::uint32_t x_off, std::uint32_t x_stride) {
  const weight& w = *m.w;
  const std::uint32_t K = std::uint32_t(w.ne[0]), F = std::uint32_t(w.ne[1]), n = m.x.rows;
  const mma2_tile t = mm3_tile_for(n);
  mm_f16_pc pc{K, 2 * F, n, 0, x_off, x_stride, m.y.off, m.y.stride, 0};
  pc.h_off = x_off == 0 ? xh_swiglu_at : 0;
  pc.h_stride = F;
  pipeline_request g = mm3_req(t, true, gguf::type_id::f16, false, true);
  const bool tok_fast = n > t.bn && tok_fast_gemm(true, K, 2 * F);
  if (tok_fast) g.defines.emplace_back("TOK_FAST", "1");
  const std::uint32_t part = swiglu_part_rows(K, F);
  if (const f16_copy* gc = f16_pair_copy(w, *m.up, n)) {
    // Parts as the scratch's where there is one, else of about swiglu_part_bytes: 64-row multiples.
    const std::uint32_t copy_part =
        part ? part : std::uint32_t(std::min<std::uint64_t>(F, std::max<std::uint64_t>(64, swiglu_part_bytes / (4ull * K) / 64 * 64)));
    pc.up_off = std::uint32_t(std::uint64_t(F) * K * 2);
    binding b[] = {{}, bind_id(mm_xh, false), bind(m.y, true), bind_id(mm_xh, true)};
    for (std::uint32_t g0 = 0; g0 < F; g0 += copy_part) {
      pc.row0 = 2 * g0;
      b[0] = bind_f16_copy(*gc, g0, K);
      if (g0) b[0].weights = false;  // the profile counts the pair's bytes once, not once a part
      const std::uint32_t row_tiles = div_up(2 * std::min(copy_part, F - g0), t.bm), tok_tiles = div_up(n, t.bn);
      if (tok_fast) dispatch(g, b, &pc, sizeof pc, tok_tiles, row_tiles);
      else dispatch(g, b, &pc, sizeof pc, row_tiles, tok_tiles);
      // The parts write disjoint rows and read what the first part's barrier covers: no barrier between them.
      for (std::size_t i = 1; i < std::size(b); ++i) b[i].disjoint = true;
    }
    wrote(m.y);
    holds_f16(m.y, pc.h_off);
    return;
  }
  for (std::uint32_t g0 = 0; g0 < F; g0 += part) {
    const scratch_unit u{w.id, g0, std::min(part, F - g0), m.up->id};
    const auto [slot, expand] = scratch_plan.take(u);
    if (expand) record_expansion(u, slot);
    if (g0 == 0) scratch_plan.multiplied(w.name, m.up->name);
    pc.row0 = 2 * g0;
    pc.up_off = u.rows * K * 2;
    const binding b[] = {bind_id(slot, false), bind_id(mm_xh, false), bind(m.y, true), bind_id(mm_xh, true)};
    const std::uint32_t row_tiles = div_up(2 * u.rows, t.bm), tok_tiles = div_up(n, t.bn);
    if (tok_fast) dispatch(g, b, &pc, sizeof pc, tok_tiles, row_tiles);
    else dispatch(g, b, &pc, sizeof pc, row_tiles, tok_tiles);
    if (const auto next = scratch_next(w, u, n)) record_expansion(*next, scratch_plan.prepare(*next));
  }
  wrote(m.y);
  holds_f16(m.y, pc.h_off);
}

}  // namespace strata::gpu
