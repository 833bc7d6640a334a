// Qwen3-MoE decoder ("qwen3moe"): Qwen3 attention; every layer's FFN is a mixture of experts with
// a softmax router over all experts, top-k, weights always renormalised, applied to expert
// outputs. llama.cpp src/models/qwen3moe.cpp (spec §3.6).
#pragma once
#include "strata/arch/architecture.hpp"
#include "strata/arch/hparams_limits.hpp"

namespace strata::arch {

struct qwen3_moe {
  static constexpr std::string_view gguf_name = "qwen3moe";
  static constexpr rope_kind rope = rope_kind::neox;
  static constexpr qk_norm_kind qk_norm = qk_norm_kind::rms_weighted_before_rope;
  static constexpr router_kind router = router_kind::softmax_topk_renorm;
  static constexpr bool shared_expert = false;

  static hparams load_hparams(const gguf::reader& r) {
    hparams hp = detail::load_common(r, gguf_name);
    detail::load_moe(r, hp, false);
    if (hp.n_ff_exp == 0)
      throw format_error(r.source() + ": missing metadata key 'qwen3moe.expert_feed_forward_length'");
    return validate(hp, r.source());
  }
  static layer_plan plan(const hparams& hp, std::uint32_t) {
    return {.moe = true, .qk_norm = true, .rope_base = hp.rope_base};
  }
};
static_assert(architecture<qwen3_moe>);

}  // namespace strata::arch
