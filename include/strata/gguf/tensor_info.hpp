// One tensor as described by a GGUF tensor-info record, resolved against the file:
// validated shape and type, absolute byte range and a zero-copy view of its data.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "strata/gguf/type_id.hpp"

namespace strata::gguf {

inline constexpr std::uint32_t max_dims = 4;       // GGML_MAX_DIMS
inline constexpr std::size_t max_tensor_name = 63;  // GGML_MAX_NAME - 1 (NUL)

struct tensor_info {
  std::string_view name;
  type_id type = type_id::f32;
  std::uint32_t n_dims = 0;                  // 0..4; ne[d] = 1 for d >= n_dims
  std::array<std::uint64_t, max_dims> ne{1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  std::uint64_t offset = 0;                  // from the start of the data section, as stored
  std::uint64_t file_offset = 0;             // absolute offset in the file
  std::uint64_t nbytes = 0;                  // ggml_nbytes for a contiguous tensor
  std::uint64_t info_offset = 0;             // where this record starts in the file (for messages)
  std::span<const std::byte> data;           // view of nbytes at file_offset

  std::uint64_t n_elements() const noexcept { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::uint64_t n_rows() const noexcept { return ne[1] * ne[2] * ne[3]; }
  std::uint64_t row_bytes() const noexcept { return ne[0] / block_elems(type) * block_bytes(type); }

  // "[256, 1024]" in ggml's ne order (innermost first), as llama.cpp prints shapes.
  std::string shape_string() const {
    std::string s = "[";
    for (std::uint32_t d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
    return s + "]";
  }
};

}  // namespace strata::gguf
