// Qwen3 dense decoder ("qwen3"): as llama, plus per-head weighted RMSNorm of Q and K before
// NEOX RoPE. Usually tied output on small models. llama.cpp src/models/qwen3.cpp (spec §3.5).
#pragma once
#include "strata/arch/architecture.hpp"
#include "strata/arch/hparams_limits.hpp"

namespace strata::arch {

struct qwen3 {
  static constexpr std::string_view gguf_name = "qwen3";
  static constexpr rope_kind rope = rope_kind::neox;
  static constexpr qk_norm_kind qk_norm = qk_norm_kind::rms_weighted_before_rope;
  static constexpr router_kind router = router_kind::none;
  static constexpr bool shared_expert = false;

  static hparams load_hparams(const gguf::reader& r) {
    hparams hp = detail::load_common(r, gguf_name);
    if (hp.n_ff == 0) throw format_error(r.source() + ": missing metadata key 'qwen3.feed_forward_length'");
    return validate(hp, r.source());
  }
  static layer_plan plan(const hparams& hp, std::uint32_t) { return {.qk_norm = true, .rope_base = hp.rope_base}; }
};
static_assert(architecture<qwen3>);

}  // namespace strata::arch
