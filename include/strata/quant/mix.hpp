// The tensor type every tensor of a model gets for a file type, as llama-quantize decides it
// (llama.cpp src/llama-quant.cpp: tensor_allows_quantization, llama_tensor_get_type[_impl],
// tensor_type_fallback), restated for the file types of ftype.hpp. The rules depend on the
// order tensors are visited (attn_v / ffn_down counters), so callers pass llama-quantize's
// order: global tensors, then block by block, each group sorted by name (tensor_order_less).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/gguf/type_id.hpp"
#include "strata/quant/ftype.hpp"

namespace strata::quant {

// What the rules need to know about the model (llama_hparams of layer 0, llm_arch, llm_type).
struct model_shape {
  std::string arch;            // general.architecture
  std::uint32_t n_layer = 0;   // {arch}.block_count
  std::uint32_t n_head = 0;    // {arch}.attention.head_count (layer 0 if an array)
  std::uint32_t n_head_kv = 0; // {arch}.attention.head_count_kv (n_head when absent)
  std::uint32_t n_expert = 0;  // {arch}.expert_count (0: dense)

  std::uint32_t n_gqa() const noexcept { return n_head_kv ? n_head / n_head_kv : 0; }
  // llama.cpp's LLM_TYPE_70B, the one model size the rules look at (attn_v gets Q5_K).
  bool is_70b() const noexcept {
    if (arch == "llama") return n_layer == 80 && n_head != n_head_kv;
    return (n_layer == 80 && (arch == "deci" || arch == "olmo" || arch == "qwen2")) ||
           (n_layer == 68 && arch == "jais2");
  }
};

// Reads the shape from a GGUF's metadata; a missing block_count is an error naming the key.
inline model_shape model_shape_of(const gguf::reader& r) {
  model_shape s;
  s.arch = std::string(r.get_string("general.architecture"));
  const auto key = [&](std::string_view k) { return s.arch + "." + std::string(k); };
  s.n_layer = std::uint32_t(r.get_uint(key("block_count")));
  // head counts may be per-layer arrays; the rules use layer 0's.
  const auto first = [&](std::string_view k) -> std::optional<std::uint32_t> {
    const auto* v = r.find(key(k));
    if (!v) return std::nullopt;
    if (v->type() == gguf::value_type::array) {
      if (v->size() == 0) return std::nullopt;
      if (v->elem_type() == gguf::value_type::i32) return std::uint32_t(v->at<std::int32_t>(0));
      return v->at<std::uint32_t>(0);  // anything else is an error naming the type
    }
    return std::uint32_t(r.get_uint(key(k)));
  };
  s.n_head = first("attention.head_count").value_or(0);
  s.n_head_kv = first("attention.head_count_kv").value_or(s.n_head);
  s.n_expert = std::uint32_t(r.find_uint(key("expert_count")).value_or(0));
  return s;
}

// A tensor as the rules see it.
struct mix_tensor {
  std::string_view name;
  std::array<std::uint64_t, 4> ne{1, 1, 1, 1};  // ggml order
  gguf::type_id type = gguf::type_id::f32;      // its type in the input file
  // ggml_n_dims: dimensions up to the last one > 1 (at least 1).
  std::uint32_t n_dims() const noexcept {
    for (std::uint32_t d = 4; d > 1; --d)
      if (ne[d - 1] > 1) return d;
    return 1;
  }
};

struct mix_options {
  bool pure = false;             // --pure: no mix, the base type everywhere (shape fallback kept)
  bool has_imatrix = false;      // --imatrix given: changes Q4_0/Q5_0/IQ4 ffn_down choices
  bool quantize_output = true;   // false: --leave-output-tensor
  std::optional<gguf::type_id> output_type;      // --output-tensor-type
  std::optional<gguf::type_id> token_embd_type;  // --token-embedding-type
  // --tensor-type: the type for a tensor name, if a user pattern matches (first match wins).
  std::function<std::optional<gguf::type_id>(std::string_view name)> override_type;
};

struct mix_choice {
  gguf::type_id type;      // the type to write
  bool fallback = false;   // the mix's type did not divide the row length (llama-quantize warns)
};

// tensor_allows_quantization: 2-D/3-D "*weight" tensors, except norms, routers and small
// special tensors of other architectures (names as llama.cpp lists them).
inline bool allows_quantization(std::string_view name, std::uint32_t n_dims, bool quantize_output) {
  if (n_dims < 2 || !name.ends_with("weight")) return false;
  if (!quantize_output && name == "output.weight") return false;
  if (name == "position_embd.weight" || name == "token_types.weight") return false;
  static constexpr std::string_view keep[] = {
      "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
      "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
      "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
      "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
      "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
      "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
      "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
      "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd"};
  return std::none_of(std::begin(keep), std::end(keep), [&](std::string_view k) { return name.find(k) != name.npos; });
}

// tensor_requires_imatrix: the types llama-quantize refuses to produce without an importance
// matrix (among Strata's: Q2_K in a Q2_K_S file), never for the embeddings and the LM head.
inline bool requires_imatrix(std::string_view name, gguf::type_id t, ftype ft) noexcept {
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight" || name == "output.weight") return false;
  return t == gguf::type_id::q2_k && ft == ftype::mostly_q2_k_s;
}

// llama_model_loader's weights order: layer number ("blk.N.", -1 for others), then name.
inline bool tensor_order_less(std::string_view a, std::string_view b) noexcept {
  const auto layer = [](std::string_view n) {
    if (!n.starts_with("blk.")) return -1;
    int v = 0;
    std::size_t i = 4;
    if (i >= n.size() || n[i] < '0' || n[i] > '9') return -1;
    for (; i < n.size() && n[i] >= '0' && n[i] <= '9'; ++i) v = v * 10 + (n[i] - '0');
    return v;
  };
  const int la = layer(a), lb = layer(b);
  return la != lb ? la < lb : a < b;
}

namespace detail {

enum class category { token_embd, attn_q, attn_v, attn_k, attn_qkv, attn_kv_b, attn_output, ffn_up, ffn_gate,
                      ffn_down, output, other };

inline category category_of(std::string_view n) noexcept {
  const auto has = [&](std::string_view s) { return n.find(s) != n.npos; };
  if (n == "output.weight") return category::output;
  if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return category::token_embd;
  if (has("attn_qkv.weight")) return category::attn_qkv;
  if (has("attn_kv_b.weight")) return category::attn_kv_b;
  if (has("attn_v.weight")) return category::attn_v;
  if (has("attn_k.weight")) return category::attn_k;
  if (has("attn_q.weight")) return category::attn_q;
  if (has("attn_output.weight")) return category::attn_output;
  if (has("ffn_up")) return category::ffn_up;
  if (has("ffn_gate")) return category::ffn_gate;
  if (has("ffn_down")) return category::ffn_down;
  return category::other;
}

inline bool is_attn_v_like(category c) noexcept {
  return c == category::attn_v || c == category::attn_qkv || c == category::attn_kv_b;
}

inline bool is_quantized(gguf::type_id t) noexcept { return gguf::block_elems(t) > 1; }

// The mixes give the first and last eighth of the layers, and every third one between, more bits.
inline bool use_more_bits(int i_layer, int n_layer) noexcept {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

// The rules' running state over one pass (quantize_state_impl).
struct mix_state {
  int n_attention_wv = 0, i_attention_wv = 0;
  int n_layer = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
  bool tied_embeddings = true;  // no output.weight
};

// Layer of an FFN tensor: the running count, or for MoE models the number in the name (experts
// are not one tensor per layer in order).
inline int layer_of(int counted, const model_shape& m, std::string_view name) {
  if (m.n_expert <= 1) return counted;
  int il = -1;
  if (name.starts_with("blk.")) {
    il = 0;
    std::size_t i = 4;
    if (i >= name.size() || name[i] < '0' || name[i] > '9') il = -1;
    for (; il >= 0 && i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) il = il * 10 + (name[i] - '0');
  }
  if (il < 0) throw error("quantize: cannot determine the layer of tensor '" + std::string(name) + "'");
  if (il >= int(m.n_layer))
    throw error("quantize: tensor '" + std::string(name) + "' names layer " + std::to_string(il) + " but the model has " +
                std::to_string(m.n_layer));
  return il;
}

// llama_tensor_get_type_impl for the file types of ftype.hpp.
inline gguf::type_id mixed_type(const model_shape& m, const mix_tensor& t, category c, ftype ft, gguf::type_id ty,
                                const mix_options& o, mix_state& s) {
  using F = ftype;
  using T = gguf::type_id;
  const bool falcon = m.arch == "falcon";
  const int n_layer = s.n_layer;
  if (c == category::output || (s.tied_embeddings && c == category::token_embd)) {
    if (o.output_type) return *o.output_type;
    if (ft == F::mostly_mxfp4_moe || falcon || t.ne[0] % gguf::block_elems(ty) != 0) return T::q8_0;
    return ty != T::q8_0 ? T::q6_k : ty;  // the LM head keeps 6 bits
  }
  if (ft == F::mostly_mxfp4_moe) return t.ne[2] > 1 ? T::mxfp4 : T::q8_0;  // experts MXFP4
  if (c == category::token_embd) return o.token_embd_type.value_or(ty);
  if (is_attn_v_like(c)) {
    const int i = s.i_attention_wv++, n = s.n_attention_wv;
    if (ft == F::mostly_q2_k) ty = m.n_gqa() >= 4 ? T::q4_k : T::q3_k;
    else if (ft == F::mostly_q2_k_s && m.n_gqa() >= 4) ty = T::q4_k;
    else if (ft == F::mostly_q3_k_m) ty = i < 2 ? T::q5_k : T::q4_k;
    else if (ft == F::mostly_q3_k_l) ty = T::q5_k;
    else if ((ft == F::mostly_iq4_nl || ft == F::mostly_iq4_xs) && m.n_gqa() >= 4) ty = T::q5_k;
    else if ((ft == F::mostly_q4_k_m || ft == F::mostly_q5_k_m) && use_more_bits(i, n)) ty = T::q6_k;
    else if (ft == F::mostly_q4_k_s && i < 4) ty = T::q5_k;
    // 70B: 8 query heads share each attn_v row, so its extra bits cost little.
    if (m.is_70b() && (ty == T::q3_k || ty == T::q4_k)) ty = T::q5_k;
    if (m.n_expert == 8) ty = T::q8_0;  // Mixtral-style bump
    return ty;
  }
  if (c == category::attn_k) return m.n_expert == 8 ? T::q8_0 : ty;
  if (c == category::ffn_down) {
    const int il = layer_of(s.i_ffn_down++, m, t.name);
    const bool more = use_more_bits(il, n_layer);
    if (ft == F::mostly_q2_k) ty = T::q3_k;
    else if (ft == F::mostly_q2_k_s) { if (il < n_layer / 8) ty = T::q4_k; }
    else if (ft == F::mostly_q3_k_m) ty = il < n_layer / 16 ? T::q5_k : !falcon || more ? T::q4_k : T::q3_k;
    else if (ft == F::mostly_q3_k_l) ty = falcon ? T::q4_k : T::q5_k;
    else if (ft == F::mostly_q4_k_m) {
      if (falcon) ty = il < n_layer / 16 ? T::q6_k : more ? T::q5_k : T::q4_k;
      else if (more) ty = T::q6_k;
    } else if (il < n_layer / 8 && (ft == F::mostly_iq4_nl || ft == F::mostly_iq4_xs) && !o.has_imatrix) ty = T::q5_k;
    else if (ft == F::mostly_q5_k_m && more) ty = T::q6_k;
    else if (ft == F::mostly_q4_k_s && !falcon && il < n_layer / 8) ty = T::q5_k;
    else if ((ft == F::mostly_q4_0 || ft == F::mostly_q5_0) && o.has_imatrix && il < n_layer / 8)
      ty = ft == F::mostly_q4_0 ? T::q4_1 : T::q5_1;  // guards the first ffn_down layers
    return ty;
  }
  if (c == category::attn_output) {
    if (falcon) return ft == F::mostly_q3_k_l ? T::q4_k : ty;
    if (m.n_expert == 8) {
      const bool bump = ft == F::mostly_q2_k || ft == F::mostly_q3_k_s || ft == F::mostly_q3_k_m ||
                        ft == F::mostly_iq4_nl || ft == F::mostly_q4_k_s || ft == F::mostly_q4_k_m ||
                        ft == F::mostly_iq4_xs;
      return bump ? T::q5_k : ty;
    }
    if (ft == F::mostly_q2_k) return T::q3_k;
    if (ft == F::mostly_q3_k_m) return T::q4_k;
    if (ft == F::mostly_q3_k_l) return T::q5_k;
    return ty;
  }
  if (c == category::ffn_gate) (void)layer_of(s.i_ffn_gate++, m, t.name);  // validates the name, as llama.cpp
  if (c == category::ffn_up) (void)layer_of(s.i_ffn_up++, m, t.name);
  return ty;
}

// tensor_type_fallback: a type whose block does not divide the row length becomes one that does.
inline gguf::type_id shape_fallback(const mix_tensor& t, gguf::type_id ty, bool& fell_back) {
  using T = gguf::type_id;
  const std::uint64_t ncols = t.ne[0];
  if (ncols % gguf::block_elems(ty) == 0) return ty;
  fell_back = true;
  T f;
  switch (ty) {
    case T::iq4_xs: f = T::iq4_nl; break;
    case T::q2_k: case T::q3_k: f = T::q4_0; break;
    case T::q4_k: f = T::q5_0; break;
    case T::q5_k: f = T::q5_1; break;
    case T::q6_k: f = T::q8_0; break;
    default:
      throw error("quantize: tensor '" + std::string(t.name) + "' has rows of " + std::to_string(ncols) +
                  " elements, not a multiple of the " + std::string(gguf::name_of(ty)) + " block (" +
                  std::to_string(gguf::block_elems(ty)) + "), and " + std::string(gguf::name_of(ty)) +
                  " has no fallback type");
  }
  return ncols % gguf::block_elems(f) == 0 ? f : T::f16;
}

}  // namespace detail

// The type of every tensor (same order as `tensors`, which must be in llama-quantize's order).
inline std::vector<mix_choice> choose_types(const model_shape& m, std::span<const mix_tensor> tensors, ftype ft,
                                            const mix_options& o = {}) {
  const ftype_info* info = nullptr;
  for (const auto& f : ftypes_table)
    if (f.id == ft) info = &f;
  if (!info) throw error("quantize: file type " + std::to_string(std::uint32_t(ft)) + " is not supported by Strata");
  const gguf::type_id base = info->base;
  detail::mix_state s;
  s.n_layer = int(m.n_layer);
  for (const auto& t : tensors) {
    const auto c = detail::category_of(t.name);
    if (detail::is_attn_v_like(c)) ++s.n_attention_wv;
    if (c == detail::category::output) s.tied_embeddings = false;
  }
  std::vector<mix_choice> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) {
    mix_choice ch{t.type};
    const auto c = detail::category_of(t.name);
    if (!allows_quantization(t.name, t.n_dims(), o.quantize_output)) {
      out.push_back(ch);
      continue;
    }
    if (o.token_embd_type && c == detail::category::token_embd) ch.type = *o.token_embd_type;
    else if (o.output_type && c == detail::category::output) ch.type = *o.output_type;
    else {
      ch.type = base;
      if (detail::is_quantized(base)) {
        const auto manual = o.override_type ? o.override_type(t.name) : std::nullopt;
        if (manual) ch.type = *manual;
        else if (!o.pure) ch.type = detail::mixed_type(m, t, c, ft, base, o, s);
        ch.type = detail::shape_fallback(t, ch.type, ch.fallback);
      }
    }
    out.push_back(ch);
  }
  return out;
}

}  // namespace strata::quant
