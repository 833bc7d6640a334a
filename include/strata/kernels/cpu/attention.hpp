// CPU attention of a batch over the paged KV cache: the batch is cut into tiles of queries that
// read the same KV head of the same sequence (the GQA heads of up to 32 / gqa consecutive
// tokens), each tile's cached rows are located once (slots, ring copies), and the tier's tile
// kernel (attention_tile.hpp; SIMD in kernels/cpu/x86/attention.hpp) does the math. Tiles run
// on the thread pool, longest first. No allocation per call: reserve() sizes everything.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/arch/hparams_limits.hpp"
#include "strata/core/error.hpp"
#include "strata/graph/backend_contract.hpp"
#include "strata/kv/block_table.hpp"
#include "strata/kernels/cpu/attention_tile.hpp"
#include "strata/kernels/cpu/format_kernels.hpp"
#include "strata/kernels/cpu/kv_storage.hpp"
#include "strata/kernels/cpu/tensor.hpp"
#include "strata/kernels/cpu/thread_pool.hpp"

namespace strata::kernels::cpu {

using graph::attention_params;

// How a tile reads one side of a cache with codec c (the row and ring arrays are the caller's).
inline attention_side attention_side_of(const kv_codec& c) noexcept {
  attention_side s;
  s.row_bytes = c.head_bytes();
  switch (c.type()) {
    case kv::kv_type::f32: s.kind = kv_row_kind::f32; break;
    case kv::kv_type::f16: s.kind = kv_row_kind::f16; break;
    case kv::kv_type::q8_0: s.kind = kv_row_kind::q8_0; break;
    default:
      s.kind = kv_row_kind::turboquant;
      s.tq = c.turboquant();
      s.tq_accumulate = c.tq_kernels().accumulate_rotated;
  }
  return s;
}

class attention_runner {
 public:
  static constexpr std::uint32_t max_head_dim = arch::limits::max_head_dim;

  void reserve(unsigned threads, std::uint32_t max_rows, std::uint32_t max_ctx) {
    const std::size_t fl = attention_scratch_floats(max_head_dim) + (2 * attention_max_queries + 1) * max_head_dim;
    if (floats_.size() < threads * fl) floats_.resize(threads * fl);
    float_stride_ = fl;
    ptr_stride_ = std::size_t(max_ctx) + 1;
    if (rows_.size() < threads * 2 * ptr_stride_) rows_.resize(threads * 2 * ptr_stride_);
    if (ring_.size() < threads * 2 * ptr_stride_) ring_.resize(threads * 2 * ptr_stride_);
    tiles_.reserve(max_rows);
  }
  bool reserved() const noexcept { return float_stride_ != 0; }

  // Whether run() splits a KV head's query heads over more tiles when there are fewer items than
  // threads (work_split::decode_attention_split_heads).
  void set_split_heads(bool on) noexcept { split_heads_ = on; }

  // max_head_dim floats per thread, free outside run() (kv_store's TurboQuant encoding).
  float* encode_scratch(unsigned tid) noexcept {
    return floats_.data() + tid * float_stride_ + (float_stride_ - max_head_dim);
  }

  // Softmax attention of each query head over its sequence's cached positions [start, pos],
  // whose slots `table` holds.
  void run(thread_pool& pool, const kernel_table& kt, const kv_storage& kv, const kv::block_table& table,
           std::uint32_t layer, const graph::batch& b, tensor q, const attention_params& p, tensor out) {
    const std::uint32_t gqa = p.n_head / p.n_head_kv, d = p.head_dim;
    std::uint32_t heads_per_tile = std::min(gqa, attention_max_queries);
    const std::uint32_t tile_tokens = std::max(1u, attention_max_queries / gqa);
    if (d > max_head_dim) throw error("attention: head_dim " + std::to_string(d) + " exceeds " + std::to_string(max_head_dim));
    tiles_.clear();
    std::size_t widest = 0;
    for (std::uint32_t t = 0; t < q.rows;) {
      std::uint32_t n = 1;
      while (t + n < q.rows && n < tile_tokens && b.seq_ids[t + n] == b.seq_ids[t] &&
             b.positions[t + n] == b.positions[t + n - 1] + 1)
        ++n;
      tiles_.push_back({t, n});
      const std::uint32_t first = start_of(p, std::uint32_t(b.positions[t]));
      widest = std::max<std::size_t>(widest, std::uint32_t(b.positions[t + n - 1]) - first + 1);
      t += n;
    }
    if (widest > ptr_stride_)
      throw error("attention: a tile spans " + std::to_string(widest) + " cached positions, more than the " +
                  std::to_string(ptr_stride_) + " reserved");
    // Fewer items than threads (a decode step: one tile a sequence, one item a KV head): split
    // each KV head's query heads over more tiles, down to one head a tile, until every thread
    // has one. A query's result does not depend on the tile it is in; the KV rows are read once
    // more per extra tile.
    const std::size_t n_tiles = tiles_.size();
    if (split_heads_)
      while (heads_per_tile > 1 && n_tiles * p.n_head_kv * ((gqa + heads_per_tile - 1) / heads_per_tile) < pool.size())
        heads_per_tile = (heads_per_tile + 1) / 2;
    const std::uint32_t head_groups = (gqa + heads_per_tile - 1) / heads_per_tile;
    // Items by KV head, then tiles from the last (longest) to the first: consecutive items read
    // the same head's rows (L2-resident), and long tiles start before short ones.
    const std::size_t items = n_tiles * p.n_head_kv * head_groups;
    pool.parallel_for(items, 1, [&](std::size_t beg, std::size_t end, unsigned tid) {
      for (std::size_t it = beg; it < end; ++it) {
        const tile_run& tr = tiles_[n_tiles - 1 - it % n_tiles];
        const std::uint32_t hk = std::uint32_t(it / n_tiles / head_groups), g = std::uint32_t(it / n_tiles % head_groups);
        run_tile(kt, kv, table, layer, b, q, p, out, tr, hk, g * heads_per_tile,
                 std::min(heads_per_tile, gqa - g * heads_per_tile), tid);
      }
    });
  }

 private:
  struct tile_run {
    std::uint32_t token, n;  // tokens [token, token + n) of the batch: one sequence, consecutive positions
  };

  static std::uint32_t start_of(const attention_params& p, std::uint32_t pos) noexcept {
    return p.chunk ? pos / p.chunk * p.chunk : 0;
  }

  void run_tile(const kernel_table& kt, const kv_storage& kv, const kv::block_table& table, std::uint32_t layer,
                const graph::batch& b, tensor q, const attention_params& p, tensor out, const tile_run& tr,
                std::uint32_t hk, std::uint32_t h0, std::uint32_t nh, unsigned tid) {
    const std::uint32_t d = p.head_dim, gqa = p.n_head / p.n_head_kv, seq = b.seq_ids[tr.token];
    const std::uint32_t window = kv.window();
    float* fl = floats_.data() + tid * float_stride_;
    float* q_rot = fl + attention_scratch_floats(max_head_dim);
    float* out_rot = q_rot + attention_max_queries * max_head_dim;
    attention_tile t;
    t.head_dim = d;
    t.scale = p.scale;
    t.scratch = fl;
    t.k = attention_side_of(kv.k_codec());
    t.v = attention_side_of(kv.v_codec());
    std::uint32_t n = 0;
    t.key_lo = start_of(p, std::uint32_t(b.positions[tr.token]));
    t.key_hi = std::uint32_t(b.positions[tr.token + tr.n - 1]);
    for (std::uint32_t i = 0; i < tr.n; ++i) {
      const std::uint32_t tok = tr.token + i, pos = std::uint32_t(b.positions[tok]);
      for (std::uint32_t hh = 0; hh < nh; ++hh, ++n) {
        const std::uint32_t h = hk * gqa + h0 + hh;
        t.q[n] = q.row(tok) + h * d;
        t.out[n] = out.row(tok) + h * d;
        t.q_rot[n] = q_rot + n * max_head_dim;
        t.out_rot[n] = out_rot + n * max_head_dim;
        t.first[n] = start_of(p, pos);
        t.last[n] = pos;
        t.recent_from[n] = pos + 1 >= window ? pos + 1 - window : 0;
        if (t.k.kind == kv_row_kind::turboquant) {
          std::copy(t.q[n], t.q[n] + d, q_rot + n * max_head_dim);
          t.k.tq->rotation().forward(q_rot + n * max_head_dim);
        }
      }
    }
    t.n_q = n;
    const std::size_t span = t.key_hi - t.key_lo + 1;
    const std::uint8_t** k_rows = rows_.data() + tid * 2 * ptr_stride_;
    const std::uint8_t** v_rows = k_rows + span;
    const fp16** k_ring = ring_.data() + tid * 2 * ptr_stride_;
    const fp16** v_ring = k_ring + span;
    const bool ring_k = window && kv::is_compressed(kv.config().type_k);
    const bool ring_v = window && kv::is_compressed(kv.config().type_v);
    for (std::uint32_t j = t.key_lo; j <= t.key_hi; ++j) {
      const std::uint32_t slot = table.slot(seq, j);
      k_rows[j - t.key_lo] = kv.k_head(layer, slot, hk);
      v_rows[j - t.key_lo] = kv.v_head(layer, slot, hk);
      if (ring_k) k_ring[j - t.key_lo] = kv.k_recent(layer, seq, j, hk);
      if (ring_v) v_ring[j - t.key_lo] = kv.v_recent(layer, seq, j, hk);
    }
    t.k.rows = k_rows;
    t.v.rows = v_rows;
    t.k.ring = ring_k ? k_ring : nullptr;
    t.v.ring = ring_v ? v_ring : nullptr;
    if (!kt.attention || !kt.attention(t)) attention_tile_reference(t);
    if (t.v.kind != kv_row_kind::turboquant) return;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!t.used_rot[i]) continue;
      t.v.tq->rotation().inverse(t.out_rot[i]);
      for (std::uint32_t c = 0; c < d; ++c) t.out[i][c] += t.out_rot[i][c];
    }
  }

  std::vector<tile_run> tiles_;
  std::vector<float> floats_;   // per thread: tile scratch, rotated queries, rotated outputs, encode scratch
  bool split_heads_ = true;
  std::size_t float_stride_ = 0;
  std::vector<const std::uint8_t*> rows_;  // per thread: K then V row of each position of one tile
  std::vector<const fp16*> ring_;          // per thread: K then V ring copy of each position
  std::size_t ptr_stride_ = 0;             // positions one tile may span
};

}  // namespace strata::kernels::cpu
