// The CPU backend: executes each graph op (graph/backend_contract.hpp) at once on host memory
// with a thread pool, using the per-format kernels chosen at load time (kernel_table).
// Activations are quantized to the weight format's `act` before quantized matmuls, as
// llama.cpp's CPU backend does.
#pragma once
#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "strata/arch/hparams_limits.hpp"
#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/graph/backend_contract.hpp"
#include "strata/kernels/cpu/attention.hpp"
#include "strata/kernels/cpu/format_kernels.hpp"
#include "strata/kernels/cpu/kv_storage.hpp"
#include "strata/kernels/cpu/moe_runner.hpp"
#include "strata/kernels/cpu/ops.hpp"
#include "strata/kernels/cpu/tensor.hpp"
#include "strata/kernels/cpu/thread_pool.hpp"
#include "strata/kernels/cpu/weight_stream.hpp"
#include "strata/kernels/cpu/work_split.hpp"

namespace strata::kernels::cpu {

class backend {
 public:
  using tensor = cpu::tensor;
  using buffer = cpu::buffer;
  using weight = cpu::weight;
  using kv_state = kv_storage;

  backend(unsigned n_threads, const kernel_table& kernels) : pool_(n_threads), kernels_(&kernels) {}

  unsigned threads() const noexcept { return pool_.size(); }

  // How matmuls, SwiGLU and attention are cut into pool items (work_split.hpp); set before the
  // first step.
  void set_work_split(const work_split& s) noexcept {
    split_ = s;
    attn_.set_split_heads(s.decode_attention_split_heads);
  }
  const work_split& split() const noexcept { return split_; }

  // Tensors the stream places are not kept resident: load() points them at the stream's memory
  // (no packed copy: the row kernels read them), and each decoder block waits for its bytes
  // (begin_layer) and hands them back (end_layer). Set before the first load().
  void set_weight_stream(std::unique_ptr<weight_stream> s) noexcept { stream_ = std::move(s); }
  const weight_stream* stream() const noexcept { return stream_.get(); }
  void begin_layer(std::uint32_t il) {
    if (stream_) stream_->begin_block(il);
  }
  void end_layer(std::uint32_t il) {
    if (stream_) stream_->end_block(il);
  }
  thread_pool& pool() noexcept { return pool_; }

  buffer alloc(std::uint32_t rows, std::uint32_t cols) {
    max_cols_ = std::max(max_cols_, cols);
    return buffer(rows, cols);
  }
  // Also sizes the attention scratch for the cache's context.
  kv_state make_kv(const kv::kv_config& cfg) {
    attn_.reserve(pool_.size(), max_tokens_, cfg.n_ctx);
    return kv_state(cfg);
  }

  // Zero-copy view of a GGUF tensor; its format must have kernels on this backend. Matrices of
  // a format with a packed layout are also packed (a copy the backend owns), except the token
  // embedding, which get_rows reads by row (a tied LM head then uses the row kernels).
  weight load(const gguf::tensor_info& t) {
    const auto& k = (*kernels_)[std::size_t(t.type)];
    if (!k.valid())
      throw error("tensor '" + std::string(t.name) + "' has type " + std::string(gguf::name_of(t.type)) +
                  ", which the CPU backend does not support");
    weight w;
    w.data = t.data.data();
    w.type = t.type;
    for (int d = 0; d < 4; ++d) w.ne[d] = t.ne[d];
    w.row_bytes = t.row_bytes();
    w.kernels = &k;
    w.name = t.name;
    if (stream_)
      if (const std::byte* at = stream_->place(t)) {
        w.data = at;
        return w;
      }
    if (k.pack_group && k.gemm && t.name != "token_embd.weight") pack(w);
    return w;
  }

  // Scratch sized before the hot path: activation rows (of the widest buffer allocated) in any
  // act format, MoE routing per token × expert pair.
  void reserve(std::uint32_t max_tokens, std::uint32_t max_routed) {
    const std::size_t act = std::size_t(std::max(max_tokens, max_routed)) * (std::size_t(max_cols_) * 4 + 64);
    if (act_scratch_.size() < act) act_scratch_.resize(act);
    max_tokens_ = max_tokens;
    moe_.reserve(max_routed);
    if (ffn_done_.size() < max_cols_ / 256 + 1) ffn_done_.resize(max_cols_ / 256 + 1);
  }

  // The step's inputs, read by the ops below (the CPU keeps views; nothing is copied).
  void begin(const graph::step_inputs& s) {
    step_ = s;
    if (stream_) stream_->begin_step(s.tokens.size());
  }

  void embed(const weight& table, tensor out) {
    const auto& k = *table.kernels;
    const std::span<const std::int32_t> ids = step_.tokens.tokens;
    pool_.parallel_for(ids.size(), 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t i = b; i < e; ++i) k.dequant_row(table.row(std::size_t(ids[i])), out.row(i), out.cols);
    });
  }

  void rms_norm(tensor x, const weight* w, float eps, tensor y) {
    const float* wd = w && *w ? reinterpret_cast<const float*>(w->data) : nullptr;
    pool_.parallel_for(x.rows, 16, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t r = b; r < e; ++r) rms_norm_row(x.row(r), wd, eps, y.row(r), x.cols);
    });
  }

  // y[t][n] = Σ_k w[n][k] x[t][k]. Activations are converted to the weight's act format once.
  void matmul(const weight& w, tensor x, tensor y) {
    const auto& k = *w.kernels;
    if (x.cols != w.ne[0] || y.cols != w.ne[1] || x.rows != y.rows)
      throw error("matmul shape mismatch for '" + std::string(w.name) + "': weight [" + std::to_string(w.ne[0]) +
                  ", " + std::to_string(w.ne[1]) + "], input " + std::to_string(x.rows) + "x" + std::to_string(x.cols) +
                  ", output " + std::to_string(y.rows) + "x" + std::to_string(y.cols));
    if (w.packed) return matmul_packed(w, x, y);
    const std::size_t K = x.cols, act_bytes = k.act_row_bytes(K);
    if (x.rows * act_bytes > act_scratch_.size())
      throw error("matmul '" + std::string(w.name) + "': " + std::to_string(x.rows) + " rows of " + std::to_string(K) +
                  " exceed the scratch reserve() sized (tensors must come from alloc() before reserve())");
    std::byte* act = act_scratch_.data();
    pool_.parallel_for(x.rows, 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t t = b; t < e; ++t) k.quantize_act_row(x.row(t), act + t * act_bytes, K);
    });
    const std::size_t N = y.cols, n_tok = x.rows;
    // Batches walk their tokens 4 at a time over a chunk of weight rows kept small enough
    // (≤ 256 KiB) to stay in L2, so dot_rows_4 unpacks each weight block once per 4 tokens.
    // Leftover tokens use dot_row, which dot_rows_4 matches bit for bit; a leftover group of 2 or
    // 3 (a 2- or 3-sequence decode step) still goes through dot_rows_4, padded with spare
    // activation rows of the scratch whose outputs are dropped, so its weights are unpacked once.
    const std::size_t n_tok4 = k.dot_rows_4 ? n_tok / 4 * 4 : 0;
    const std::size_t rest = n_tok - n_tok4;
    const bool pad = k.dot_rows_4 && rest >= 2 && (n_tok4 + 4) * act_bytes <= act_scratch_.size();
    // Rows read once per token take chunks of up to 256 KiB (a tied LM head of 151,936 rows was
    // 2,374 chunks of 64, each a claim of the pool's shared word by one thread then the other).
    const std::size_t cap = n_tok4 || pad ? 64 : std::max<std::size_t>(64, (256u << 10) / w.row_bytes);
    std::size_t grain = std::max<std::size_t>(1, std::min<std::size_t>(cap, N / (pool_.size() * 8)));
    if (n_tok4 || pad) grain = std::max<std::size_t>(1, std::min<std::size_t>(grain, (256u << 10) / w.row_bytes));
    pool_.parallel_for(N, grain, [&](std::size_t b, std::size_t e, unsigned) {
      float o[4];
      for (std::size_t t = 0; t < n_tok4; t += 4)
        for (std::size_t n = b; n < e; ++n) {
          k.dot_rows_4(w.row(n), act + t * act_bytes, act_bytes, o, K);
          for (std::size_t r = 0; r < 4; ++r) y.row(t + r)[n] = o[r];
        }
      if (pad) {
        for (std::size_t n = b; n < e; ++n) {
          k.dot_rows_4(w.row(n), act + n_tok4 * act_bytes, act_bytes, o, K);
          for (std::size_t r = 0; r < rest; ++r) y.row(n_tok4 + r)[n] = o[r];
        }
        return;
      }
      for (std::size_t n = b; n < e; ++n) {
        const std::byte* wr = w.row(n);
        for (std::size_t t = n_tok4; t < n_tok; ++t) y.row(t)[n] = k.dot_row(wr, act + t * act_bytes, K);
      }
    });
  }

  // The packed path of matmul: gemm over groups of 16 rows, split over threads in chunks of
  // groups whose weights stay in L2 while every token tile passes over them.
  void matmul_packed(const weight& w, tensor x, tensor y) {
    const auto& k = *w.kernels;
    const std::size_t K = x.cols, stride = k.gemm_act_bytes(K);
    std::byte* act = act_scratch_.data();
    quantize_rows_for_gemm(k, x, act, stride);
    run_packed(w, packed_args(w, act, stride, x.rows, y), x.rows);
  }

  // w's packed gemm over activations already quantized into a, in matmul_packed's chunks.
  void run_packed(const weight& w, const gemm_args& a, std::size_t tokens) {
    const std::size_t groups = packed_groups(a.n_rows), chunk = packed_chunk(w, tokens);
    const std::size_t group_items = (groups + chunk - 1) / chunk, parts = token_parts(group_items, tokens);
    if (parts == 1)
      return pool_.parallel_for(groups, chunk, [&](std::size_t b, std::size_t e, unsigned) {
        gemm_args part = a;
        part.group_begin = b;
        part.group_end = e;
        w.kernels->gemm(part);
      });
    pool_.parallel_for(group_items * parts, 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t it = b; it < e; ++it) run_item(w, a, chunk, parts, it);
    });
  }

  // Token parts of a batch's gemm items (work_split::prefill_min_items_per_thread): a call whose
  // group chunks are fewer than threads × that many has each chunk cut into parts of whole
  // 16-token tiles, as many as bring the items up to it. A token's outputs never depend on the
  // batch it is in, so the parts give the whole call's bits.
  std::size_t token_parts(std::size_t group_items, std::size_t tokens) const noexcept {
    constexpr std::size_t tile = 16;
    const std::size_t want = std::size_t(pool_.size()) * split_.prefill_min_items_per_thread;
    if (pool_.size() < 2 || tokens < 2 * tile || group_items >= want) return 1;
    return std::min((want + group_items - 1) / group_items, tokens / tile);
  }

  // Item `it` of a gemm cut into group chunks of `chunk` × `parts` token parts (chunk-major).
  static void run_item(const weight& w, const gemm_args& a, std::size_t chunk, std::size_t parts, std::size_t it) {
    gemm_args part = a;
    part.group_begin = it / parts * chunk;
    part.group_end = std::min(packed_groups(a.n_rows), part.group_begin + chunk);
    if (parts > 1) {
      const std::size_t len = ((a.n_tok + parts - 1) / parts + 15) & ~std::size_t(15);  // whole tiles
      const std::size_t t0 = std::min(a.n_tok, it % parts * len), t1 = std::min(a.n_tok, t0 + len);
      if (t0 == t1) return;
      part.act += t0 * a.act_stride;
      part.y += t0 * a.y_stride;
      part.n_tok = t1 - t0;
    }
    w.kernels->gemm(part);
  }

  using matmul_output = std::pair<const weight*, tensor>;  // y = w · x

  // Matrices that read the same input (a layer's Q, K and V): y_i = W_i · x. When all are
  // packed and quantize activations alike, x is quantized once and every matrix's chunks run
  // in one pool job; otherwise one matmul each. A decode step's pool job is a wake and a wait
  // of every thread on a few microseconds of work, and each job's last chunk leaves a thread
  // idle. The chunks and kernels are matmul_packed's, so the outputs are the same bits.
  void matmul_shared(tensor x, std::initializer_list<matmul_output> outs) {
    const weight& w0 = *outs.begin()->first;
    bool fused = outs.size() > 1 && outs.size() <= max_shared_outputs;
    for (const auto& [w, y] : outs) {
      fused = fused && w->packed && w->kernels->act_type == w0.kernels->act_type &&
              w->kernels->prepare_act == w0.kernels->prepare_act && w->ne[0] == x.cols;
      if (w->ne[0] != x.cols || w->ne[1] != y.cols || x.rows != y.rows) return matmul(*w, x, y);  // throws
    }
    if (!fused) {
      for (const auto& [w, y] : outs) matmul(*w, x, y);
      return;
    }
    const std::size_t stride = w0.kernels->gemm_act_bytes(x.cols);
    std::byte* act = act_scratch_.data();
    quantize_rows_for_gemm(*w0.kernels, x, act, stride);
    // Items: each matrix's chunks in turn; first[i] is matrix i's first item.
    gemm_args args[max_shared_outputs];
    std::size_t chunk[max_shared_outputs], parts[max_shared_outputs], first[max_shared_outputs + 1] = {0};
    std::size_t m = 0, group_items = 0;
    for (const auto& [w, y] : outs) {
      args[m] = packed_args(*w, act, stride, x.rows, y);
      chunk[m] = packed_chunk(*w, x.rows);
      group_items += (packed_groups(args[m].n_rows) + chunk[m] - 1) / chunk[m];
      ++m;
    }
    // Token parts by the job's items (all matrices'), the same for each matrix.
    const std::size_t n_parts = token_parts(group_items, x.rows);
    for (std::size_t i = 0; i < m; ++i) {
      parts[i] = n_parts;
      first[i + 1] = first[i] + (packed_groups(args[i].n_rows) + chunk[i] - 1) / chunk[i] * parts[i];
    }
    const auto* w_of = outs.begin();
    pool_.parallel_for(first[m], 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t it = b; it < e; ++it) {
        std::size_t i = 0;
        while (it >= first[i + 1]) ++i;
        run_item(*w_of[i].first, args[i], chunk[i], parts[i], it - first[i]);
      }
    });
  }

  // A dense SwiGLU FFN: out = down · (silu(gate · x) ⊙ (up · x)); g and u (as wide as gate's
  // rows) are scratch. Packed matrices run in two pool jobs instead of three (and a serial
  // SwiGLU): gate and up chunk by chunk, where the thread that finishes the last chunk of a
  // block of rows applies SwiGLU to the block and quantizes it for down (a block is a whole
  // number of down's activation blocks), then down. Same kernels, same chunks, the same
  // SwiGLU and quantization of each element: the outputs are matmul/swiglu/matmul's bits.
  void swiglu_ffn(const weight& gate, const weight& up, const weight& down, tensor x, tensor g, tensor u, tensor out) {
    const std::size_t n_ff = gate.ne[1];
    const format_kernels &kg = *gate.kernels, &kd = *down.kernels;
    const std::size_t block_rows = ffn_block_rows(kd), block_groups = block_rows / pack_rows;
    const std::size_t stride_in = kg.gemm_act_bytes(x.cols), stride_ff = kd.gemm_act_bytes(n_ff);
    // matmul_packed's chunk, cut to divide a block.
    std::size_t chunk = std::min(packed_chunk(gate, x.rows), std::max<std::size_t>(1, block_groups));
    while (block_groups % chunk) --chunk;
    const bool fused = block_rows && gate.packed && up.packed && down.packed && up.kernels->act_type == kg.act_type &&
                       up.kernels->prepare_act == kg.prepare_act && up.ne[1] == n_ff && down.ne[0] == n_ff &&
                       gate.ne[0] == x.cols && up.ne[0] == x.cols && g.cols == n_ff && u.cols == n_ff &&
                       g.rows == x.rows && u.rows == x.rows && out.rows == x.rows && out.cols == down.ne[1] &&
                       n_ff % block_rows == 0 && n_ff / block_rows <= ffn_done_.size() &&
                       std::size_t(x.rows) * (stride_in + stride_ff) <= act_scratch_.size();
    if (!fused) {
      matmul(gate, x, g);
      matmul(up, x, u);
      swiglu(g, u, g);
      return matmul(down, g, out);
    }
    std::byte* act_in = act_scratch_.data();
    std::byte* act_ff = act_in + std::size_t(x.rows) * stride_in;
    quantize_rows_for_gemm(kg, x, act_in, stride_in);
    const gemm_args ag = packed_args(gate, act_in, stride_in, x.rows, g), au = packed_args(up, act_in, stride_in, x.rows, u);
    // Items in block order, gate and up chunks alternating: both threads finish a block soon.
    const std::size_t blocks = n_ff / block_rows, per_block = 2 * block_rows / (chunk * pack_rows);
    for (std::size_t b = 0; b < blocks; ++b) ffn_done_[b] = 0;
    const std::size_t act_block = kd.act_block_bytes * (block_rows / kd.act_block_elems);
    // SwiGLU of block b for tokens [t0, t1), quantized for down.
    const auto swiglu_block = [&](std::size_t b, std::uint32_t t0, std::uint32_t t1) {
      const std::size_t c0 = b * block_rows;
      for (std::uint32_t t = t0; t < t1; ++t) {
        float* gr = g.row(t) + c0;
        const float* ur = u.row(t) + c0;
        for (std::size_t i = 0; i < block_rows; ++i) gr[i] = silu(gr[i]) * ur[i];
        kd.quantize_act_row(gr, act_ff + t * stride_ff + b * act_block, block_rows);
      }
    };
    // Long batches take SwiGLU out of the gate/up job into its own, split by tokens: done by
    // whoever finished a block's last chunk, the last block's SwiGLU (all tokens, one thread)
    // was the job's tail, long with many threads (work_split::swiglu_pass_min_tokens).
    const bool pass = split_.swiglu_pass_min_tokens && x.rows >= split_.swiglu_pass_min_tokens;
    pool_.parallel_for(blocks * per_block, 1, [&](std::size_t beg, std::size_t end, unsigned) {
      for (std::size_t it = beg; it < end; ++it) {
        const std::size_t b = it / per_block, j = it % per_block;
        gemm_args part = j % 2 ? au : ag;
        part.group_begin = b * block_rows / pack_rows + j / 2 * chunk;
        part.group_end = part.group_begin + chunk;
        (j % 2 ? up : gate).kernels->gemm(part);
        // acq_rel: the thread that completes the block sees the other threads' rows of it.
        if (pass || std::atomic_ref<std::uint32_t>(ffn_done_[b]).fetch_add(1, std::memory_order_acq_rel) + 1 != per_block)
          continue;
        swiglu_block(b, 0, x.rows);
      }
    });
    if (pass) {
      const std::size_t tok_chunk = std::max<std::size_t>(1, x.rows / (pool_.size() * 4));
      pool_.parallel_for(x.rows, tok_chunk, [&](std::size_t b, std::size_t e, unsigned) {
        for (std::size_t blk = 0; blk < blocks; ++blk) swiglu_block(blk, std::uint32_t(b), std::uint32_t(e));
        if (kd.prepare_act)
          for (std::size_t t = b; t < e; ++t) kd.prepare_act(act_ff + t * stride_ff, n_ff);
      });
    } else if (kd.prepare_act) {
      pool_.parallel_for(x.rows, 1, [&](std::size_t b, std::size_t e, unsigned) {
        for (std::size_t t = b; t < e; ++t) kd.prepare_act(act_ff + t * stride_ff, n_ff);
      });
    }
    run_packed(down, packed_args(down, act_ff, stride_ff, x.rows, out), x.rows);
  }

  void rope(tensor x, std::uint32_t n_heads, const graph::rope_params& p, const weight* freq_factors) {
    if (p.n_rot > arch::limits::max_head_dim || p.n_rot * n_heads > x.cols)
      throw error("rope: " + std::to_string(n_heads) + " heads of " + std::to_string(p.n_rot) +
                  " rotated dims do not fit a row of " + std::to_string(x.cols) + " (limit " +
                  std::to_string(arch::limits::max_head_dim) + " per head)");
    const std::span<const std::int32_t> pos = step_.tokens.positions;
    const float* ff = freq_factors && *freq_factors ? reinterpret_cast<const float*>(freq_factors->data) : nullptr;
    pool_.parallel_for(x.rows, 1, [&](std::size_t b, std::size_t e, unsigned) {
      float c[arch::limits::max_head_dim / 2], s[arch::limits::max_head_dim / 2];
      for (std::size_t t = b; t < e; ++t) {
        rope_angles(pos[t], p.n_rot, p.base, p.freq_scale, ff, c, s);
        for (std::uint32_t h = 0; h < n_heads; ++h) rope_head(x.row(t) + h * p.n_rot, p.n_rot, p.neox, c, s);
      }
    });
  }

  void scale_by_position(tensor x, const graph::position_scale_params& p) {
    for (std::uint32_t t = 0; t < x.rows; ++t) {
      const float f = position_scale(step_.tokens.positions[t], p.scale, p.floor_base);
      for (std::uint32_t i = 0; i < x.cols; ++i) x.row(t)[i] *= f;
    }
  }

  void kv_store(kv_state& kv, std::uint32_t layer, tensor k, tensor v) {
    const graph::batch& b = step_.tokens;
    const kv::block_table& table = step_kv();
    const bool compressed = kv::is_compressed(kv.config().type_k) || kv::is_compressed(kv.config().type_v);
    if (!compressed || b.size() < 4 || !attn_.reserved()) {
      for (std::size_t t = 0; t < b.size(); ++t)
        kv.store(layer, b.seq_ids[t], std::uint32_t(b.positions[t]),
                 table.slot(b.seq_ids[t], std::uint32_t(b.positions[t])), k.row(t), v.row(t));
      return;
    }
    // Quantizing on append (3 Hadamard rounds per head vector) is worth spreading over the pool
    // in prefill; tokens write distinct slots and ring rows. Each thread encodes in its own
    // attention scratch (unused until attention runs).
    pool_.parallel_for(b.size(), 4, [&](std::size_t beg, std::size_t end, unsigned tid) {
      float* scratch = attn_.encode_scratch(tid);
      for (std::size_t t = beg; t < end; ++t)
        kv.store(layer, b.seq_ids[t], std::uint32_t(b.positions[t]),
                 table.slot(b.seq_ids[t], std::uint32_t(b.positions[t])), k.row(t), v.row(t), scratch);
    });
  }

  // Softmax attention of each query head over its sequence's cached positions [start, pos]
  // (kernels/cpu/attention.hpp).
  void attention(const kv_state& kv, std::uint32_t layer, tensor q, const graph::attention_params& p, tensor out) {
    if (p.head_dim > attention_runner::max_head_dim || p.n_head_kv == 0 || p.n_head % p.n_head_kv)
      throw error("attention: head_dim " + std::to_string(p.head_dim) + " (limit " +
                  std::to_string(attention_runner::max_head_dim) + "), " + std::to_string(p.n_head) + " heads over " +
                  std::to_string(p.n_head_kv) + " KV heads");
    attn_.run(pool_, *kernels_, kv, step_kv(), layer, step_.tokens, q, p, out);
  }

  // out = silu(gate) ⊙ up (out may alias gate).
  void swiglu(tensor gate, tensor up, tensor out) {
    pool_.parallel_for(gate.rows, 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t t = b; t < e; ++t)
        for (std::uint32_t i = 0; i < gate.cols; ++i) out.row(t)[i] = silu(gate.row(t)[i]) * up.row(t)[i];
    });
  }

  void add(tensor a, tensor b, tensor out) {
    for (std::uint32_t t = 0; t < a.rows; ++t)
      for (std::uint32_t i = 0; i < a.cols; ++i) out.row(t)[i] = a.row(t)[i] + b.row(t)[i];
  }

  // Rows whose logits flag is set in the step, in order.
  void select_rows(tensor x, tensor out) {
    const std::span<const std::uint8_t> flags = step_.tokens.logits;
    std::uint32_t o = 0;
    for (std::uint32_t t = 0; t < x.rows; ++t)
      if (flags[t]) std::memcpy(out.row(o++), x.row(t), x.cols * sizeof(float));
    for (; o > 0 && o < out.rows; ++o) std::memcpy(out.row(o), out.row(o - 1), x.cols * sizeof(float));  // padded outputs
  }

  // Ops run as they are called: nothing is pending at the end of a step.
  void finish() noexcept {}

  // Index of each row's largest value, lowest index among ties (greedy decoding).
  void argmax(tensor src, std::span<std::int32_t> dst) {
    if (dst.empty()) throw error("argmax: no room for an id");
    const auto rows = std::uint32_t(std::min<std::size_t>(src.rows, dst.size()));
    for (std::uint32_t r = 0; r < rows; ++r) {
      const float* x = src.row(r);
      std::uint32_t best = 0;
      for (std::uint32_t i = 1; i < src.cols; ++i)
        if (x[i] > x[best]) best = i;
      dst[r] = std::int32_t(best);
    }
  }

  // Host rows into a tensor (hidden states handed over from another backend).
  void write(tensor dst, std::span<const float> src) {
    for (std::uint32_t r = 0; r < dst.rows; ++r)
      std::memcpy(dst.row(r), src.data() + std::size_t(r) * dst.cols, dst.cols * sizeof(float));
  }

  void read(tensor src, std::span<float> dst) {
    if (dst.size() < src.cols) throw error("read: destination of " + std::to_string(dst.size()) + " floats holds no row of " + std::to_string(src.cols));
    const auto rows = std::uint32_t(std::min<std::size_t>(src.rows, dst.size() / src.cols));
    for (std::uint32_t r = 0; r < rows; ++r) std::memcpy(dst.data() + std::size_t(r) * src.cols, src.row(r), src.cols * 4);
  }

  using moe_weights = graph::moe_weights<weight>;
  using moe_scratch = graph::moe_scratch<tensor>;

  // Mixture of experts over the rows of x; only the selected experts run, grouped by expert so
  // each expert's weights are read once per step. out = Σ_selected w_e · FFN_e(input_e).
  void moe_ffn(const moe_weights& mw, const graph::moe_params& mp, tensor x, const moe_scratch& s, tensor out) {
    matmul(*mw.gate_inp, x, s.logits.first_rows(x.rows));
    moe_route(s.logits.first_rows(x.rows), mp);
    moe_experts(mw, mp, x, s, out);
  }

  // The routing half of moe_ffn: each row's top n_used experts of its router logits (rows x
  // n_expert) and their weights, kept for moe_experts(). A GPU backend whose experts run here
  // hands over its router logits (runtime/vulkan/cpu_experts.cpp).
  void moe_route(tensor logits, const graph::moe_params& mp) { moe_.route(logits, mp); }
  // The last moe_route() cut to each row's first `kept` of k ranks (moe_experts then runs with
  // n_used = kept): the CPU's share where a GPU computes the other ranks.
  void moe_keep_first_ranks(std::uint32_t k, std::uint32_t kept) { moe_.keep_first_ranks(k, kept); }

  // Steps of at most `pairs` routed pairs run the packed experts in one pool job
  // (moe_runner::run_packed); 0: never. For tests and measurements; the results are the same bits.
  void set_moe_fuse_pairs(std::uint32_t pairs) noexcept { moe_.set_fuse_pairs(pairs); }

  // The experts half of moe_ffn over the routing of the last moe_route() (x has its rows); the
  // router weight (mw.gate_inp) is not read. ff_begin > 0: the experts' intermediate columns
  // from ff_begin on only (moe_runner::run_packed; packed experts only), for a device that
  // computes the columns before it and adds the two sums.
  void moe_experts(const moe_weights& mw, const graph::moe_params& mp, tensor x, const moe_scratch& s, tensor out,
                   std::uint32_t ff_begin = 0) {
    const std::uint32_t n = x.rows, E = std::uint32_t(mw.gate_exps->ne[2]), k = mp.n_used;
    if (n != moe_.routed_rows()) throw error("moe: experts over " + std::to_string(n) + " rows, routed " + std::to_string(moe_.routed_rows()));
    const std::int32_t* ids = moe_.ids();
    const float* wts = moe_.weights();
    for (std::uint32_t t = 0; t < n; ++t) std::fill(out.row(t), out.row(t) + out.cols, 0.0f);
    const bool weight_input = mp.weighting == graph::moe_weighting::input;
    if (moe_.run_packed(pool_, act_scratch_, mw, n * k, k, weight_input, x, s, out, ff_begin)) return;
    if (ff_begin) throw error("moe: a range of intermediate columns needs packed experts ('" + std::string(mw.gate_exps->name) + "' has none)");
    std::vector<std::uint32_t>& rows = moe_.rows();
    for (std::uint32_t e = 0; e < E; ++e) {
      rows.clear();
      for (std::uint32_t i = 0; i < n * k; ++i)
        if (ids[i] == std::int32_t(e)) rows.push_back(i);
      if (rows.empty()) continue;
      const std::uint32_t m = std::uint32_t(rows.size());
      for (std::uint32_t r = 0; r < m; ++r) {
        const float* src = x.row(rows[r] / k);
        float* dst = s.xin.row(r);
        const float f = weight_input ? wts[rows[r]] : 1.0f;
        for (std::uint32_t c = 0; c < x.cols; ++c) dst[c] = weight_input ? src[c] * f : src[c];
      }
      const weight g = mw.gate_exps->slab(e), u = mw.up_exps->slab(e), d = mw.down_exps->slab(e);
      matmul(g, s.xin.first_rows(m), s.gate.first_rows(m));
      matmul(u, s.xin.first_rows(m), s.up.first_rows(m));
      swiglu(s.gate.first_rows(m), s.up.first_rows(m), s.gate.first_rows(m));
      matmul(d, s.gate.first_rows(m), s.y.first_rows(m));
      for (std::uint32_t r = 0; r < m; ++r) {
        const float f = weight_input ? 1.0f : wts[rows[r]];
        float* o = out.row(rows[r] / k);
        const float* y = s.y.row(r);
        for (std::uint32_t c = 0; c < out.cols; ++c) o[c] += f * y[c];
      }
    }
  }

 private:
  // Every row of x quantized for a packed gemm, rows `stride` bytes apart from act.
  void quantize_rows_for_gemm(const format_kernels& k, tensor x, std::byte* act, std::size_t stride) {
    pool_.parallel_for(x.rows, 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t t = b; t < e; ++t) quantize_for_gemm(k, x.row(std::uint32_t(t)), act + t * stride, x.cols);
    });
  }

  // The gemm arguments of packed w over `rows` activation rows at act (all groups).
  static gemm_args packed_args(const weight& w, const std::byte* act, std::size_t stride, std::size_t rows, tensor y) {
    gemm_args a;
    a.w = w.packed;
    a.group_bytes = pack_rows * w.row_bytes;
    a.act = reinterpret_cast<const std::uint8_t*>(act);
    a.act_stride = stride;
    a.act_row_bytes = w.kernels->act_row_bytes(w.ne[0]);
    a.n_tok = rows;
    a.y = y.data;
    a.y_stride = y.stride;
    a.n_rows = w.ne[1];
    a.k = w.ne[0];
    a.group_begin = 0;
    a.group_end = packed_groups(a.n_rows);
    return a;
  }

  // Groups per chunk of a packed gemm: a thread's share cut in split_.prefill_chunks_per_thread
  // (batches, whose chunks also stay within 256 KiB of weights, in L2 while every token tile
  // passes) or, for one token, in split_.decode_chunks_per_thread, no chunk under
  // split_.decode_min_item_bytes.
  std::size_t packed_chunk(const weight& w, std::size_t rows) const noexcept {
    const std::size_t groups = packed_groups(w.ne[1]), group_bytes = pack_rows * w.row_bytes;
    const std::size_t cuts = std::max(1u, rows > 1 ? split_.prefill_chunks_per_thread : split_.decode_chunks_per_thread);
    std::size_t chunk = std::max<std::size_t>(1, groups / (pool_.size() * cuts));
    if (rows <= 1 && split_.decode_min_item_bytes)
      chunk = std::max(chunk, std::min(groups, (split_.decode_min_item_bytes + group_bytes - 1) / group_bytes));
    return std::min(chunk, std::max<std::size_t>(1, (256u << 10) / group_bytes));
  }

  // Rows of a swiglu_ffn block: 256, a whole number of 16-row groups and of down's activation
  // blocks (32 or 256 elements), or 0 when the format's blocks do not divide it.
  static std::size_t ffn_block_rows(const format_kernels& down) noexcept {
    constexpr std::size_t rows = 256;
    return down.act_block_elems && rows % down.act_block_elems == 0 ? rows : 0;
  }

  const kv::block_table& step_kv() const {
    if (!step_.kv) throw error("CPU backend: a KV op in a step begun without a block table");
    return *step_.kv;
  }

  // Packs every 2-D slab of w into a new buffer (in parallel) and points w at it.
  void pack(weight& w) {
    const auto& k = *w.kernels;
    const std::size_t rows = w.ne[1], slabs = w.ne[2] * w.ne[3], groups = packed_groups(rows);
    const std::size_t slab_bytes = groups * pack_rows * w.row_bytes;
    const std::uint8_t* src = reinterpret_cast<const std::uint8_t*>(w.data);
    std::uint8_t* dst = packed_.emplace_back(slab_bytes * slabs).data();
    pool_.parallel_for(slabs * groups, 4, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t i = b; i < e; ++i) {
        const std::size_t s = i / groups, g = i % groups;
        k.pack_group(src + s * rows * w.row_bytes, rows, w.ne[0], g, dst + s * slab_bytes + g * pack_rows * w.row_bytes);
      }
    });
    w.packed = dst;
    w.packed_slab_bytes = slab_bytes;
  }

  thread_pool pool_;
  const kernel_table* kernels_;
  work_split split_;
  graph::step_inputs step_;
  std::uint32_t max_cols_ = 0;    // widest buffer allocated
  std::uint32_t max_tokens_ = 0;  // per step (reserve), for the attention scratch (make_kv)
  std::vector<std::byte> act_scratch_;
  attention_runner attn_;
  std::vector<byte_buffer> packed_;  // packed weights (load)
  moe_runner moe_;  // MoE routing and the packed experts (moe_runner.hpp)
  static constexpr std::size_t max_shared_outputs = 4;  // matmul_shared's matrices in one job
  std::vector<std::uint32_t> ffn_done_;  // swiglu_ffn: chunks finished per block of rows (atomic_ref)
  std::unique_ptr<weight_stream> stream_;  // disk-backed tensors (set_weight_stream), or none
};

static_assert(graph::backend<backend>);

}  // namespace strata::kernels::cpu
