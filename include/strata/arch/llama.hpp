// LLaMA 2 / 3.x decoder (general.architecture "llama"): RMSNorm, GQA, NORM (pairwise) RoPE with
// optional rope_freqs.weight (Llama 3.1 scaling), SwiGLU, optional tied output.
// Checked against llama.cpp src/models/llama.cpp (spec §3.4).
#pragma once
#include "strata/arch/architecture.hpp"
#include "strata/arch/hparams_limits.hpp"

namespace strata::arch {

struct llama {
  static constexpr std::string_view gguf_name = "llama";
  static constexpr rope_kind rope = rope_kind::norm;
  static constexpr qk_norm_kind qk_norm = qk_norm_kind::none;
  static constexpr router_kind router = router_kind::none;
  static constexpr bool shared_expert = false;

  static hparams load_hparams(const gguf::reader& r) {
    hparams hp = detail::load_common(r, gguf_name);
    if (hp.n_ff == 0) throw format_error(r.source() + ": missing metadata key 'llama.feed_forward_length'");
    return validate(hp, r.source());
  }
  static layer_plan plan(const hparams& hp, std::uint32_t) { return {.rope_base = hp.rope_base}; }
};
static_assert(architecture<llama>);

}  // namespace strata::arch
