// What an architecture is at compile time (the `architecture` concept and the enums its traits
// choose from) and at run time (hparams read from GGUF, layer_plan per layer). Sizes are never
// template parameters: they come from the file. Spec: docs/spec/architectures.md §1.4, §3.
#pragma once
#include <cmath>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include "strata/core/error.hpp"
#include "strata/gguf/keys.hpp"
#include "strata/gguf/reader.hpp"

namespace strata::arch {

enum class rope_kind { norm, neox };            // pairs (2i, 2i+1) vs (i, i + n_rot/2)
enum class qk_norm_kind { none, rms_weighted_before_rope, rms_unweighted_after_rope };
enum class router_kind { none, softmax_topk_renorm, sigmoid_topk_weight_input };

// Run-time hyper-parameters of one model (llama.cpp llama_hparams, the subset these archs use).
struct hparams {
  std::string arch;                 // general.architecture
  std::uint32_t n_ctx_train = 0;    // context_length
  std::uint32_t n_embd = 0;         // embedding_length
  std::uint32_t n_layer = 0;        // block_count
  std::uint32_t n_head = 0;         // attention.head_count
  std::uint32_t n_head_kv = 0;      // attention.head_count_kv (default n_head)
  std::uint32_t head_dim = 0;       // attention.key_length (default n_embd / n_head)
  std::uint32_t n_rot = 0;          // rope.dimension_count (default head_dim)
  std::uint32_t n_ff = 0;           // feed_forward_length (dense layers)
  std::uint32_t n_vocab = 0;        // rows of token_embd.weight (authoritative)
  std::uint32_t n_expert = 0;       // expert_count (0: dense)
  std::uint32_t n_expert_used = 0;  // expert_used_count
  std::uint32_t n_ff_exp = 0;       // expert_feed_forward_length
  std::uint32_t n_ff_shexp = 0;     // shared expert width (llama4: = n_ff_exp)
  std::uint32_t moe_step = 0;       // llama4 interleave_moe_layer_step: MoE iff (il+1) % step == 0
  std::uint32_t nope_step = 0;      // llama4: layer il skips RoPE iff (il+1) % nope_step == 0
  std::uint32_t swa_pattern = 0;    // llama4: layer il is chunked iff il % pattern < pattern - 1
  std::uint32_t attn_chunk = 0;     // llama4 chunked-attention size (0: none)
  float rms_eps = 1e-5f;            // attention.layer_norm_rms_epsilon (every norm)
  float rope_base = 10000.0f;       // rope.freq_base
  float rope_base_swa = 10000.0f;   // llama4 rope.freq_base_swa (chunked layers)
  float rope_freq_scale = 1.0f;     // 1 / rope.scaling.factor for linear scaling
  bool use_qk_l2_norm = false;      // llama4: expert_count != 128
  bool tied_output = false;         // no output.weight: logits use token_embd.weight

  std::uint32_t n_embd_q() const noexcept { return head_dim * n_head; }
  std::uint32_t n_embd_kv() const noexcept { return head_dim * n_head_kv; }
};

// Per-layer choices, computed once at load time from hparams.
struct layer_plan {
  bool rope = true;               // apply RoPE to Q and K
  bool moe = false;               // MoE FFN instead of dense
  bool qk_norm = false;           // apply the arch's QK norm on this layer
  // Scale Q by 1 + attn_temp_scale · ln(floor((p + 1) / attn_temp_floor) + 1) (llama4 NoPE
  // layers; 0: off).
  double attn_temp_scale = 0.0;
  float attn_temp_floor = 1.0f;
  std::uint32_t attn_chunk = 0;   // chunked-causal mask size (0: plain causal)
  float rope_base = 10000.0f;
};

template <class A>
concept architecture = requires(const gguf::reader& r, const hparams& hp, std::uint32_t il) {
  { A::gguf_name } -> std::convertible_to<std::string_view>;
  { A::rope } -> std::convertible_to<rope_kind>;
  { A::qk_norm } -> std::convertible_to<qk_norm_kind>;
  { A::router } -> std::convertible_to<router_kind>;
  { A::shared_expert } -> std::convertible_to<bool>;
  { A::load_hparams(r) } -> std::same_as<hparams>;
  { A::plan(hp, il) } -> std::same_as<layer_plan>;
};

namespace detail {

// Reads an integer key as u32 with a range check; `required` decides missing-key behaviour.
inline std::uint32_t read_u32(const gguf::reader& r, const std::string& key, std::uint32_t fallback, bool required) {
  const auto v = r.find_uint(key);
  if (!v) {
    if (required) throw format_error(r.source() + ": missing metadata key '" + key + "'");
    return fallback;
  }
  if (*v > 0xFFFFFFFFull)
    throw format_error(r.source() + ": metadata key '" + key + "' = " + std::to_string(*v) + " is out of range");
  return std::uint32_t(*v);
}

inline float read_f32(const gguf::reader& r, const std::string& key, float fallback, bool required) {
  const auto v = r.find_number(key);
  if (!v) {
    if (required) throw format_error(r.source() + ": missing metadata key '" + key + "'");
    return fallback;
  }
  return float(*v);
}

// Keys shared by the four families (§1.4) plus shape checks every graph relies on.
inline hparams load_common(const gguf::reader& r, std::string_view arch) {
  using namespace gguf::keys;
  hparams hp;
  hp.arch = std::string(arch);
  const auto k = [&](std::string_view suffix) { return arch_key(arch, suffix); };
  hp.n_ctx_train = read_u32(r, k(context_length), 0, true);
  hp.n_embd = read_u32(r, k(embedding_length), 0, true);
  hp.n_layer = read_u32(r, k(block_count), 0, true);
  hp.n_head = read_u32(r, k(head_count), 0, true);
  hp.n_head_kv = read_u32(r, k(head_count_kv), hp.n_head, false);
  if (hp.n_embd == 0 || hp.n_layer == 0 || hp.n_head == 0 || hp.n_head_kv == 0)
    throw format_error(r.source() + ": embedding_length, block_count and head counts must be non-zero");
  if (hp.n_head % hp.n_head_kv != 0)
    throw format_error(r.source() + ": head_count " + std::to_string(hp.n_head) +
                       " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
  hp.head_dim = read_u32(r, k(key_length), hp.n_embd / hp.n_head, false);
  const auto v_len = read_u32(r, k(value_length), hp.head_dim, false);
  if (v_len != hp.head_dim)
    throw format_error(r.source() + ": value_length " + std::to_string(v_len) + " != key_length " +
                       std::to_string(hp.head_dim) + " is not supported");
  hp.n_rot = read_u32(r, k(rope_dimension_count), hp.head_dim, false);
  if (hp.n_rot != hp.head_dim)
    throw format_error(r.source() + ": rope.dimension_count " + std::to_string(hp.n_rot) + " != head dim " +
                       std::to_string(hp.head_dim) + " is not supported for " + std::string(arch));
  if (hp.head_dim == 0 || hp.head_dim % 2 != 0)
    throw format_error(r.source() + ": head dim " + std::to_string(hp.head_dim) + " must be even and non-zero");
  hp.n_ff = read_u32(r, k(feed_forward_length), 0, false);
  hp.rms_eps = read_f32(r, k(rms_eps), 1e-5f, true);
  hp.rope_base = read_f32(r, k(rope_freq_base), 10000.0f, false);
  hp.rope_base_swa = hp.rope_base;
  if (const auto type = r.find_string(k("rope.scaling.type")); !type || *type == "linear") {
    const float factor = read_f32(r, k("rope.scaling.factor"), 0.0f, false);
    hp.rope_freq_scale = factor > 0.0f ? 1.0f / factor : 1.0f;
  } else if (*type != "none") {
    throw format_error(r.source() + ": rope.scaling.type '" + std::string(*type) + "' is not supported (yet)");
  }

  const gguf::tensor_info& embd = r.tensor("token_embd.weight");
  if (embd.n_dims != 2 || embd.ne[0] != hp.n_embd)
    throw format_error(r.source() + ": tensor 'token_embd.weight' has shape " + embd.shape_string() +
                       ", expected [" + std::to_string(hp.n_embd) + ", n_vocab]");
  hp.n_vocab = std::uint32_t(embd.ne[1]);
  hp.tied_output = r.find_tensor("output.weight") == nullptr;
  return hp;
}

inline void load_moe(const gguf::reader& r, hparams& hp, bool ff_exp_required) {
  using namespace gguf::keys;
  const auto k = [&](std::string_view suffix) { return arch_key(hp.arch, suffix); };
  hp.n_expert = read_u32(r, k(expert_count), 0, true);
  hp.n_expert_used = read_u32(r, k(expert_used_count), 0, true);
  if (hp.n_expert == 0 || hp.n_expert_used == 0 || hp.n_expert_used > hp.n_expert)
    throw format_error(r.source() + ": expert_used_count " + std::to_string(hp.n_expert_used) +
                       " must be in 1.." + std::to_string(hp.n_expert));
  const std::uint32_t fallback = hp.n_ff && hp.n_expert_used ? hp.n_ff / hp.n_expert_used : 0;
  hp.n_ff_exp = read_u32(r, k(expert_feed_forward_length), fallback, ff_exp_required);
}

}  // namespace detail
}  // namespace strata::arch
