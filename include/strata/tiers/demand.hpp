// What a model asks of memory per token: every weight tensor with its size, its kind, its layer
// and the share of its bytes one token reads (dense: all; routed experts: k/n; the token
// embedding: one row), plus the KV cache and activation scratch. The placement planner
// (tiers/planner.hpp) works on this and nothing else, so tests build synthetic models directly.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/arch/architecture.hpp"
#include "strata/gguf/reader.hpp"

namespace strata::tiers {

// In the order the design keeps them on the GPU when time saved per byte ties: norms,
// attention (with its KV), router, shared expert, output head, dense FFN, routed experts,
// then the token embedding (a lookup reads one row per token).
enum class tensor_kind { norm, attention, router, shared_expert, head, dense_ffn, routed_experts, embedding };

inline std::string_view kind_name(tensor_kind k) {
  switch (k) {
    case tensor_kind::norm: return "norm";
    case tensor_kind::attention: return "attention";
    case tensor_kind::router: return "router";
    case tensor_kind::shared_expert: return "shared_expert";
    case tensor_kind::head: return "head";
    case tensor_kind::dense_ffn: return "dense_ffn";
    case tensor_kind::routed_experts: return "routed_experts";
    case tensor_kind::embedding: return "embedding";
  }
  return "?";
}

struct tensor_demand {
  std::string name;                  // GGUF tensor name ("blk.3.ffn_up_exps.weight")
  tensor_kind kind = tensor_kind::dense_ffn;
  std::int32_t layer = -1;           // block index; -1 for embedding, output norm, head
  std::uint64_t bytes = 0;           // stored size
  double elements = 0;               // weights (flops per use = 2 * elements * share read)
  std::uint32_t n_expert = 0;        // routed experts: experts in the tensor ...
  std::uint32_t n_expert_used = 0;   // ... and chosen per token (share of a batch of B: 1-(1-k/n)^B)
  std::uint32_t rows_total = 0;      // embedding: rows (one read per token)

  // Share of the bytes a batch of `batch` tokens touches.
  double share_touched(std::uint32_t batch) const noexcept {
    if (kind == tensor_kind::routed_experts && n_expert > 0)
      return 1.0 - std::pow(1.0 - double(n_expert_used) / n_expert, double(batch));
    if (kind == tensor_kind::embedding && rows_total > 0) return std::min(1.0, double(batch) / rows_total);
    return 1.0;
  }
  // Share of the weights each token multiplies by (flops).
  double share_per_token() const noexcept {
    if (kind == tensor_kind::routed_experts && n_expert > 0) return double(n_expert_used) / n_expert;
    if (kind == tensor_kind::embedding) return 0.0;  // a lookup, no multiply
    return 1.0;
  }
};

struct model_demand {
  std::vector<tensor_demand> tensors;  // in execution order (embedding, blocks, head)
  std::uint32_t n_layer = 0;
  std::uint64_t kv_bytes_per_layer = 0;  // K + V at the planned context; read in full per token (worst case)
  std::uint64_t scratch_bytes = 0;       // activation buffers of the largest batch (an estimate)
  std::uint64_t hidden_bytes = 0;        // one token's hidden state (f32): what a GPU<->CPU hand-off moves
};

// Kind and layer from a tensor name; the names are llama.cpp's (gguf-py constants).
inline tensor_kind classify(std::string_view name, bool tied_output) {
  const auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
  if (name.starts_with("token_embd")) return tied_output ? tensor_kind::head : tensor_kind::embedding;
  if (name.starts_with("output_norm")) return tensor_kind::norm;
  if (name.starts_with("output")) return tensor_kind::head;
  if (has("_exps")) return tensor_kind::routed_experts;
  if (has("_shexp")) return tensor_kind::shared_expert;
  if (has("ffn_gate_inp")) return tensor_kind::router;
  if (has("_norm")) return tensor_kind::norm;
  if (has(".attn_")) return tensor_kind::attention;
  return tensor_kind::dense_ffn;
}

inline std::int32_t layer_of(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  std::int32_t il = 0;
  std::size_t i = 4;
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') il = il * 10 + (name[i++] - '0');
  return il;
}

struct demand_options {
  std::uint32_t n_ctx = 4096;        // context the KV cache is sized for
  double kv_bytes_per_element = 2;   // f16 K/V; q8_0 = 34/32
  std::uint32_t max_batch = 512;     // largest step (prefill chunk): sizes the scratch
  std::uint32_t max_outputs = 0;     // logits rows per step (0: max_batch)
};

// Activation memory of one backend for steps of `o.max_batch` tokens: the decoder's buffers
// (graph/decoder.hpp allocate(): x, a, q, k, v, attention out, o, two FFN halves, the logits
// rows, the MoE router logits and token x expert rows) plus the Vulkan backend's own scratch
// (int8 copies of the widest quantized input for tokens or expert pairs, the prefill GEMM's f16
// weight slice and f16 activations, split-attention partials). Meant as an upper bound: the
// engine plans --fit with it, and the --gpu-budget ledger (runtime/vulkan) counts the real
// buffers. widest_k and largest_matrix come from the model's tensors.
inline std::uint64_t scratch_estimate(const arch::hparams& hp, const demand_options& o, std::uint64_t widest_k,
                                      std::uint64_t largest_matrix) {
  const std::uint64_t B = o.max_batch, E = hp.n_embd, k = hp.n_expert ? hp.n_expert_used : 0;
  const std::uint64_t ff = std::max({std::uint64_t(hp.n_ff), std::uint64_t(hp.n_ff_exp), std::uint64_t(hp.n_ff_shexp)});
  const std::uint64_t outputs = o.max_outputs ? std::min<std::uint64_t>(o.max_outputs, B) : B;
  std::uint64_t floats = B * (3 * E + hp.n_embd_q() + 2 * hp.n_embd_kv() + std::max<std::uint64_t>(hp.n_embd_q(), E) +
                              2 * ff) +
                         outputs * hp.n_vocab;
  if (k) floats += B * hp.n_expert + B * k * (2 * E + 2 * std::uint64_t(hp.n_ff_exp) + 2);  // + expert ids, weights
  const std::uint64_t rows_q8 = std::max<std::uint64_t>(B, B * k);
  const std::uint64_t k256 = (widest_k + 255) / 256 * 256;
  // Two slots of codes (1 byte), scales (16 bytes per 32) and the norm's block sums (4 per 32).
  const std::uint64_t int8 = 2 * rows_q8 * (k256 + k256 / 2 + k256 / 8);
  // The f16 weight slices of the tensor-core GEMM (two slots: one expands while the other is
  // read), its f16 activations in two regions of a step's rows each (64 rows of tile slack; the
  // second is where the fused SwiGLU writes its f16 copy) and, for MoE, the f16 rows of the
  // routed pairs grouped by expert.
  const std::uint64_t gemm = 4 * std::min<std::uint64_t>(largest_matrix, 64ull << 20) +
                             2 * (B + 64 + std::max<std::uint64_t>(B, 64) + 64) * widest_k + (k ? 2 * (B * k + 64) * widest_k : 0);
  const std::uint64_t partials = 8ull * hp.n_head * 128 * (hp.head_dim + 2) * 4;
  // Routing ids and weights, counters, the window rings' tags: small, but a plan filled to the
  // byte fails on them.
  const std::uint64_t small = 1ull << 20;
  return floats * 4 + int8 + gemm + partials + small;
}

// The demand of a GGUF model: every tensor of the file, KV and scratch from hparams.
inline model_demand demand_from_gguf(const gguf::reader& r, const arch::hparams& hp, const demand_options& o) {
  model_demand d;
  d.n_layer = hp.n_layer;
  d.hidden_bytes = std::uint64_t(hp.n_embd) * 4;
  d.kv_bytes_per_layer = std::uint64_t(std::ceil(2.0 * o.n_ctx * hp.n_embd_kv() * o.kv_bytes_per_element));
  std::uint64_t widest_k = 0, largest_matrix = 0;
  for (const gguf::tensor_info& t : r.tensors())
    if (t.ne[1] > 1) {
      widest_k = std::max<std::uint64_t>(widest_k, t.ne[0]);
      if (t.ne[2] == 1) largest_matrix = std::max<std::uint64_t>(largest_matrix, t.ne[0] * t.ne[1]);
    }
  d.scratch_bytes = scratch_estimate(hp, o, widest_k, largest_matrix);
  for (const gguf::tensor_info& t : r.tensors()) {
    tensor_demand td;
    td.name = std::string(t.name);
    td.kind = classify(t.name, hp.tied_output);
    td.layer = layer_of(t.name);
    td.bytes = t.nbytes;
    td.elements = double(t.n_elements());
    if (td.kind == tensor_kind::routed_experts) {
      td.n_expert = hp.n_expert;
      td.n_expert_used = hp.n_expert_used;
    }
    if (td.kind == tensor_kind::embedding) td.rows_total = std::uint32_t(t.ne[1]);
    d.tensors.push_back(std::move(td));
  }
  return d;
}

}  // namespace strata::tiers
