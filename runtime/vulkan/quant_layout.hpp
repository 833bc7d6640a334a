// GLSL view of the quant block layouts, generated from the C++ format headers at shader
// compile time (offsetof on include/strata/quant/<fmt>.hpp structs), so the byte layout exists
// once. Each format's dequant16() in shaders/quant/<fmt>.glsl reads its fields through these.
#pragma once
#include <string>

#include "strata/gguf/type_id.hpp"

namespace strata::gpu {

// True when shaders/quant/ has a dequantizer for t.
bool gpu_supports(gguf::type_id t) noexcept;

// "#define QK ...", "#define BLOCK_BYTES ...", "#define <FMT>_OFF_<FIELD> ..." and code tables
// for t; plain types (F32, F16, BF16) are read in granules of 16 elements (QK 16).
std::string glsl_layout(gguf::type_id t);

// Shader source name of t's dequantizer, e.g. "quant/q4_k".
std::string glsl_dequant_source(gguf::type_id t);

}  // namespace strata::gpu
