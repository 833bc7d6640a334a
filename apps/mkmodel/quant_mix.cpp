// strata-mkmodel's file types; the per-tensor choice is quant::choose_types (llama-quantize's
// rules, shared with strata-quantize), applied to a preset's tensors converted to F32.
#include "quant_mix.hpp"

#include <algorithm>

#include "strata/quant/mix.hpp"

namespace strata::mkmodel {

namespace {

using gguf::type_id;

// clang-format off
constexpr ftype_info ftype_table[] = {
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

}  // namespace

std::span<const ftype_info> ftypes() noexcept { return ftype_table; }

const ftype_info* find_ftype(std::string_view name) noexcept {
  const auto up = [](char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; };
  for (const auto& f : ftype_table)
    if (std::ranges::equal(f.name, name, [&](char a, char b) { return a == up(b); })) return &f;
  return nullptr;
}

bool quantizable(const tensor_spec& t) noexcept {
  quant::mix_tensor m{.name = t.name};
  for (std::size_t d = 0; d < t.ne.size() && d < 4; ++d) m.ne[d] = t.ne[d];
  return quant::allows_quantization(t.name, m.n_dims(), true);
}

std::vector<gguf::type_id> assign_types(const preset& p, std::span<const tensor_spec> specs,
                                        const ftype_info& ft, bool pure) {
  const quant::model_shape shape{.arch = std::string(arch_name(p.architecture)), .n_layer = p.n_layer,
                                 .n_head = p.n_head, .n_head_kv = p.n_head_kv, .n_expert = p.n_expert};
  // The converter writes every tensor F32 before quantization; what the rules leave alone stays F32.
  std::vector<quant::mix_tensor> tensors(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    tensors[i].name = specs[i].name;
    for (std::size_t d = 0; d < specs[i].ne.size() && d < 4; ++d) tensors[i].ne[d] = specs[i].ne[d];
  }
  quant::mix_options o;
  o.pure = pure || ft.pure;
  const auto choices = quant::choose_types(shape, tensors, ft.file_type, o);
  std::vector<gguf::type_id> out;
  out.reserve(choices.size());
  for (const auto& c : choices) out.push_back(c.type);
  return out;
}

}  // namespace strata::mkmodel
