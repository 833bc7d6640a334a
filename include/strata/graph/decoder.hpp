// The decoder layer graph, written once for every architecture and backend. Architecture
// differences are compile-time traits (Arch) and per-layer plans, which this file turns into the
// plain parameters of the backend ops (graph/backend_contract.hpp); the Backend either executes
// each op at once (CPU) or records it (Vulkan; finish() then submits the step). Spec: docs/spec/architectures.md §3.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "strata/arch/architecture.hpp"
#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/graph/backend_contract.hpp"
#include "strata/graph/batch.hpp"
#include "strata/kv/block_table.hpp"

namespace strata::graph {

struct decoder_options {
  std::uint32_t max_batch = 512;  // most tokens per forward() call (prefill chunk)
  std::uint32_t max_outputs = 0;  // most logits rows per forward() (0: max_batch)
  // A slice of the network, for splitting it over backends (-ngl): layers
  // [first_layer, first_layer + n_layers) (n_layers 0: through the last). Without `embed` the
  // step starts from hidden states handed to forward(); without `head` it ends by handing the
  // hidden states out instead of computing logits. The KV cache holds the slice's layers only.
  std::uint32_t first_layer = 0;
  std::uint32_t n_layers = 0;
  bool embed = true;
  bool head = true;
};

template <arch::architecture Arch, backend Backend>
class decoder {
 public:
  using weight = typename Backend::weight;
  using tensor = typename Backend::tensor;
  using buffer = typename Backend::buffer;
  using kv_state = typename Backend::kv_state;

  struct layer_weights {
    arch::layer_plan plan;
    weight attn_norm, wq, wk, wv, wo;
    weight q_norm, k_norm;                        // qwen3 / qwen3moe
    weight ffn_norm;
    weight ffn_gate, ffn_up, ffn_down;            // dense layers
    weight gate_inp, gate_exps, up_exps, down_exps;  // MoE layers
    weight gate_shexp, up_shexp, down_shexp;      // llama4 shared expert
  };

  decoder(Backend& be, const gguf::reader& r, const decoder_options& opt = {})
      : be_(&be), hp_(Arch::load_hparams(r)), opt_(opt), source_(r.source()) {
    if (opt_.first_layer >= hp_.n_layer)
      throw error("layer slice starts at " + std::to_string(opt_.first_layer) + " but the model has " +
                  std::to_string(hp_.n_layer) + " layers");
    end_layer_ = opt_.n_layers ? opt_.first_layer + opt_.n_layers : hp_.n_layer;
    if (end_layer_ > hp_.n_layer)
      throw error("layer slice [" + std::to_string(opt_.first_layer) + ", " + std::to_string(end_layer_) +
                  ") exceeds the model's " + std::to_string(hp_.n_layer) + " layers");
    load_weights(r);
    allocate();
  }

  // Layers this decoder runs: its KV cache holds n_layers() layers, the slice's first as layer 0.
  std::uint32_t n_layers() const noexcept { return end_layer_ - opt_.first_layer; }
  const arch::hparams& hparams() const noexcept { return hp_; }

  // Runs one step: b's tokens are stored in kv at the slots `table` reserved for their positions
  // (the caller reserves before and commits after), logits rows for flagged tokens go to
  // `logits` (n_outputs × n_vocab).
  // A slice without `embed` reads its input rows from hidden_in (n × n_embd); one without
  // `head` writes its output rows to hidden_out and produces no logits.
  // With argmax_out (one id per logits row) the step returns each row's argmax instead of the
  // logits (greedy decoding; the GPU then reads back 4 bytes per row). With embd_out the flagged
  // rows' final-norm hidden states (n_outputs × n_embd, what embedding models pool) are written
  // there and the LM head is skipped.
  void forward(const batch& b, const kv::block_table& table, kv_state& kv, std::span<float> logits,
               std::span<const float> hidden_in = {}, std::span<float> hidden_out = {},
               std::span<std::int32_t> argmax_out = {}, std::span<float> embd_out = {}) {
    std::uint32_t n = std::uint32_t(b.size());  // from begin() on: the step's rows, padded
    if (n == 0) return;
    if (n > opt_.max_batch)
      throw error("batch of " + std::to_string(n) + " tokens exceeds the maximum " + std::to_string(opt_.max_batch));
    const std::size_t n_out = opt_.head ? b.n_outputs() : 0;
    const bool greedy = !argmax_out.empty(), embed = !embd_out.empty();
    if (embed ? embd_out.size() < n_out * hp_.n_embd
              : greedy ? argmax_out.size() < n_out : logits.size() < n_out * hp_.n_vocab)
      throw error(embed ? "embedding buffer too small" : greedy ? "argmax buffer too small" : "logits buffer too small");
    const std::size_t hidden = std::size_t(n) * hp_.n_embd;
    if (!opt_.embed && hidden_in.size() < hidden) throw error("hidden-state input too small for the batch");
    if (!opt_.head && hidden_out.size() < hidden) throw error("hidden-state output too small for the batch");
    if (!embed && n_out > max_outputs())  // embedding rows live in the activation scratch (max_batch rows)
      throw error("batch asks for " + std::to_string(n_out) + " logits rows, the maximum is " +
                  std::to_string(max_outputs()));
    for (auto t : b.tokens)
      if (t < 0 || std::uint32_t(t) >= hp_.n_vocab)
        throw error("token id " + std::to_string(t) + " out of range (vocabulary size " + std::to_string(hp_.n_vocab) + ")");

    Backend& be = *be_;
    const step_output out_kind = !opt_.head || embed ? step_output::hidden
                                 : greedy            ? step_output::argmax
                                                     : step_output::logits;
    // A recording backend runs the step as one of a few token counts (backend_contract.hpp,
    // step_rows): the batch grows by copies of its last token, which produce logits too when
    // every token does (decode), else the output rows are padded on their own.
    const std::uint32_t n_batch = n;
    std::uint32_t outs = std::uint32_t(n_out);
    bool every_row_out = n_out == n;
    const batch* step_batch = &b;
    if constexpr (requires { be.step_rows(n); }) {
      if (opt_.embed) {
        const std::uint32_t rows = std::min(be.step_rows(n), opt_.max_batch);
        every_row_out = every_row_out && rows <= max_outputs();
        outs = every_row_out ? rows : n_out ? std::min({be.step_rows(std::uint32_t(n_out)), rows, max_outputs()}) : 0;
        if (rows > n) step_batch = &pad(b, rows, every_row_out);
        n = rows;
      }
    }
    be.begin(step_inputs{*step_batch, &table, out_kind, outs, n - n_batch});
    const float eps = hp_.rms_eps;
    tensor x = x_.view(n), a = a_.view(n), q = q_.view(n), k = k_.view(n), v = v_.view(n);
    tensor att = att_.view(n), o = o_.view(n);
    if (opt_.embed) be.embed(tok_embd_, x);
    else be.write(x, hidden_in.first(hidden));  // not padded: no embedding, no step_rows

    for (std::uint32_t il = opt_.first_layer; il < end_layer_; ++il) {
      const layer_weights& L = layers_[il - opt_.first_layer];
      const std::uint32_t kl = il - opt_.first_layer;  // this slice's KV layer
      const arch::layer_plan& p = L.plan;
      if constexpr (requires { be.begin_layer(il); }) be.begin_layer(il);  // optional (backend_contract.hpp)
      be.rms_norm(x, &L.attn_norm, eps, a);
      if constexpr (requires { be.matmul_shared(a, {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}}); }) {
        be.matmul_shared(a, {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}});  // optional (backend_contract.hpp)
      } else {
        be.matmul(L.wq, a, q);
        be.matmul(L.wk, a, k);
        be.matmul(L.wv, a, v);
      }
      tensor qh = q.split_rows(hp_.n_head), kh = k.split_rows(hp_.n_head_kv);
      if constexpr (Arch::qk_norm == arch::qk_norm_kind::rms_weighted_before_rope) {
        be.rms_norm(qh, &L.q_norm, eps, qh);
        be.rms_norm(kh, &L.k_norm, eps, kh);
      }
      if (p.rope) {
        const rope_params rp{Arch::rope == arch::rope_kind::neox, hp_.n_rot, p.rope_base, hp_.rope_freq_scale};
        const weight* ff = rope_freqs_ ? &rope_freqs_ : nullptr;
        be.rope(q, hp_.n_head, rp, ff);
        be.rope(k, hp_.n_head_kv, rp, ff);
      }
      if constexpr (Arch::qk_norm == arch::qk_norm_kind::rms_unweighted_after_rope) {
        if (p.qk_norm) {
          be.rms_norm(qh, nullptr, eps, qh);
          be.rms_norm(kh, nullptr, eps, kh);
        }
      }
      if (p.attn_temp_scale != 0.0) be.scale_by_position(q, {p.attn_temp_scale, p.attn_temp_floor});
      be.kv_store(kv, kl, k, v);
      be.attention(kv, kl, q,
                   {hp_.n_head, hp_.n_head_kv, hp_.head_dim, p.attn_chunk, 1.0f / std::sqrt(float(hp_.head_dim))},
                   att);
      be.matmul(L.wo, att, o);
      be.add(x, o, x);

      be.rms_norm(x, &L.ffn_norm, eps, a);
      if (p.moe) {
        be.moe_ffn({&L.gate_inp, &L.gate_exps, &L.up_exps, &L.down_exps}, moe_routing(), a,
                   {moe_logits_.view(n), moe_in_.all(), moe_gate_.all(), moe_up_.all(), moe_y_.all()}, o);
        if constexpr (Arch::shared_expert) {
          dense_ffn(L.gate_shexp, L.up_shexp, L.down_shexp, a, ff_gate_.view(n), ff_up_.view(n), att);
          be.add(o, att, o);
        }
      } else {
        dense_ffn(L.ffn_gate, L.ffn_up, L.ffn_down, a, ff_gate_.view(n), ff_up_.view(n), o);
      }
      be.add(x, o, x);
      if constexpr (requires { be.end_layer(il); }) be.end_layer(il);
    }

    if (!opt_.head) {
      be.read(x, hidden_out.first(hidden));
      return be.finish();
    }
    if (n_out == 0) return be.finish();
    if constexpr (requires { be.begin_output(); }) be.begin_output();  // optional (backend_contract.hpp)
    tensor xo = a.first_rows(outs);
    if (every_row_out) be.rms_norm(x, &output_norm_, eps, xo);
    else {
      be.select_rows(x, xo);
      be.rms_norm(xo, &output_norm_, eps, xo);
    }
    // Reads hand back the batch's own rows (the first n_out of a padded step's outs).
    if (embed) {
      be.read(xo, embd_out.first(n_out * hp_.n_embd));
      return be.finish();
    }
    tensor lg = logits_.view(outs);
    be.matmul(hp_.tied_output ? tok_embd_ : output_, xo, lg);
    if (greedy) be.argmax(lg, argmax_out.first(n_out));
    else be.read(lg, logits.first(n_out * hp_.n_vocab));
    be.finish();
  }

 private:
  void dense_ffn(const weight& gate, const weight& up, const weight& down, tensor in, tensor g, tensor u, tensor out) {
    const auto width = std::uint32_t(gate.ne[1]);  // scratch is as wide as the widest FFN
    g = g.first_cols(width);
    u = u.first_cols(width);
    if constexpr (requires { be_->swiglu_ffn(gate, up, down, in, g, u, out); }) {
      return be_->swiglu_ffn(gate, up, down, in, g, u, out);  // optional (backend_contract.hpp)
    }
    be_->matmul(gate, in, g);
    be_->matmul(up, in, u);
    be_->swiglu(g, u, g);
    be_->matmul(down, g, out);
  }

  std::uint32_t max_outputs() const noexcept { return opt_.max_outputs ? opt_.max_outputs : opt_.max_batch; }

  // b grown to `rows` tokens by copies of its last one (flagged for logits when `flag_copies`),
  // in storage reserved by allocate(): no allocation per step.
  const batch& pad(const batch& b, std::uint32_t rows, bool flag_copies) {
    const std::size_t last = b.size() - 1;
    pad_tokens_.assign(b.tokens.begin(), b.tokens.end());
    pad_tokens_.resize(rows, b.tokens[last]);
    pad_positions_.assign(b.positions.begin(), b.positions.end());
    pad_positions_.resize(rows, b.positions[last]);
    pad_seq_ids_.assign(b.seq_ids.begin(), b.seq_ids.end());
    pad_seq_ids_.resize(rows, b.seq_ids[last]);
    pad_logits_.assign(b.logits.begin(), b.logits.end());
    pad_logits_.resize(rows, flag_copies ? 1 : 0);
    padded_ = {pad_tokens_, pad_positions_, pad_seq_ids_, pad_logits_};
    return padded_;
  }

  moe_params moe_routing() const {
    if constexpr (Arch::router == arch::router_kind::sigmoid_topk_weight_input)
      return {moe_gating::sigmoid, moe_weighting::input, hp_.n_expert_used, Arch::shared_expert};
    else
      return {moe_gating::softmax, moe_weighting::output, hp_.n_expert_used, Arch::shared_expert};
  }

  // Loads a tensor and checks its shape (ggml ne order, trailing 1s omitted).
  weight load(const gguf::reader& r, const std::string& name, std::vector<std::uint64_t> ne, bool required = true) {
    const gguf::tensor_info* t = r.find_tensor(name);
    if (!t) {
      if (required) throw format_error(source_ + ": missing tensor '" + name + "' required by architecture '" +
                                       std::string(Arch::gguf_name) + "'");
      return weight{};
    }
    bool ok = t->n_dims <= ne.size() || (t->n_dims == ne.size() + 1 && t->ne[ne.size()] == 1);
    for (std::size_t d = 0; d < 4 && ok; ++d) ok = t->ne[d] == (d < ne.size() ? ne[d] : 1);
    if (!ok) {
      std::string want = "[";
      for (std::size_t d = 0; d < ne.size(); ++d) want += (d ? ", " : "") + std::to_string(ne[d]);
      throw format_error(source_ + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected " + want + "]");
    }
    return be_->load(*t);
  }

  void load_weights(const gguf::reader& r) {
    const std::uint64_t E = hp_.n_embd, V = hp_.n_vocab, Q = hp_.n_embd_q(), KV = hp_.n_embd_kv();
    if (opt_.embed || (opt_.head && hp_.tied_output)) tok_embd_ = load(r, "token_embd.weight", {E, V});
    if (opt_.head) {
      output_norm_ = load(r, "output_norm.weight", {E});
      if (!hp_.tied_output) output_ = load(r, "output.weight", {E, V});
    }
    if (const auto* rf = r.find_tensor("rope_freqs.weight")) {
      if (rf->type != gguf::type_id::f32 || rf->n_elements() != hp_.n_rot / 2)
        throw format_error(source_ + ": tensor 'rope_freqs.weight' must be F32 with " + std::to_string(hp_.n_rot / 2) +
                           " elements, found " + std::string(gguf::name_of(rf->type)) + " " + rf->shape_string());
      rope_freqs_ = be_->load(*rf);
    }
    layers_.resize(end_layer_ - opt_.first_layer);
    for (std::uint32_t il = opt_.first_layer; il < end_layer_; ++il) {
      auto& L = layers_[il - opt_.first_layer];
      const std::string pre = "blk." + std::to_string(il) + ".";
      L.plan = Arch::plan(hp_, il);
      L.attn_norm = load(r, pre + "attn_norm.weight", {E});
      L.wq = load(r, pre + "attn_q.weight", {E, Q});
      L.wk = load(r, pre + "attn_k.weight", {E, KV});
      L.wv = load(r, pre + "attn_v.weight", {E, KV});
      L.wo = load(r, pre + "attn_output.weight", {Q, E});
      if constexpr (Arch::qk_norm == arch::qk_norm_kind::rms_weighted_before_rope) {
        L.q_norm = load(r, pre + "attn_q_norm.weight", {hp_.head_dim});
        L.k_norm = load(r, pre + "attn_k_norm.weight", {hp_.head_dim});
      }
      L.ffn_norm = load(r, pre + "ffn_norm.weight", {E});
      if (L.plan.moe) {
        const std::uint64_t F = hp_.n_ff_exp, X = hp_.n_expert;
        L.gate_inp = load(r, pre + "ffn_gate_inp.weight", {E, X});
        L.gate_exps = load(r, pre + "ffn_gate_exps.weight", {E, F, X});
        L.up_exps = load(r, pre + "ffn_up_exps.weight", {E, F, X});
        L.down_exps = load(r, pre + "ffn_down_exps.weight", {F, E, X});
        if constexpr (Arch::shared_expert) {
          const std::uint64_t S = hp_.n_ff_shexp;
          L.gate_shexp = load(r, pre + "ffn_gate_shexp.weight", {E, S});
          L.up_shexp = load(r, pre + "ffn_up_shexp.weight", {E, S});
          L.down_shexp = load(r, pre + "ffn_down_shexp.weight", {S, E});
        }
      } else {
        const std::uint64_t F = hp_.n_ff;
        L.ffn_gate = load(r, pre + "ffn_gate.weight", {E, F});
        L.ffn_up = load(r, pre + "ffn_up.weight", {E, F});
        L.ffn_down = load(r, pre + "ffn_down.weight", {F, E});
      }
    }
  }

  void allocate() {
    Backend& be = *be_;
    const std::uint32_t B = opt_.max_batch;
    std::uint32_t ff = hp_.n_ff;
    for (const auto& L : layers_)
      if (L.plan.moe) ff = std::max(ff, std::max(hp_.n_ff_exp, hp_.n_ff_shexp));
    x_ = be.alloc(B, hp_.n_embd);
    a_ = be.alloc(B, hp_.n_embd);
    q_ = be.alloc(B, hp_.n_embd_q());
    k_ = be.alloc(B, hp_.n_embd_kv());
    v_ = be.alloc(B, hp_.n_embd_kv());
    att_ = be.alloc(B, std::max(hp_.n_embd_q(), hp_.n_embd));
    o_ = be.alloc(B, hp_.n_embd);
    ff_gate_ = be.alloc(B, ff);
    ff_up_ = be.alloc(B, ff);
    if (opt_.head) logits_ = be.alloc(max_outputs(), hp_.n_vocab);
    pad_tokens_.reserve(B);
    pad_positions_.reserve(B);
    pad_seq_ids_.reserve(B);
    pad_logits_.reserve(B);
    std::uint32_t moe_rows = 0;  // token × expert pairs of a step
    if (hp_.n_expert) {
      moe_rows = B * hp_.n_expert_used;
      moe_logits_ = be.alloc(B, hp_.n_expert);
      moe_in_ = be.alloc(moe_rows, hp_.n_embd);
      moe_gate_ = be.alloc(moe_rows, hp_.n_ff_exp);
      moe_up_ = be.alloc(moe_rows, hp_.n_ff_exp);
      moe_y_ = be.alloc(moe_rows, hp_.n_embd);
    }
    be.reserve(B, moe_rows);
  }

  Backend* be_;
  arch::hparams hp_;
  decoder_options opt_;
  std::uint32_t end_layer_ = 0;
  std::string source_;
  weight tok_embd_, output_norm_, output_, rope_freqs_;
  std::vector<layer_weights> layers_;
  buffer x_, a_, q_, k_, v_, att_, o_, ff_gate_, ff_up_, logits_;
  std::vector<std::int32_t> pad_tokens_, pad_positions_;  // a padded step's batch (pad())
  std::vector<std::uint32_t> pad_seq_ids_;
  std::vector<std::uint8_t> pad_logits_;
  batch padded_;
  buffer moe_logits_, moe_in_, moe_gate_, moe_up_, moe_y_;
};

}  // namespace strata::graph
