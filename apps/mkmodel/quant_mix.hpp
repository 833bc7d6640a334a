// File types (llama_ftype, include/llama.h) and the per-tensor ggml type each one gives, following
// the rules llama-quantize applies without an importance matrix (src/llama-quant.cpp,
// llama_tensor_get_type): output/attn_v/ffn_down get more bits on some layers, 8-expert models
// bump attention, rows that a block size does not divide fall back to another type.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "presets.hpp"
#include "strata/gguf/type_id.hpp"

namespace strata::mkmodel {

// llama_ftype values (general.file_type).
enum class ftype : std::uint32_t {
  all_f32 = 0, mostly_f16 = 1, mostly_q4_0 = 2, mostly_q4_1 = 3, mostly_q8_0 = 7,
  mostly_q5_0 = 8, mostly_q5_1 = 9, mostly_q2_k = 10, mostly_q3_k_s = 11, mostly_q3_k_m = 12,
  mostly_q3_k_l = 13, mostly_q4_k_s = 14, mostly_q4_k_m = 15, mostly_q5_k_s = 16,
  mostly_q5_k_m = 17, mostly_q6_k = 18, mostly_bf16 = 32,
};

struct ftype_info {
  std::string_view name;      // --type value
  ftype file_type;            // general.file_type
  gguf::type_id base;         // llama_ftype_get_default_type
  bool pure;                  // every quantizable tensor in `base` (llama-quantize --pure)
  std::string_view summary;   // for --list
};

std::span<const ftype_info> ftypes() noexcept;
const ftype_info* find_ftype(std::string_view name) noexcept;  // case-insensitive

// Whether llama-quantize may change this tensor's type at all (tensor_allows_quantization):
// 2-D/3-D "*.weight" tensors except norms and the MoE router.
bool quantizable(const tensor_spec& t) noexcept;

// The ggml type of every tensor of `specs` (same order) for file type `ft`; `pure` forces the
// base type on every quantizable tensor (the shape fallback still applies).
std::vector<gguf::type_id> assign_types(const preset& p, std::span<const tensor_spec> specs,
                                        const ftype_info& ft, bool pure);

}  // namespace strata::mkmodel
