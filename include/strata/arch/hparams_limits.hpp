// Upper bounds on every hyper-parameter a GGUF can set, checked once at load (validate) so that a
// crafted file cannot make a fixed-size buffer overflow or a size computation wrap: the backends
// size their scratch from these constants (CPU RoPE angles and head vectors, MoE routing) or check
// the validated values against their own limits. The bounds are well above every released model
// (head_dim 256, 384 experts with 8 used, 10M-token context, 262K vocabulary).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "strata/arch/architecture.hpp"
#include "strata/core/error.hpp"

namespace strata::arch {

struct limits {
  static constexpr std::uint32_t max_head_dim = 1024;      // key_length; also RoPE's n_rot
  static constexpr std::uint32_t max_heads = 4096;         // head_count (and head_count_kv)
  static constexpr std::uint32_t max_embd = 1u << 17;      // embedding_length
  static constexpr std::uint32_t max_ff = 1u << 20;        // feed_forward_length, expert widths
  static constexpr std::uint32_t max_layers = 4096;        // block_count
  static constexpr std::uint32_t max_vocab = 1u << 24;     // rows of token_embd.weight
  static constexpr std::uint32_t max_context = 1u << 26;   // context_length, chunk sizes
  static constexpr std::uint32_t max_experts = 1024;       // expert_count
  static constexpr std::uint32_t max_experts_used = 64;    // expert_used_count
};

namespace detail {

inline void check_range(const std::string& source, const std::string& arch, const char* key, std::uint64_t v,
                        std::uint64_t lo, std::uint64_t hi) {
  if (v < lo || v > hi)
    throw format_error(source + ": metadata '" + arch + "." + key + "' = " + std::to_string(v) + " is outside " +
                       std::to_string(lo) + ".." + std::to_string(hi));
}

inline void check_positive(const std::string& source, const std::string& arch, const char* key, float v) {
  if (!(std::isfinite(v) && v > 0.0f))
    throw format_error(source + ": metadata '" + arch + "." + key + "' = " + std::to_string(v) +
                       " must be a finite number > 0");
}

}  // namespace detail

// Throws format_error naming the key, its value and the limit; returns hp for `return validate(...)`.
inline const hparams& validate(const hparams& hp, const std::string& source) {
  using detail::check_range;
  const std::string& a = hp.arch;
  const auto& L = limits{};
  check_range(source, a, "context_length", hp.n_ctx_train, 1, L.max_context);
  check_range(source, a, "embedding_length", hp.n_embd, 1, L.max_embd);
  check_range(source, a, "block_count", hp.n_layer, 1, L.max_layers);
  check_range(source, a, "attention.head_count", hp.n_head, 1, L.max_heads);
  check_range(source, a, "attention.head_count_kv", hp.n_head_kv, 1, hp.n_head);
  if (hp.n_head % hp.n_head_kv != 0)
    throw format_error(source + ": metadata '" + a + ".attention.head_count' = " + std::to_string(hp.n_head) +
                       " is not a multiple of head_count_kv = " + std::to_string(hp.n_head_kv));
  check_range(source, a, "attention.key_length", hp.head_dim, 2, L.max_head_dim);
  check_range(source, a, "rope.dimension_count", hp.n_rot, 2, hp.head_dim);
  if (hp.head_dim % 2 || hp.n_rot % 2)
    throw format_error(source + ": metadata '" + a + ".attention.key_length' = " + std::to_string(hp.head_dim) +
                       " and rope.dimension_count = " + std::to_string(hp.n_rot) + " must be even");
  check_range(source, a, "feed_forward_length", hp.n_ff, 0, L.max_ff);
  check_range(source, a, "vocab (rows of token_embd.weight)", hp.n_vocab, 1, L.max_vocab);
  if (hp.n_expert || hp.n_expert_used) {
    check_range(source, a, "expert_count", hp.n_expert, 1, L.max_experts);
    check_range(source, a, "expert_used_count", hp.n_expert_used, 1, std::min(hp.n_expert, L.max_experts_used));
    check_range(source, a, "expert_feed_forward_length", hp.n_ff_exp, 1, L.max_ff);
    check_range(source, a, "expert_shared_feed_forward_length", hp.n_ff_shexp, 0, L.max_ff);
  }
  check_range(source, a, "interleave_moe_layer_step", hp.moe_step, 0, hp.n_layer);
  check_range(source, a, "no_rope_layer_step", hp.nope_step, 0, hp.n_layer);
  check_range(source, a, "attention.sliding_window_pattern", hp.swa_pattern, 0, hp.n_layer);
  check_range(source, a, "attention chunk size", hp.attn_chunk, 0, L.max_context);
  detail::check_positive(source, a, "attention.layer_norm_rms_epsilon", hp.rms_eps);
  if (!(hp.rms_eps < 1.0f))
    throw format_error(source + ": metadata '" + a + ".attention.layer_norm_rms_epsilon' = " +
                       std::to_string(hp.rms_eps) + " must be < 1");
  detail::check_positive(source, a, "rope.freq_base", hp.rope_base);
  detail::check_positive(source, a, "rope.freq_base_swa", hp.rope_base_swa);
  detail::check_positive(source, a, "rope.scaling.factor (as 1/factor)", hp.rope_freq_scale);
  return hp;
}

}  // namespace strata::arch
