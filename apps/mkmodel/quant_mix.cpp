// llama-quantize's type choice for the k-quant and legacy file types, restated for the four
// architectures Strata supports (no imatrix, not Falcon; the 70B-only attn_v bump of llama.cpp
// needs an 80-layer Llama and no preset has one).
#include "quant_mix.hpp"

#include <algorithm>

namespace strata::mkmodel {

namespace {

using gguf::type_id;

// clang-format off
constexpr ftype_info table[] = {
  {"F32",    ftype::all_f32,       type_id::f32,  false, "everything F32"},
  {"F16",    ftype::mostly_f16,    type_id::f16,  false, "matrices F16, norms/router F32"},
  {"BF16",   ftype::mostly_bf16,   type_id::bf16, false, "matrices BF16, norms/router F32"},
  {"Q8_0",   ftype::mostly_q8_0,   type_id::q8_0, false, "Q8_0"},
  {"Q4_0",   ftype::mostly_q4_0,   type_id::q4_0, false, "Q4_0, output Q6_K (as llama-quantize)"},
  {"Q4_1",   ftype::mostly_q4_1,   type_id::q4_1, false, "Q4_1, output Q6_K"},
  {"Q5_0",   ftype::mostly_q5_0,   type_id::q5_0, false, "Q5_0, output Q6_K"},
  {"Q5_1",   ftype::mostly_q5_1,   type_id::q5_1, false, "Q5_1, output Q6_K"},
  {"Q2_K",   ftype::mostly_q2_k,   type_id::q2_k, false, "llama-quantize Q2_K mix (Q2_K/Q3_K/Q4_K, output Q6_K)"},
  {"Q3_K_S", ftype::mostly_q3_k_s, type_id::q3_k, false, "llama-quantize Q3_K_S mix"},
  {"Q3_K_M", ftype::mostly_q3_k_m, type_id::q3_k, false, "llama-quantize Q3_K_M mix (Q3_K/Q4_K/Q5_K, output Q6_K)"},
  {"Q3_K_L", ftype::mostly_q3_k_l, type_id::q3_k, false, "llama-quantize Q3_K_L mix"},
  {"Q4_K_S", ftype::mostly_q4_k_s, type_id::q4_k, false, "llama-quantize Q4_K_S mix"},
  {"Q4_K_M", ftype::mostly_q4_k_m, type_id::q4_k, false, "llama-quantize Q4_K_M mix (Q4_K/Q6_K)"},
  {"Q5_K_S", ftype::mostly_q5_k_s, type_id::q5_k, false, "llama-quantize Q5_K_S mix"},
  {"Q5_K_M", ftype::mostly_q5_k_m, type_id::q5_k, false, "llama-quantize Q5_K_M mix (Q5_K/Q6_K)"},
  {"Q6_K",   ftype::mostly_q6_k,   type_id::q6_k, false, "Q6_K"},
  // Pure k-quants (llama-quantize --pure Q*_K_M): every matrix, output and embeddings included.
  {"Q3_K",   ftype::mostly_q3_k_m, type_id::q3_k, true,  "pure Q3_K (every matrix)"},
  {"Q4_K",   ftype::mostly_q4_k_m, type_id::q4_k, true,  "pure Q4_K (every matrix)"},
  {"Q5_K",   ftype::mostly_q5_k_m, type_id::q5_k, true,  "pure Q5_K (every matrix)"},
};
// clang-format on

bool is_quantized(type_id t) noexcept { return gguf::block_elems(t) > 1; }

enum class category { output, token_embd, attn_v, attn_k, attn_q, attn_output, ffn_up, ffn_gate, ffn_down, other };

category category_of(const std::string& name) {
  const auto has = [&](std::string_view s) { return name.find(s) != std::string::npos; };
  if (name == "output.weight") return category::output;
  if (name == "token_embd.weight") return category::token_embd;
  if (has("attn_v.weight")) return category::attn_v;
  if (has("attn_k.weight")) return category::attn_k;
  if (has("attn_q.weight")) return category::attn_q;
  if (has("attn_output.weight")) return category::attn_output;
  if (has("ffn_up")) return category::ffn_up;  // ffn_up, ffn_up_exps, ffn_up_shexp
  if (has("ffn_gate")) return category::ffn_gate;
  if (has("ffn_down")) return category::ffn_down;
  return category::other;
}

// Layers that get more bits in the _M mixes: the first and last eighth, and every third
// layer in between.
bool use_more_bits(int i_layer, int n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

// Block-size fallback for a row length the chosen type does not divide (tensor_type_fallback).
type_id shape_fallback(type_id t, std::uint64_t ncols) {
  if (ncols % gguf::block_elems(t) == 0) return t;
  type_id f = t;
  switch (t) {
    case type_id::q2_k: case type_id::q3_k: f = type_id::q4_0; break;
    case type_id::q4_k: f = type_id::q5_0; break;
    case type_id::q5_k: f = type_id::q5_1; break;
    case type_id::q6_k: f = type_id::q8_0; break;
    default: break;  // 32-element blocks: F16 below
  }
  return ncols % gguf::block_elems(f) == 0 ? f : type_id::f16;
}

struct mix_state {
  int n_attn_v = 0;      // attn_v tensors in the model
  int i_attn_v = 0;      // attn_v tensors seen so far
  int i_ffn_down = 0;    // ffn_down* tensors seen so far
  bool tied = true;      // no output.weight
};

type_id mixed_type(const preset& p, const tensor_spec& t, ftype ft, type_id base, mix_state& s) {
  using F = ftype;
  const int n_layer = int(p.n_layer);
  const bool eight_experts = p.n_expert == 8;
  const std::uint32_t n_gqa = p.n_head_kv ? p.n_head / p.n_head_kv : 0;
  const category c = category_of(t.name);
  type_id ty = base;

  if (c == category::output || (s.tied && c == category::token_embd)) {
    // The LM head keeps 6 bits unless the file is Q8_0 (or the base block does not fit a row).
    if (t.ne[0] % gguf::block_elems(base) != 0) ty = type_id::q8_0;
    else if (base != type_id::q8_0) ty = type_id::q6_k;
  } else if (c == category::token_embd) {
    // Untied embeddings keep the base type for these file types.
  } else if (c == category::attn_v) {
    if (ft == F::mostly_q2_k) ty = n_gqa >= 4 ? type_id::q4_k : type_id::q3_k;
    else if (ft == F::mostly_q3_k_m) ty = s.i_attn_v < 2 ? type_id::q5_k : type_id::q4_k;
    else if (ft == F::mostly_q3_k_l) ty = type_id::q5_k;
    else if ((ft == F::mostly_q4_k_m || ft == F::mostly_q5_k_m) && use_more_bits(s.i_attn_v, s.n_attn_v))
      ty = type_id::q6_k;
    else if (ft == F::mostly_q4_k_s && s.i_attn_v < 4) ty = type_id::q5_k;
    if (eight_experts) ty = type_id::q8_0;  // Mixtral-style bump, applies to every file type
    ++s.i_attn_v;
  } else if (c == category::attn_k) {
    if (eight_experts) ty = type_id::q8_0;
  } else if (c == category::ffn_down) {
    // MoE models take the layer from the name (expert tensors are not one per layer in order).
    const int il = p.n_expert > 1 ? t.layer : s.i_ffn_down;
    if (ft == F::mostly_q2_k) ty = type_id::q3_k;
    else if (ft == F::mostly_q3_k_m) ty = il < n_layer / 16 ? type_id::q5_k : type_id::q4_k;
    else if (ft == F::mostly_q3_k_l) ty = type_id::q5_k;
    else if (ft == F::mostly_q4_k_m) { if (use_more_bits(il, n_layer)) ty = type_id::q6_k; }
    else if (ft == F::mostly_q5_k_m) { if (use_more_bits(il, n_layer)) ty = type_id::q6_k; }
    else if (ft == F::mostly_q4_k_s && il < n_layer / 8) ty = type_id::q5_k;
    ++s.i_ffn_down;
  } else if (c == category::attn_output) {
    if (eight_experts) {
      if (ft == F::mostly_q2_k || ft == F::mostly_q3_k_s || ft == F::mostly_q3_k_m ||
          ft == F::mostly_q4_k_s || ft == F::mostly_q4_k_m)
        ty = type_id::q5_k;
    } else {
      if (ft == F::mostly_q2_k) ty = type_id::q3_k;
      else if (ft == F::mostly_q3_k_m) ty = type_id::q4_k;
      else if (ft == F::mostly_q3_k_l) ty = type_id::q5_k;
    }
  }
  return ty;
}

}  // namespace

std::span<const ftype_info> ftypes() noexcept { return table; }

const ftype_info* find_ftype(std::string_view name) noexcept {
  const auto up = [](char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; };
  for (const auto& f : table)
    if (std::ranges::equal(f.name, name, [&](char a, char b) { return a == up(b); })) return &f;
  return nullptr;
}

bool quantizable(const tensor_spec& t) noexcept {
  if (t.ne.size() < 2) return false;
  if (!t.name.ends_with("weight")) return false;
  if (t.name.find("_norm.weight") != std::string::npos) return false;
  return t.name.find("ffn_gate_inp.weight") == std::string::npos;
}

std::vector<gguf::type_id> assign_types(const preset& p, std::span<const tensor_spec> specs,
                                        const ftype_info& ft, bool pure) {
  mix_state s;
  for (const auto& t : specs) {
    if (category_of(t.name) == category::attn_v) ++s.n_attn_v;
    if (t.name == "output.weight") s.tied = false;
  }
  pure = pure || ft.pure;
  std::vector<gguf::type_id> out;
  out.reserve(specs.size());
  for (const auto& t : specs) {
    // The converter writes every tensor F32 before quantization; 1-D tensors, norms and the
    // router stay F32.
    if (!quantizable(t)) {
      out.push_back(gguf::type_id::f32);
      continue;
    }
    type_id ty = ft.base;
    if (is_quantized(ty)) {
      if (!pure) ty = mixed_type(p, t, ft.file_type, ft.base, s);
      ty = shape_fallback(ty, t.ne[0]);
    }
    out.push_back(ty);
  }
  return out;
}

}  // namespace strata::mkmodel
