// strata-mkmodel's --type names and the per-tensor ggml type each gives: llama-quantize's rules
// (include/strata/quant/mix.hpp, shared with strata-quantize) applied to a preset's tensors.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "presets.hpp"
#include "strata/gguf/type_id.hpp"
#include "strata/quant/ftype.hpp"

namespace strata::mkmodel {

using ftype = quant::ftype;

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
