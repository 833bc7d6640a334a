// Preset table and tensor lists. The numbers of the real presets are those of the HF config.json
// of each checkpoint, written the way convert_hf_to_gguf.py maps them (cited per row); the tiny
// presets use the fixture models' dims (fixtures/README.md §1, fixtures/generate_models.py).
#include "presets.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace strata::mkmodel {

std::string_view arch_name(arch a) noexcept {
  switch (a) {
    case arch::llama: return "llama";
    case arch::qwen3: return "qwen3";
    case arch::qwen3moe: return "qwen3moe";
    case arch::llama4: return "llama4";
  }
  return "?";
}

namespace {

using enum arch;
constexpr rope_llama3 llama31_rope{8.0f, 1.0f, 4.0f, 8192};   // Llama 3.1 rope_scaling
constexpr rope_llama3 llama4_rope{16.0f, 1.0f, 1.0f, 8192};   // Llama 4 Scout rope_scaling

// clang-format off
constexpr preset preset_table[] = {
  // Qwen/Qwen3-8B config.json: hidden_size 4096, num_hidden_layers 36, num_attention_heads 32,
  // num_key_value_heads 8, head_dim 128, intermediate_size 12288, vocab_size 151936,
  // rope_theta 1000000, rms_norm_eps 1e-6, max_position_embeddings 40960,
  // tie_word_embeddings false.
  {"qwen3-8b", "Qwen3 8B", "8B", qwen3,
   36, 4096, 32, 8, 128, 12288, 151936, 40960, 1.0e6f, 1e-6f, false,
   0, 0, 0, 0, std::nullopt, vocab_kind::qwen3,
   true, false, false, "", "Qwen/Qwen3-8B config.json"},
  // Qwen/Qwen3-0.6B config.json: hidden_size 1024, num_hidden_layers 28, num_attention_heads 16,
  // num_key_value_heads 8, head_dim 128, intermediate_size 3072, vocab_size 151936,
  // rope_theta 1000000, rms_norm_eps 1e-6, max_position_embeddings 40960,
  // tie_word_embeddings true (no output.weight).
  {"qwen3-0.6b", "Qwen3 0.6B", "0.6B", qwen3,
   28, 1024, 16, 8, 128, 3072, 151936, 40960, 1.0e6f, 1e-6f, true,
   0, 0, 0, 0, std::nullopt, vocab_kind::qwen3,
   true, false, false, "", "Qwen/Qwen3-0.6B config.json"},
  // meta-llama/Llama-3.1-8B-Instruct config.json: hidden_size 4096, num_hidden_layers 32,
  // num_attention_heads 32, num_key_value_heads 8 (no head_dim key: 4096/32 = 128),
  // intermediate_size 14336, vocab_size 128256, rope_theta 500000, rms_norm_eps 1e-5,
  // max_position_embeddings 131072, rope_scaling {llama3, factor 8, low 1, high 4, orig 8192}.
  {"llama-3.1-8b", "Meta Llama 3.1 8B Instruct", "8B", llama,
   32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0f, 1e-5f, false,
   0, 0, 0, 0, llama31_rope, vocab_kind::llama3,
   false, true, true, "", "meta-llama/Llama-3.1-8B-Instruct config.json"},
  // meta-llama/Llama-3.1-70B-Instruct config.json: hidden_size 8192, num_hidden_layers 80,
  // num_attention_heads 64, num_key_value_heads 8 (no head_dim key: 8192/64 = 128),
  // intermediate_size 28672, vocab_size 128256, rope_theta 500000, rms_norm_eps 1e-5,
  // max_position_embeddings 131072, rope_scaling {llama3, factor 8, low 1, high 4, orig 8192}.
  // The dense model of issue 14's tier targets (larger than any desktop GPU).
  {"llama-3.1-70b", "Meta Llama 3.1 70B Instruct", "70B", llama,
   80, 8192, 64, 8, 128, 28672, 128256, 131072, 500000.0f, 1e-5f, false,
   0, 0, 0, 0, llama31_rope, vocab_kind::llama3,
   false, true, true, "", "meta-llama/Llama-3.1-70B-Instruct config.json"},
  // Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, num_hidden_layers 48, num_attention_heads 32,
  // num_key_value_heads 4, head_dim 128, intermediate_size 6144, moe_intermediate_size 768,
  // num_experts 128, num_experts_per_tok 8, decoder_sparse_step 1 (every layer MoE),
  // vocab_size 151936, rope_theta 1000000, rms_norm_eps 1e-6, max_position_embeddings 40960.
  {"qwen3-30b-a3b", "Qwen3 30B A3B", "30B-A3B", qwen3moe,
   48, 2048, 32, 4, 128, 6144, 151936, 40960, 1.0e6f, 1e-6f, false,
   128, 8, 768, 0, std::nullopt, vocab_kind::qwen3,
   true, false, false, "", "Qwen/Qwen3-30B-A3B config.json"},
  // meta-llama/Llama-4-Scout-17B-16E-Instruct text_config: hidden_size 5120, num_hidden_layers 48,
  // num_attention_heads 40, num_key_value_heads 8, head_dim 128, intermediate_size 8192 (experts
  // and shared expert; the converter writes it as expert_feed_forward_length),
  // intermediate_size_mlp 16384 (dense FFN: feed_forward_length, unused since every layer is MoE),
  // num_local_experts 16, num_experts_per_tok 1, interleave_moe_layer_step 1, vocab_size 202048,
  // rope_theta 500000, rms_norm_eps 1e-5, max_position_embeddings 10485760,
  // rope_scaling {llama3, factor 16, low 1, high 1, orig 8192}. NoPE every 4th layer and the
  // 8192 attention chunk are llama.cpp defaults (no keys written).
  {"llama4-scout-17b-16e", "Llama 4 Scout 17B 16E Instruct", "17B-16E", llama4,
   48, 5120, 40, 8, 128, 16384, 202048, 10485760, 500000.0f, 1e-5f, false,
   16, 1, 8192, 1, llama4_rope, vocab_kind::llama4,
   true, true, true, "", "meta-llama/Llama-4-Scout-17B-16E-Instruct config.json"},
  // Fixture models (fixtures/README.md §1): n_embd 256, 4 layers, 4 heads, 2 KV heads,
  // head_dim 64, n_ff 512, vocab 1024, context 4096; the generator writes every optional key.
  {"tiny-llama", "tiny llama", "tiny", llama,
   4, 256, 4, 2, 64, 512, 1024, 4096, 500000.0f, 1e-5f, false,
   0, 0, 0, 0, llama31_rope, vocab_kind::tiny_llama3,
   true, true, true, "llama", "fixtures/generate_models.py (llama)"},
  {"tiny-qwen3", "tiny qwen3", "tiny", qwen3,
   4, 256, 4, 2, 64, 512, 1024, 4096, 1.0e6f, 1e-6f, true,
   0, 0, 0, 0, std::nullopt, vocab_kind::tiny_qwen3,
   true, true, true, "qwen3", "fixtures/generate_models.py (qwen3, tied embeddings)"},
  {"tiny-qwen3moe", "tiny qwen3moe", "tiny", qwen3moe,
   4, 256, 4, 2, 64, 512, 1024, 4096, 1.0e6f, 1e-6f, false,
   8, 2, 256, 0, std::nullopt, vocab_kind::tiny_qwen3,
   true, true, true, "qwen3moe", "fixtures/generate_models.py (qwen3moe: 8 experts, top-2)"},
  {"tiny-llama4", "tiny llama4", "tiny", llama4,
   4, 256, 4, 2, 64, 512, 1024, 4096, 500000.0f, 1e-5f, false,
   4, 1, 256, 2, llama4_rope, vocab_kind::tiny_llama3,
   true, true, true, "llama4", "fixtures/generate_models.py (llama4: 4 experts, top-1, MoE step 2)"},
};
// clang-format on

std::string blk(std::uint32_t il, std::string_view base) {
  return "blk." + std::to_string(il) + "." + std::string(base) + ".weight";
}

}  // namespace

std::span<const preset> presets() noexcept { return preset_table; }

const preset* find_preset(std::string_view name) noexcept {
  for (const auto& p : preset_table)
    if (p.name == name) return &p;
  return nullptr;
}

bool is_moe_layer(const preset& p, std::uint32_t il) noexcept {
  switch (p.architecture) {
    case qwen3moe: return true;  // llama.cpp ignores decoder_sparse_step (1 for released models)
    case llama4: return p.moe_step > 0 && (il + 1) % p.moe_step == 0;
    default: return false;
  }
}

std::vector<tensor_spec> tensor_specs(const preset& p) {
  using r = tensor_role;
  const std::uint64_t E = p.n_embd, V = p.n_vocab, D = p.head_dim;
  const std::uint64_t q_dim = D * p.n_head, kv_dim = D * p.n_head_kv;
  std::vector<tensor_spec> t;
  t.push_back({"token_embd.weight", {E, V}, r::weight, -1});
  t.push_back({"output_norm.weight", {E}, r::norm, -1});
  if (!p.tied) t.push_back({"output.weight", {E, V}, r::weight, -1});
  if (p.rope_scaling) t.push_back({"rope_freqs.weight", {D / 2}, r::rope_freqs, -1});

  for (std::uint32_t il = 0; il < p.n_layer; ++il) {
    const int L = int(il);
    t.push_back({blk(il, "attn_norm"), {E}, r::norm, L});
    t.push_back({blk(il, "attn_q"), {E, q_dim}, r::weight, L});
    t.push_back({blk(il, "attn_k"), {E, kv_dim}, r::weight, L});
    t.push_back({blk(il, "attn_v"), {E, kv_dim}, r::weight, L});
    t.push_back({blk(il, "attn_output"), {q_dim, E}, r::weight, L});
    if (p.architecture == qwen3 || p.architecture == qwen3moe) {
      t.push_back({blk(il, "attn_q_norm"), {D}, r::norm, L});
      t.push_back({blk(il, "attn_k_norm"), {D}, r::norm, L});
    }
    t.push_back({blk(il, "ffn_norm"), {E}, r::norm, L});
    if (is_moe_layer(p, il)) {
      const std::uint64_t X = p.n_expert, F = p.n_ff_exp;
      t.push_back({blk(il, "ffn_gate_inp"), {E, X}, r::router, L});
      t.push_back({blk(il, "ffn_gate_exps"), {E, F, X}, r::weight, L});
      t.push_back({blk(il, "ffn_up_exps"), {E, F, X}, r::weight, L});
      t.push_back({blk(il, "ffn_down_exps"), {F, E, X}, r::weight, L});
      if (p.architecture == llama4) {  // shared expert, hard-wired to the expert width in llama.cpp
        t.push_back({blk(il, "ffn_gate_shexp"), {E, F}, r::weight, L});
        t.push_back({blk(il, "ffn_up_shexp"), {E, F}, r::weight, L});
        t.push_back({blk(il, "ffn_down_shexp"), {F, E}, r::weight, L});
      }
    } else {
      const std::uint64_t F = p.n_ff;
      t.push_back({blk(il, "ffn_gate"), {E, F}, r::weight, L});
      t.push_back({blk(il, "ffn_up"), {E, F}, r::weight, L});
      t.push_back({blk(il, "ffn_down"), {F, E}, r::weight, L});
    }
  }
  std::stable_sort(t.begin(), t.end(), [](const tensor_spec& a, const tensor_spec& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.name < b.name;
  });
  return t;
}

// convert_hf_to_gguf.py LlamaModel.generate_extra_tensors: inverse frequencies in float32, the
// wavelength test and the smooth interpolation in double, stored as float32.
std::vector<float> llama3_rope_factors(const preset& p) {
  std::vector<float> out;
  if (!p.rope_scaling) return out;
  const auto& s = *p.rope_scaling;
  const std::uint32_t dim = p.head_dim;
  const double lo_wavelen = double(s.original_context) / s.low_freq_factor;
  const double hi_wavelen = double(s.original_context) / s.high_freq_factor;
  for (std::uint32_t i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(p.rope_base, float(i) / float(dim));
    const double wavelen = 2.0 * std::numbers::pi / double(freq);
    double f;
    if (wavelen < hi_wavelen) f = 1.0;
    else if (wavelen > lo_wavelen) f = s.factor;
    else {
      const double smooth = (s.original_context / wavelen - s.low_freq_factor) /
                            (double(s.high_freq_factor) - s.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    out.push_back(float(f));
  }
  return out;
}

std::uint64_t parameter_count(const preset& p) {
  std::uint64_t n = 0;
  for (const auto& t : tensor_specs(p)) {
    std::uint64_t e = 1;
    for (auto d : t.ne) e *= d;
    n += e;
  }
  return n;
}

}  // namespace strata::mkmodel
