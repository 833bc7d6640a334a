// KV-cache configuration shared by the backends: geometry from the model, element types and
// capacity from the user (-c, --parallel, --kv-type).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "strata/core/error.hpp"

namespace strata::kv {

enum class kv_type { f32, f16 };

constexpr std::string_view name_of(kv_type t) noexcept { return t == kv_type::f32 ? "f32" : "f16"; }

inline kv_type parse_kv_type(std::string_view s) {
  if (s == "f32") return kv_type::f32;
  if (s == "f16") return kv_type::f16;
  throw error("unknown KV cache type '" + std::string(s) + "' (supported: f16, f32)");
}

struct kv_config {
  std::uint32_t n_layer = 0;
  std::uint32_t n_head_kv = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t n_ctx = 0;        // total token slots (shared by all sequences)
  std::uint32_t n_seq = 1;        // sequences that can be resident at once
  std::uint32_t block_size = 32;  // tokens per block
  kv_type type_k = kv_type::f16;
  kv_type type_v = kv_type::f16;

  std::uint32_t row_elems() const noexcept { return n_head_kv * head_dim; }
};

}  // namespace strata::kv
