#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "backend.hpp"
#include "backend_impl.hpp"
#include "strata/core/error.hpp"

// backend::attention: the decode and prompt attention kernels chosen per step shape and cache
// type (split / grouped / compressed / tensor-core / per-head), their merge and fused outputs.
namespace strata::gpu {
using namespace detail;

void backend::attention(const kv_state& kv, std::uint32_t layer, tensor q, const graph::attention_params& ap,
                        tensor out) {
  auto& P = *p_;
  if (P.replay) return;
  auto codes = std::exchange(P.encode, std::nullopt);  // attn_prep's codes: after this attention's kernel
  std::optional<impl::pending_encode> prep;  // attn_prep itself (f16/f32 caches): in this kernel or first
  if (codes && codes->head_ops) prep = std::exchange(codes, std::nullopt);
  const auto q_rot = std::exchange(P.q_rot_of, std::nullopt);  // attn_prep's rotated queries (Q_ROT), if of q
  const bool qrot_in = q_rot && *q_rot == q;
  P.prepare({q}, {out});
  P.encode = std::move(codes);
  P.encode_next = P.encode.has_value();
  if (ap.head_dim > 256 || ap.head_dim % 4)
    throw error("Vulkan attention supports head dimensions up to 256 in multiples of 4, the model has " +
                std::to_string(ap.head_dim));
  const auto& cfg = kv.config();
  const std::uint64_t B4 = std::uint64_t(P.max_rows) * 4;
  const auto& ring = kv.window_ring();
  attention_pc pc{ap.n_head, ap.n_head_kv, ap.head_dim, ap.chunk, q.off, q.stride, out.off, out.stride,
                  cfg.block_size, P.max_blocks, ap.scale, 0, 1, ring.rows ? cfg.full_precision_window : 0, ring.rows};
  // Decode: split the context over workgroups (flash-decoding) so a long context is not read
  // by one workgroup per head; the split length follows the context size so the dispatch
  // shape, recorded once, holds for every length up to it.
  // The grouped decode kernels (attention_dec, attention_qdec for compressed KV) have a quarter
  // of the workgroups of the per-head ones, so they split finer: 128-key splits, up to 128.
  constexpr std::uint32_t split_tokens = impl::grouped_decode_rows;
  const std::uint32_t group = ap.n_head_kv ? ap.n_head / ap.n_head_kv : 0;
  const bool grouped = group >= 1 && ap.n_head % ap.n_head_kv == 0 &&
                       (kv.compressed() ? P.grouped_qdec(group, q.rows, P.single_seq) : group <= 8 && P.gqa_attention && q.rows <= split_tokens);
  // Unsplit (short contexts), the per-head kernel's n_head workgroups beat the grouped kernel's n_head_kv (H100:
  // qwen3-8b tg128 231 vs 226 t/s, 4 KV heads of qwen3-30b-a3b far worse), so the grouped f16 kernel runs only split.
  // The window's keys as a split of their own (attention_qdec RING_SPLIT): the merge's 128 less one.
  const bool ring_split_wanted = kv.compressed() && grouped && P.qdec_ring_split && pc.window > 0;
  const std::uint32_t max_splits = grouped ? 128 - ring_split_wanted : 64;
  const std::uint32_t min_split = grouped ? (kv.compressed() ? P.qdec_min_split(cfg.n_ctx, ap.n_head_kv, q.rows, max_splits, P.ctx.info().sm_count) : 128) : 256;
  // Decode on tensor cores (attention_mma_dec.glsl, opt-in, measured slower): a warp a (KV head, token, split).
  constexpr std::uint32_t mma_dec_split = 256;
  // (COMBINE merges at most 128 splits: longer contexts keep attention_qdec.)
  const bool mma_dec = P.mma_dec && kv.compressed() && P.split_attention && q.rows <= split_tokens && group >= 1 &&
                       group <= 16 && ap.n_head % ap.n_head_kv == 0 && cfg.n_ctx >= 256 &&
                       div_up(cfg.n_ctx, mma_dec_split) <= 128 &&
                       tensor_core_attention(flash_min_tokens, ap.head_dim, cfg.type_k, cfg.type_v);
  const bool split = mma_dec || (P.split_attention && q.rows <= split_tokens && cfg.n_ctx > 2 * min_split &&
                                 !(P.short_ctx && P.short_ctx_len <= 2 * min_split));
  const bool ring_split = split && !mma_dec && ring_split_wanted;
  if (split) {
    pc.split_len = mma_dec ? std::clamp<std::uint32_t>(div_up(div_up(cfg.n_ctx, 128), 64) * 64, 64, mma_dec_split)
                           : impl::split_length(cfg.n_ctx, max_splits, min_split);
    // attention_qdec's thread-a-key form: a split a whole number of its tiles (a tile's keys are its workgroup's threads).
    if (!mma_dec && kv.compressed() && grouped && !P.qdec_lanes_over(cfg.n_ctx, q.rows)) {
      const std::uint32_t tile = P.qdec_keys_wg(cfg, group, ap.head_dim, q.rows);
      pc.split_len = div_up(pc.split_len, tile) * tile;
    }
    pc.n_splits = div_up(cfg.n_ctx, pc.split_len) + ring_split;
    const std::uint64_t need = std::uint64_t(split_tokens) * ap.n_head * pc.n_splits * (ap.head_dim + 2) * 4;
    if (!P.attn_part || P.buf(P.attn_part).size() < need)
      P.attn_part = P.new_buffer(need, memory_kind::device, "split attention partials");
  }
  // Grouped split decode (STRATA_VK_TAIL): the merge runs as the split kernel's tail, per
  // (token, KV head) counter, instead of the COMBINE dispatch.
  const bool merge_tail = split && grouped && !mma_dec && q.rows <= P.tail_rows && q.rows * ap.n_head_kv <= impl::split_counter_count;
  // attention_qdec's TurboQuant rotations hoisted: every split's partial in one domain (no window, or its own
  // split) has COMBINE rotate the values back; attn_prep's rotated queries are read where they are q's.
  const bool hoist = kv.compressed() && grouped && !mma_dec && P.qdec_hoists(kv, ap.head_dim, group, q.rows);
  const bool rot_later = hoist && split && !merge_tail && kv::turboquant_bits(cfg.type_v) && (ring_split || !ring.rows);
  if (merge_tail && !P.split_counters) {
    P.split_counters = P.new_buffer(impl::split_counter_count * 4, memory_kind::device, "split attention counters");
    const std::vector<std::uint32_t> zeros(impl::split_counter_count, 0);
    uploader up(P.ctx, zeros.size() * 4);
    up.copy(std::as_bytes(std::span(zeros)), P.buf(P.split_counters).handle(), 0);
    up.flush();
  }
  // Decode: the kernel that writes out also writes it as the output projection's int8 input
  // (attention.glsl QUANT_OUT) into the slot the next quantize would take.
  const bool q8_out = P.attn_q8 && P.fuse_step && P.max_k && ap.head_dim % 32 == 0 && out.cols <= P.max_k &&
                      out.cols == ap.n_head * ap.head_dim && q.rows < P.mmvq_max_tokens && q.rows <= P.max_q8_rows;
  const std::uint32_t q8_slot = P.last_slot ^ 1u;
  // Steps of many sequences run the grouped kernel (attention_dec.glsl) unsplit; q8_out keeps decode's on the per-head one.
  const std::uint32_t gqa_min = q8_out ? split_tokens + 1 : P.multi_gqa_min;
  const bool multi_gqa = !split && !P.single_seq && P.multi_gqa && q.rows >= gqa_min && group >= 1 && group <= 8 &&
                         ap.n_head % ap.n_head_kv == 0;
  // Decode steps over an f16/f32 cache, each token its sequence's only one: the per-head kernel below runs attn_prep's
  // head ops and KV append itself (attention.glsl HEAD_OPS), one level fewer; any other kernel has attn_prep first.
  const bool head_ops = prep && prep->q == q && !kv.compressed() && !split && !multi_gqa && P.own_rows &&
                        !tensor_core_attention(q.rows, ap.head_dim, cfg.type_k, cfg.type_v);
  // The same in the split grouped kernel's LANES form (attention_dec.glsl HEAD_OPS, STRATA_VK_HEAD_OPS_SPLIT): its
  // defines with the head ops' shared memory (G + 1 rows, their sums, the own key and value) counted.
  std::vector<std::pair<std::string, std::string>> split_ops_defs;
  // split_combine.glsl's shared arrays (SPLIT_COMBINE: the splits' maxima and sums, 8 head sums, a flag).
  const std::uint32_t combine_shared = merge_tail ? 2 * 8 * 128 * 4 + 8 * 4 + 4 : 0;
  if (prep && prep->q == q && !kv.compressed() && split && grouped && !mma_dec && P.head_ops_split && P.own_rows) {
    split_ops_defs = impl::kv_defs(cfg);
    split_ops_defs.insert(split_ops_defs.end(), {{"HEAD_D", std::to_string(ap.head_dim)}, {"GQA_G", std::to_string(group)}});
    // head_ops.glsl's rows and head_ops_kv.glsl's own key and value are HO_MAXD (256) wide whatever the head.
    if (!P.add_dec_lanes(split_ops_defs, ap.head_dim, group, P.dec_chunk_keys, (group + 1) * 256 * 4 + 2 * 256 * 4 + combine_shared, group + 1))
      split_ops_defs.clear();
  }
  if (prep && !head_ops && split_ops_defs.empty()) {
    P.encode = std::move(prep);
    P.flush_encode();
  }
  // Steps of 5+ tokens: the unsplit and COMBINE kernels write out's f16 copy beside it
  // (attn_f16_out.glsl), the output projection's tensor-core input (f16_input() finds it).
  const bool f16_out = !q8_out && P.mm_fuse_more && P.f16_beside(out) && out.cols == ap.n_head * ap.head_dim;
  const auto with_f16_out = [&](std::vector<std::pair<std::string, std::string>>& d, std::vector<binding>& b) {
    if (!f16_out) return;
    d.emplace_back("ATTN_F16_OUT", std::to_string(b.size()));
    b.push_back(P.bind_id(P.mm_xh, true));
  };
  const auto wrote_f16_out = [&] { if (f16_out) P.holds_f16(out); };
  const auto q8_dispatch = [&](std::vector<std::pair<std::string, std::string>> d, std::span<const binding> b8) {
    std::vector<binding> b(b8.begin(), b8.end());
    if (q8_out) {
      d.emplace_back("QUANT_OUT", std::to_string(P.max_k));
      b.insert(b.end(), {P.bind_id(P.xq[q8_slot], true), P.bind_id(P.xs[q8_slot], true)});
    }
    const struct {
      attention_pc a;
      attn_prep_pc h;
    } hpc{pc, head_ops ? prep->pc : attn_prep_pc{}};
    if (head_ops) {  // attn_prep's inputs after the kernel's own; the cache bindings are written too
      d.insert(d.end(), {{"HEAD_OPS", std::to_string(b.size())}, {"HO_ROWS", "2"}});
      b[2] = prep->b[5];
      b[3] = prep->b[6];
      b.insert(b.end(), {prep->b[1], prep->b[2], prep->b[3], prep->b[4], prep->b[7], prep->b[9]});
    }
    with_f16_out(d, b);
    P.dispatch(impl::req("attention", {}, d, std::uint32_t(b.size())), b, head_ops ? static_cast<const void*>(&hpc) : &pc,
               std::uint32_t(head_ops ? sizeof hpc : sizeof pc), ap.n_head, q.rows);
    if (head_ops) P.dropped.push_back(q);  // q itself was not rewritten: reading it is a bug
    if (q8_out) {
      P.quantized[q8_slot] = impl::quantized_input{out, nullptr, 0.0f};
      P.last_slot = q8_slot;
    }
    wrote_f16_out();
  };
  // The split kernels' partials merged into out (attention.glsl COMBINE).
  const auto combine = [&] {
    const binding cb[] = {P.bind_id(P.attn_part, false), P.bind(q, false), P.bind(q, false), P.bind(q, false),
                          P.bind(q, false), P.bind(q, false), P.bind(q, false), P.bind(out, true)};
    auto d = rot_later ? impl::kvq_defs(kv) : impl::kv_defs(cfg);  // kvq_defs: the TurboQuant layout
    if (rot_later) d.emplace_back("ROT_LATER", ring_split ? "2" : "1");  // the values rotated back once, merged
    if (rot_later && !P.qdec_skip.empty() && (std::stoul(P.qdec_skip) & 2)) d.emplace_back("LAB_NO_ROT", "1");  // lab: wrong results
    d.emplace_back("COMBINE", "1");  // split groups of a head's dims (tuning.hpp combine_wg)
    d.emplace_back("WG", std::to_string(std::min(P.combine_wg, P.ctx.info().max_workgroup_threads)));
    if (P.combine_cif != 8) d.emplace_back("COMBINE_CIF", std::to_string(P.combine_cif));
    q8_dispatch(d, cb);
  };
  const binding part = split ? P.bind_id(P.attn_part, true) : P.bind(q, false);
  const binding bd[] = {part,
                        P.bind(q, false),
                        P.bind_id(kv.k_buffer(layer), false),
                        P.bind_id(kv.v_buffer(layer), false),
                        P.bind_step(P.off_pos, B4),
                        P.bind_step(P.off_seq_row, B4),
                        P.bind_step(P.off_blocks, P.blocks_bytes),
                        P.bind(out, !split || merge_tail)};
  if (kv.compressed()) {  // attention_q (f16 window ring, codes read directly), then COMBINE
    const binding dummy = P.bind(q, false);
    const binding qb[] = {bd[0], bd[1], bd[2], bd[3], bd[4], bd[5], bd[6], bd[7],
                          ring.rows && ring.k[layer] ? P.bind_id(ring.k[layer], false) : dummy,
                          ring.rows && ring.v[layer] ? P.bind_id(ring.v[layer], false) : dummy,
                          ring.rows ? P.bind_id(ring.tags[layer], false) : dummy};
    auto qd = impl::kvq_defs(kv);
    // Prefill of one sequence on tensor cores (attention_mma.glsl): code rows decoded to f16 in
    // shared memory, the window's keys from the f16 ring in a second pass.
    if (!split && P.single_seq && tensor_core_attention(q.rows, ap.head_dim, cfg.type_k, cfg.type_v)) {
      qd.insert(qd.end(), {{"WG", "128"}, {"COOPMAT", "1"}, {"TQ_ROT_N", "16"}});
      if (P.fa_quad) qd.emplace_back("MMA_QUAD", "1");
      pc.n_splits = q.rows;  // the kernel's token count
      P.dispatch(impl::req("attention_mma", {}, qd, 11), qb, &pc, sizeof pc, ap.n_head, div_up(q.rows, 64));
      return;
    }
    if (mma_dec) {
      qd.insert(qd.end(), {{"WG", "32"}, {"COOPMAT", "1"}, {"TQ_ROT_N", "16"}, {"GQA_G", std::to_string(group)},
                           {"MAX_SPLIT", std::to_string(mma_dec_split)}});
      P.dispatch3(impl::req("attention_mma_dec", {}, qd, 11), qb, &pc, sizeof pc, ap.n_head_kv, q.rows, pc.n_splits);
    } else if (grouped) {  // one workgroup per KV head and token scores its query-head group (attention_qdec.glsl)
      std::vector<binding> mb(std::begin(qb), std::end(qb));
      if (merge_tail) mb.push_back(P.bind_id(P.split_counters, true));
      const bool rot_in = hoist && qrot_in && kv::turboquant_bits(cfg.type_k);
      if (rot_in) mb.push_back(P.bind_id(P.q_rot, false));
      qd = P.qdec_defs(kv, ap.head_dim, group, q.rows, split, ring_split, merge_tail, rot_later, rot_in ? 11 + merge_tail : 0);
      P.dispatch3(impl::req("attention_qdec", {}, qd, std::uint32_t(mb.size())), mb, &pc, sizeof pc, ap.n_head_kv, q.rows, pc.n_splits);
      if (merge_tail) return;
    } else if (!split) {
      P.dispatch(impl::req("attention_q", {}, qd, 11), qb, &pc, sizeof pc, ap.n_head, q.rows);
    } else {
      qd.emplace_back("SPLIT", "1");
      P.dispatch3(impl::req("attention_q", {}, qd, 11), qb, &pc, sizeof pc, ap.n_head, q.rows, pc.n_splits);
    }
    if (split) combine();
    return;
  }
  auto defs = impl::kv_defs(cfg);
  // attention_dec's defines: the cache's, the head shape, LANES where it fits.
  const auto dec_defs = [&] {
    auto d = defs;
    d.emplace_back("HEAD_D", std::to_string(ap.head_dim));
    d.emplace_back("GQA_G", std::to_string(group));
    P.add_dec_lanes(d, ap.head_dim, group, P.dec_chunk_keys, split ? combine_shared : 0);
    return d;
  };
  // Decode: one workgroup per KV head scores its whole query-head group (attention_dec.glsl).
  if (grouped && split) {
    auto ddefs = split_ops_defs.empty() ? dec_defs() : split_ops_defs;
    ddefs.emplace_back("SPLIT", "1");
    std::vector<binding> mb(std::begin(bd), std::end(bd));
    if (merge_tail) {
      ddefs.emplace_back("SPLIT_COMBINE", "8");
      mb.push_back(P.bind_id(P.split_counters, true));
    }
    const struct {
      attention_pc a;
      attn_prep_pc h;
    } hpc{pc, prep ? prep->pc : attn_prep_pc{}};
    if (!split_ops_defs.empty()) {  // attn_prep's inputs after the kernel's own; the cache bindings are written too
      ddefs.insert(ddefs.end(), {{"HEAD_OPS", std::to_string(mb.size())}, {"HO_ROWS", std::to_string(group + 1)}});
      mb[2] = prep->b[5];
      mb[3] = prep->b[6];
      mb.insert(mb.end(), {prep->b[1], prep->b[2], prep->b[3], prep->b[4], prep->b[7], prep->b[9]});
    }
    const bool ops = !split_ops_defs.empty();
    P.dispatch3(impl::req("attention_dec", {}, ddefs, std::uint32_t(mb.size())), mb, ops ? static_cast<const void*>(&hpc) : &pc,
                std::uint32_t(ops ? sizeof hpc : sizeof pc), ap.n_head_kv, q.rows, pc.n_splits);
    if (ops) P.dropped.push_back(q);  // q itself was not rewritten: reading it is a bug
    if (!merge_tail) combine();
    return;
  }
  // Steps of many sequences (batched decode, several prompts in one step): one workgroup per
  // (token, KV head) scores its query-head group unsplit (attention_dec.glsl), so each K and V
  // row is read once per group with coalesced loads; the per-head kernel below read it once per
  // query head, a key row per thread (H200, qwen3-8b, 64 streams: 164 us a layer, 21% of a
  // decode step). STRATA_VK_MULTI_GQA=0 returns such steps to the per-head kernel, as does q8_out.
  if (multi_gqa) {
    auto d = dec_defs();
    std::vector<binding> b(std::begin(bd), std::end(bd));
    with_f16_out(d, b);
    P.dispatch3(impl::req("attention_dec", {}, d, std::uint32_t(b.size())), b, &pc, sizeof pc, ap.n_head_kv, q.rows, 1);
    wrote_f16_out();
    return;
  }
  // Prefill of one sequence on tensor cores (attention_mma.glsl): f16 caches, head_dim 64 or 128.
  if (!split && P.single_seq && tensor_core_attention(q.rows, ap.head_dim, cfg.type_k, cfg.type_v)) {
    pc.n_splits = q.rows;  // the kernel's token count
    P.dispatch(P.flash_req(ap.head_dim, q.rows), bd, &pc, sizeof pc, ap.n_head, div_up(q.rows, 16 * P.flash_warps(q.rows)));
    return;
  }
  // Prefill of one sequence: query tiles share each key tile (attention.glsl QTILE).
  constexpr std::uint32_t qtile = 16;
  if (!split && P.tiled_attention && P.single_seq && q.rows >= qtile && ap.head_dim <= 128) {
    auto qdefs = defs;
    qdefs.emplace_back("QTILE", "1");
    pc.n_splits = q.rows;  // the tile kernel's token count
    P.dispatch(impl::req("attention", {}, qdefs, 8), bd, &pc, sizeof pc, ap.n_head, div_up(q.rows, qtile));
    return;
  }
  // The per-head kernel's value sum over key groups, four dims a thread (attention.glsl V4_D).
  const std::uint32_t dec_wg = split ? 128 : std::min(P.attn_dec_wg, P.ctx.info().max_workgroup_threads);
  const bool v4 = P.attn_v4 && cfg.type_v == kv::kv_type::f16 && ap.head_dim % 4 == 0 && 128 % (ap.head_dim / 4) == 0;
  if (v4) defs.emplace_back("V4_D", std::to_string(ap.head_dim));
  if (!split) {
    if (dec_wg != 128) defs.emplace_back("WG", std::to_string(dec_wg));
    q8_dispatch(defs, bd);
    return;
  }
  auto split_defs = defs;
  split_defs.emplace_back("SPLIT", "1");
  P.dispatch3(impl::req("attention", {}, split_defs, 8), bd, &pc, sizeof pc, ap.n_head, q.rows, pc.n_splits);
  combine();
}

}  // namespace strata::gpu
