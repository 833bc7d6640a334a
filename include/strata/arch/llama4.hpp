// Llama 4 text decoder ("llama4"). Per layer: 3 of 4 layers use chunked local attention with
// RoPE and (if expert_count != 128) a weightless RMS QK norm after RoPE; every 4th layer is global
// NoPE with attention-temperature scaling of Q. MoE (shared expert + sigmoid top-k router whose
// weight multiplies the expert input) every `moe_step` layers. llama.cpp src/models/llama4.cpp
// and HF modeling_llama4.py (spec §3.7; chunk size hard-wired to 8192 as llama.cpp does).
#pragma once
#include "strata/arch/architecture.hpp"
#include "strata/arch/hparams_limits.hpp"

namespace strata::arch {

struct llama4 {
  static constexpr std::string_view gguf_name = "llama4";
  static constexpr rope_kind rope = rope_kind::norm;
  static constexpr qk_norm_kind qk_norm = qk_norm_kind::rms_unweighted_after_rope;
  static constexpr router_kind router = router_kind::sigmoid_topk_weight_input;
  static constexpr bool shared_expert = true;
  static constexpr std::uint32_t default_chunk = 8192;  // llama.cpp ignores the GGUF's chunk size
  // Attention temperature of NoPE layers (llama.cpp f_attn_temp_scale, n_attn_temp_floor_scale).
  static constexpr double attn_temp_scale = 0.1;
  static constexpr float attn_temp_floor = 8192.0f;

  static hparams load_hparams(const gguf::reader& r) {
    using namespace gguf::keys;
    hparams hp = detail::load_common(r, gguf_name);
    detail::load_moe(r, hp, true);
    hp.n_ff_shexp = hp.n_ff_exp;
    hp.moe_step = detail::read_u32(r, arch_key(gguf_name, "interleave_moe_layer_step"), 0, true);
    hp.rope_base_swa = detail::read_f32(r, arch_key(gguf_name, "rope.freq_base_swa"), hp.rope_base, false);
    hp.use_qk_l2_norm = hp.n_expert != 128;
    const auto window = r.find_uint(arch_key(gguf_name, "attention.sliding_window"));
    if (window && *window == 0) {
      // No chunking; the NoPE formula then only hits the last layer (llama.cpp behaviour).
      hp.attn_chunk = 0;
      hp.nope_step = hp.n_layer;
      hp.swa_pattern = 0;
    } else {
      hp.attn_chunk = default_chunk;
      hp.nope_step = 4;
      hp.swa_pattern = detail::read_u32(r, arch_key(gguf_name, "attention.sliding_window_pattern"), 4, false);
    }
    return validate(hp, r.source());
  }

  static layer_plan plan(const hparams& hp, std::uint32_t il) {
    const bool nope = hp.nope_step && (il + 1) % hp.nope_step == 0;
    const bool chunked = hp.swa_pattern && hp.attn_chunk && il % hp.swa_pattern < hp.swa_pattern - 1;
    return {.rope = !nope,
            .moe = hp.moe_step && (il + 1) % hp.moe_step == 0,
            .qk_norm = !nope && hp.use_qk_l2_norm,
            .attn_temp_scale = nope ? attn_temp_scale : 0.0,
            .attn_temp_floor = attn_temp_floor,
            .attn_chunk = chunked ? hp.attn_chunk : 0,
            .rope_base = chunked ? hp.rope_base_swa : hp.rope_base};
  }
};
static_assert(architecture<llama4>);

}  // namespace strata::arch
