// Model file types (llama.cpp's llama_ftype, stored as general.file_type): the names
// llama-quantize accepts, each one's default tensor type (llama_ftype_get_default_type) and
// whether Strata has quantizers for every type its mix can produce.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "strata/gguf/type_id.hpp"

namespace strata::quant {

// llama.h enum llama_ftype (values are file format: general.file_type).
enum class ftype : std::uint32_t {
  all_f32 = 0, mostly_f16 = 1, mostly_q4_0 = 2, mostly_q4_1 = 3, mostly_q8_0 = 7, mostly_q5_0 = 8,
  mostly_q5_1 = 9, mostly_q2_k = 10, mostly_q3_k_s = 11, mostly_q3_k_m = 12, mostly_q3_k_l = 13,
  mostly_q4_k_s = 14, mostly_q4_k_m = 15, mostly_q5_k_s = 16, mostly_q5_k_m = 17, mostly_q6_k = 18,
  mostly_iq2_xxs = 19, mostly_iq2_xs = 20, mostly_q2_k_s = 21, mostly_iq3_xs = 22, mostly_iq3_xxs = 23,
  mostly_iq1_s = 24, mostly_iq4_nl = 25, mostly_iq3_s = 26, mostly_iq3_m = 27, mostly_iq2_s = 28,
  mostly_iq2_m = 29, mostly_iq4_xs = 30, mostly_iq1_m = 31, mostly_bf16 = 32, mostly_tq1_0 = 36,
  mostly_tq2_0 = 37, mostly_mxfp4_moe = 38,
};

struct ftype_info {
  std::string_view name;     // llama-quantize's name (case-insensitive on input)
  ftype id;                  // general.file_type
  gguf::type_id base;        // default tensor type of the mix
  std::string_view summary;  // for --help / --list
};

// The file types Strata can write: every tensor type their mixes choose (llama-quant.cpp) has a
// quantizer in include/strata/quant. The IQ1/IQ2/IQ3/TQ mixes need grid quantizers Strata does
// not have. Aliases come after the names they stand for.
inline constexpr std::array<ftype_info, 24> ftypes_table{{
    {"F32", ftype::all_f32, gguf::type_id::f32, "no quantization: 32-bit floats"},
    {"F16", ftype::mostly_f16, gguf::type_id::f16, "matrices F16"},
    {"BF16", ftype::mostly_bf16, gguf::type_id::bf16, "matrices BF16"},
    {"Q8_0", ftype::mostly_q8_0, gguf::type_id::q8_0, "8.50 bpw"},
    {"Q6_K", ftype::mostly_q6_k, gguf::type_id::q6_k, "6.56 bpw"},
    {"Q5_K_M", ftype::mostly_q5_k_m, gguf::type_id::q5_k, "Q5_K, some Q6_K"},
    {"Q5_K_S", ftype::mostly_q5_k_s, gguf::type_id::q5_k, "Q5_K"},
    {"Q5_1", ftype::mostly_q5_1, gguf::type_id::q5_1, "6.00 bpw, output Q6_K"},
    {"Q5_0", ftype::mostly_q5_0, gguf::type_id::q5_0, "5.50 bpw, output Q6_K"},
    {"Q4_K_M", ftype::mostly_q4_k_m, gguf::type_id::q4_k, "Q4_K, attn_v/ffn_down partly Q6_K"},
    {"Q4_K_S", ftype::mostly_q4_k_s, gguf::type_id::q4_k, "Q4_K, first layers Q5_K"},
    {"Q4_1", ftype::mostly_q4_1, gguf::type_id::q4_1, "5.00 bpw, output Q6_K"},
    {"Q4_0", ftype::mostly_q4_0, gguf::type_id::q4_0, "4.50 bpw, output Q6_K"},
    {"IQ4_XS", ftype::mostly_iq4_xs, gguf::type_id::iq4_xs, "4.25 bpw non-linear"},
    {"IQ4_NL", ftype::mostly_iq4_nl, gguf::type_id::iq4_nl, "4.50 bpw non-linear"},
    {"MXFP4_MOE", ftype::mostly_mxfp4_moe, gguf::type_id::mxfp4, "MoE experts MXFP4, the rest Q8_0"},
    {"Q3_K_L", ftype::mostly_q3_k_l, gguf::type_id::q3_k, "Q3_K, attn_v/ffn_down/attn_output Q5_K"},
    {"Q3_K_M", ftype::mostly_q3_k_m, gguf::type_id::q3_k, "Q3_K, attn_v/ffn_down Q4_K-Q5_K"},
    {"Q3_K_S", ftype::mostly_q3_k_s, gguf::type_id::q3_k, "Q3_K"},
    {"Q2_K", ftype::mostly_q2_k, gguf::type_id::q2_k, "Q2_K, attn_v/ffn_down/attn_output Q3_K-Q4_K"},
    {"Q2_K_S", ftype::mostly_q2_k_s, gguf::type_id::q2_k, "Q2_K, needs --imatrix"},
    {"Q3_K", ftype::mostly_q3_k_m, gguf::type_id::q3_k, "alias for Q3_K_M"},
    {"Q4_K", ftype::mostly_q4_k_m, gguf::type_id::q4_k, "alias for Q4_K_M"},
    {"Q5_K", ftype::mostly_q5_k_m, gguf::type_id::q5_k, "alias for Q5_K_M"},
}};

// By name (case-insensitive) or by number, as llama-quantize parses its type argument; the
// number picks the first name with that id. nullptr if unknown or not supported.
constexpr const ftype_info* find_ftype(std::string_view s) noexcept {
  const auto up = [](char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; };
  for (const auto& f : ftypes_table) {
    if (f.name.size() != s.size()) continue;
    bool eq = true;
    for (std::size_t i = 0; i < s.size() && eq; ++i) eq = up(s[i]) == f.name[i];
    if (eq) return &f;
  }
  std::uint32_t n = 0;
  if (s.empty() || s.size() > 4) return nullptr;
  for (const char c : s) {
    if (c < '0' || c > '9') return nullptr;
    n = n * 10 + std::uint32_t(c - '0');
  }
  for (const auto& f : ftypes_table)
    if (std::uint32_t(f.id) == n) return &f;
  return nullptr;
}

// The first (canonical) name of a file type Strata can write; empty for the others.
constexpr std::string_view name_of(ftype id) noexcept {
  for (const auto& f : ftypes_table)
    if (f.id == id) return f.name;
  return {};
}

}  // namespace strata::quant
