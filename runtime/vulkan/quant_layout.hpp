// GLSL view of the quant block layouts, generated from the C++ format headers at shader
// compile time (offsetof on include/strata/quant/<fmt>.hpp structs), so the byte layout exists
// once. Each format's dequant16() in shaders/quant/<fmt>.glsl reads its fields through these.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
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

// The GPU's row layout. ggml's Q6_K (210-byte) and Q8_0 (34-byte) blocks are only 2-byte
// aligned, so a kernel reads their 16-byte ranges as five 4-byte loads and funnel shifts. On the
// GPU a row of these formats whose block count is a multiple of row_group_blocks is stored in
// groups of that many blocks, each group field by field in the block's field order (the 8 ql
// arrays, then the 8 qh arrays, ...): field f of block b sits in group b / 8 at 8 * offset(f) +
// (b % 8) * size(f), so every 16-, 32-, 64- or 128-byte field is 16-byte aligned and read with
// 16-byte loads. A row keeps its byte count, so tensor sizes, strides and expert offsets do not
// change; other rows and formats keep ggml's blocks. common.glsl's w_field() is the reader.
inline constexpr std::uint32_t row_group_blocks = 8;

// True when t is stored in row groups where its rows allow (Q6_K, Q8_0).
bool has_row_groups(gguf::type_id t) noexcept;

// True when t's rows of ne0 elements are stored in groups on the GPU.
bool grouped_rows(gguf::type_id t, std::uint64_t ne0) noexcept;

// Writes whole rows of t (ne0 elements each, ggml's layout at src) in the GPU's layout at dst
// (src.size() bytes; a plain copy where the rows are not grouped).
void copy_gpu_rows(gguf::type_id t, std::uint64_t ne0, std::span<const std::byte> src, std::byte* dst);

}  // namespace strata::gpu
