// Synthetic model demands for the tiers tests: n_layer blocks of attention and a dense FFN or
// routed experts, an embedding and a head of 100 MiB each, 1 MiB of KV per block.
#pragma once
#include <cstdint>
#include <string>

#include "strata/tiers/demand.hpp"

namespace strata::tiers {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

void add(model_demand& d, std::string name, tensor_kind kind, std::int32_t layer, std::uint64_t bytes,
         std::uint32_t n_expert = 0, std::uint32_t n_used = 0) {
  tensor_demand t;
  t.name = std::move(name);
  t.kind = kind;
  t.layer = layer;
  t.bytes = bytes;
  t.elements = double(bytes) * 2;  // ~4.5 bits per weight
  t.n_expert = n_expert;
  t.n_expert_used = n_used;
  if (kind == tensor_kind::embedding) t.rows_total = 32000;
  d.tensors.push_back(std::move(t));
}

// n_layer blocks of attention (attn MiB) + FFN (ffn MiB; MoE: n_expert experts, k used).
model_demand synthetic(std::uint32_t n_layer, std::uint64_t attn, std::uint64_t ffn, std::uint32_t n_expert = 0,
                       std::uint32_t k = 0) {
  model_demand d;
  d.n_layer = n_layer;
  d.kv_bytes_per_layer = 1 * MiB;
  d.scratch_bytes = 4 * MiB;
  d.hidden_bytes = 4096 * 4;
  add(d, "token_embd.weight", tensor_kind::embedding, -1, 100 * MiB);
  for (std::uint32_t il = 0; il < n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    add(d, b + "attn_norm.weight", tensor_kind::norm, int(il), 16 << 10);
    add(d, b + "attn_q.weight", tensor_kind::attention, int(il), attn * MiB / 2);
    add(d, b + "attn_output.weight", tensor_kind::attention, int(il), attn * MiB / 2);
    add(d, b + "ffn_norm.weight", tensor_kind::norm, int(il), 16 << 10);
    if (n_expert) {
      add(d, b + "ffn_gate_inp.weight", tensor_kind::router, int(il), MiB / 4);
      for (const char* m : {"gate", "up", "down"})
        add(d, b + "ffn_" + m + "_exps.weight", tensor_kind::routed_experts, int(il), ffn * MiB / 3, n_expert, k);
    } else {
      for (const char* m : {"gate", "up", "down"})
        add(d, b + "ffn_" + m + ".weight", tensor_kind::dense_ffn, int(il), ffn * MiB / 3);
    }
  }
  add(d, "output_norm.weight", tensor_kind::norm, -1, 16 << 10);
  add(d, "output.weight", tensor_kind::head, -1, 100 * MiB);
  return d;
}

}  // namespace
}  // namespace strata::tiers
