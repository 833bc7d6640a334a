// The contract between the decoder graph (graph/decoder.hpp) and a backend that runs it: every op
// the decoder calls, with its inputs, outputs and shapes. Ops are model-free: numbers and tensors
// in, no architecture traits or layer plans (the decoder turns those into the parameters below).
// A backend either executes each op at once (kernels/cpu/backend.hpp) or records it and runs the
// step at finish() (runtime/vulkan/backend.hpp); both are checked against `backend` at compile time.
#pragma once
#include <concepts>
#include <cstdint>
#include <span>

#include "strata/gguf/tensor_info.hpp"
#include "strata/graph/batch.hpp"
#include "strata/kv/block_table.hpp"
#include "strata/kv/kv_config.hpp"

namespace strata::graph {

// What a step hands back to the host. Steps of the same token count and output rows differ
// by it (a recording backend must not replay one kind of step for another).
enum class step_output : std::uint8_t {
  logits,  // read() of the logits rows
  argmax,  // argmax() of the logits rows (greedy decoding)
  hidden,  // read() of hidden-state rows: a slice without the head, or the final-norm rows of
           // the flagged tokens (embeddings; the LM head is skipped)
};

// Inputs of one step, handed to begin() and valid until finish(). Ops that need per-token
// inputs (token ids, positions, KV slots, which rows produce logits) read them from here, so a
// recording backend uploads them once per step and a recorded step can be replayed.
struct step_inputs {
  batch tokens;                          // n tokens: ids, positions, sequence ids, logits flags
  const kv::block_table* kv = nullptr;   // slots of every sequence's positions (null: no KV op runs);
                                         // each token's position is reserved in it already
  step_output output = step_output::logits;  // what the step ends with
  // Rows of the step's output (logits, argmax or embedding rows): at least the flagged tokens;
  // rows beyond them repeat the last flagged token's (a padded step, below). 0: the flagged rows.
  std::uint32_t outputs = 0;
  // Trailing rows of `tokens` that copy its last token (a padded step): counters of tokens leave them out.
  std::uint32_t padding = 0;
};

// x[t] rotated per head by angle(pos_t, i) = freq_scale · pos_t · base^(−2i/n_rot) / freq_factor[i].
struct rope_params {
  bool neox = false;        // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  std::uint32_t n_rot = 0;  // rotated elements per head (even; the first n_rot of head_dim)
  float base = 10000.0f;
  float freq_scale = 1.0f;
};

// x[t] *= 1 + scale · ln(floor((pos_t + 1) / floor_base) + 1) (Llama 4's attention temperature;
// 1 below position floor_base − 1). scale is double: the CPU evaluates the factor in double, as
// llama.cpp does, and stores a float.
struct position_scale_params {
  double scale = 0.0;
  float floor_base = 1.0f;
};

// Causal softmax attention of n_head query heads over n_head_kv cached heads (GQA), per token t
// over its sequence's positions [start, pos_t], start = chunk ? pos_t − pos_t % chunk : 0.
struct attention_params {
  std::uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  std::uint32_t chunk = 0;  // chunked-causal window (0: causal)
  float scale = 1.0f;       // multiplies q·k
};

// Mixture-of-experts routing: the top n_used of the router's logits per token (ties: lower id
// first), each with a weight from `gating`, applied to the expert's output or to its input.
enum class moe_gating {
  softmax,  // softmax over all experts, renormalised over the selected ones
  sigmoid,  // sigmoid of each selected logit
};
enum class moe_weighting { output, input };
struct moe_params {
  moe_gating gating = moe_gating::softmax;
  moe_weighting weighting = moe_weighting::output;
  std::uint32_t n_used = 0;  // experts per token (k)
  bool input_reused = false;  // the graph reads the FFN input again after moe_ffn (a shared expert)
};
template <class Weight>
struct moe_weights {
  const Weight* gate_inp;   // router [n_embd, n_expert]
  const Weight* gate_exps;  // [n_embd, n_ff_exp, n_expert]
  const Weight* up_exps;    // [n_embd, n_ff_exp, n_expert]
  const Weight* down_exps;  // [n_ff_exp, n_embd, n_expert]
};
template <class Tensor>
struct moe_scratch {
  Tensor logits;  // ≥ n rows × n_expert
  Tensor xin;     // ≥ n·n_used rows × n_embd (gathered / weighted inputs)
  Tensor gate;    // ≥ n·n_used rows × n_ff_exp
  Tensor up;      // ≥ n·n_used rows × n_ff_exp
  Tensor y;       // ≥ n·n_used rows × n_embd
};

// A view of rows × cols floats (rows `stride` apart) in backend memory.
template <class T>
concept tensor_view = std::copyable<T> && requires(const T t, std::uint32_t n) {
  { t.rows } -> std::convertible_to<std::uint32_t>;
  { t.cols } -> std::convertible_to<std::uint32_t>;
  { t.first_rows(n) } -> std::same_as<T>;  // the first n rows
  { t.first_cols(n) } -> std::same_as<T>;  // the first n columns of every row
  { t.split_rows(n) } -> std::same_as<T>;  // contiguous rows, each viewed as n rows (one per head)
};

// Optional: be.step_rows(n), the token count a step of n tokens runs as (>= n), for a backend
// that records steps and replays them by shape (runtime/vulkan/step_buckets.hpp). The decoder then
// pads the batch with copies of its last token (same id, position, sequence and KV slot: every
// op computes and stores what it does for that token) and the outputs as step_inputs::outputs
// says; read() and argmax() hand back the real rows only.
// Optional: be.begin_output() after the last block's ops and before the output norm, for a
// backend that records a step's layers and its output apart (runtime/vulkan/step_cache.cpp);
// steps without output rows end without it.
// Optional: be.begin_layer(il) before the first op of block il and be.end_layer(il) after its
// last, for a backend that brings a block's weights in and out of memory (the CPU backend's
// disk tier: kernels/cpu/weight_stream.hpp). The decoder calls them when the backend has them.
// Optional fused ops, same results as the ops they replace; the decoder calls them when the
// backend has them (the CPU backend, whose every op is a pool job): be.matmul_shared(x,
// {{&w1, y1}, {&w2, y2}, ...}) is be.matmul(w_i, x, y_i) for each i (a layer's Q, K and V), and
// be.swiglu_ffn(gate, up, down, x, g, u, out) is matmul(gate, x, g), matmul(up, x, u),
// swiglu(g, u, g), matmul(down, g, out).
// Setup, in this order, before the first step: load() every weight and alloc() every buffer,
// then reserve(), then make_kv(). A step is begin(), ops, finish(). Every op may record rather
// than execute: tensors hold their values only for later ops of the same step, and host memory
// passed to read()/argmax() is written by finish() at the latest (it must stay valid until then).
// read() and argmax() hand back the first rows of their tensor that the host span holds (all of
// them when it holds as many; a span shorter than one row or id is an error).
// Tensors given as input and output of one op may alias only where an op says so.
template <class B>
concept backend = requires(B& be, const gguf::tensor_info& info, const kv::kv_config& kv_cfg,
                           const step_inputs& step, typename B::kv_state& kv, const typename B::kv_state& ckv,
                           const typename B::weight& w, const typename B::weight* wp, const typename B::buffer& buf,
                           typename B::tensor t, std::uint32_t u, float f, const rope_params& rope,
                           const position_scale_params& pscale, const attention_params& attn,
                           const moe_params& moe, const moe_weights<typename B::weight>& mw,
                           const moe_scratch<typename B::tensor>& ms, std::span<float> host_out,
                           std::span<const float> host_in, std::span<std::int32_t> ids_out) {
  requires tensor_view<typename B::tensor>;
  // weight: a GGUF tensor as the backend stores it; ne[] as in GGUF; false when not loaded.
  { w.ne[0] } -> std::convertible_to<std::uint64_t>;
  { static_cast<bool>(w) };
  { buf.view(u) } -> std::same_as<typename B::tensor>;  // its first u rows
  { buf.all() } -> std::same_as<typename B::tensor>;

  // --- setup -------------------------------------------------------------------------------
  // A weight for `info`, whose bytes stay mapped for the backend's lifetime; throws naming the
  // tensor when its type or shape is not supported.
  { be.load(info) } -> std::same_as<typename B::weight>;
  // rows × cols floats of activation memory.
  { be.alloc(u, u) } -> std::same_as<typename B::buffer>;
  // Once, after the last load()/alloc(): sizes per-step scratch for steps of at most
  // max_tokens (first u) tokens and max_routed (second u) MoE token×expert pairs (0: no MoE).
  be.reserve(u, u);
  // KV storage of kv_cfg's layers and slots (kv_cfg.n_slots()); slots are assigned by the
  // kv::block_table the steps hand over, which the backend never changes.
  { be.make_kv(kv_cfg) } -> std::same_as<typename B::kv_state>;

  // --- a step ------------------------------------------------------------------------------
  // Takes the step's inputs (tokens, positions, slots, output rows); the ops below act on
  // tensors of n = step.tokens.size() rows unless they say otherwise.
  be.begin(step);
  // out[t] = row token_t of the embedding table (dequantized).
  be.embed(w, t);
  // y[r] = x[r] / sqrt(mean(x[r]²) + eps) [⊙ w] over x's columns; w null: no weight. y may be x.
  be.rms_norm(t, wp, f, t);
  // y[t][n] = Σ_k w[n][k] x[t][k]: x is rows × ne0, y rows × ne1.
  be.matmul(w, t, t);
  // Rotates each of the n_heads (u) heads of x[t] in place by position pos_t; freq_factors
  // (n_rot/2 F32, e.g. rope_freqs.weight) divide the angles, null: none.
  be.rope(t, u, rope, wp);
  // x[t] *= the factor of pos_t (position_scale_params), in place.
  be.scale_by_position(t, pscale);
  // Writes k[t] and v[t] (n_head_kv·head_dim each) to layer u's cache at token t's slot.
  be.kv_store(kv, u, t, t);
  // out[t] = attention of q[t] (n_head·head_dim) over layer u's cache, token t's sequence.
  be.attention(ckv, u, t, attn, t);
  // out = silu(gate) ⊙ up; out may be gate.
  be.swiglu(t, t, t);
  // out = a + b; out may be a or b.
  be.add(t, t, t);
  // out = Σ_selected weight_e · FFN_e(x) per row of x (SwiGLU experts); scratch as moe_scratch.
  be.moe_ffn(mw, moe, t, ms, t);
  // out = the rows of x whose logits flag is set in the step, in order.
  be.select_rows(t, t);
  // Host rows (rows × cols floats) into dst; the data is taken at the call.
  be.write(t, host_in);
  // src's rows × cols floats into host memory (at finish() at the latest).
  be.read(t, host_out);
  // Index of each row's largest value, lowest index among ties (at finish() at the latest).
  be.argmax(t, ids_out);
  // Ends the step: every result is in host memory when it returns.
  be.finish();
};

}  // namespace strata::graph
