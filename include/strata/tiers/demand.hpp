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
};

// The demand of a GGUF model: every tensor of the file, KV and scratch from hparams.
inline model_demand demand_from_gguf(const gguf::reader& r, const arch::hparams& hp, const demand_options& o) {
  model_demand d;
  d.n_layer = hp.n_layer;
  d.hidden_bytes = std::uint64_t(hp.n_embd) * 4;
  d.kv_bytes_per_layer = std::uint64_t(std::ceil(2.0 * o.n_ctx * hp.n_embd_kv() * o.kv_bytes_per_element));
  // Activation rows the decoder keeps per token (x, norm, q, k, v, attention out, two FFN
  // halves) plus one logits row: the Vulkan backend's buffers, within a few rows.
  const std::uint64_t ff = std::max({hp.n_ff, hp.n_ff_exp * std::max(1u, hp.n_expert_used), hp.n_ff_shexp});
  const std::uint64_t row = 3ull * hp.n_embd + hp.n_embd_q() + 2ull * hp.n_embd_kv() + 2 * ff + hp.n_vocab;
  d.scratch_bytes = row * 4 * o.max_batch;
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
