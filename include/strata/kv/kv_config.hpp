// KV-cache configuration shared by the backends: geometry from the model, element types and
// capacity from the user (-c, --parallel, --kv-type, --kv-type-k, --kv-type-v, --kv-window).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "strata/core/error.hpp"

namespace strata::kv {

// f32/f16: plain rows. q8_0: ggml Q8_0 blocks of 32. tq4/tq3/tq2: TurboQuant_mse (randomized
// Hadamard rotation + Lloyd-Max codes + fp16 scale per head vector; strata/turboquant/).
enum class kv_type { f32, f16, q8_0, tq4, tq3, tq2 };

constexpr std::string_view name_of(kv_type t) noexcept {
  switch (t) {
    case kv_type::f32: return "f32";
    case kv_type::f16: return "f16";
    case kv_type::q8_0: return "q8_0";
    case kv_type::tq4: return "tq4";
    case kv_type::tq3: return "tq3";
    case kv_type::tq2: return "tq2";
  }
  return "?";
}

// TurboQuant bit width of a type, 0 for the others.
constexpr std::uint32_t turboquant_bits(kv_type t) noexcept {
  return t == kv_type::tq4 ? 4 : t == kv_type::tq3 ? 3 : t == kv_type::tq2 ? 2 : 0;
}
// Block-quantized types keep their most recent tokens in f16 as well (the full-precision window).
constexpr bool is_compressed(kv_type t) noexcept { return t != kv_type::f32 && t != kv_type::f16; }

inline kv_type parse_kv_type(std::string_view s) {
  for (const kv_type t : {kv_type::f32, kv_type::f16, kv_type::q8_0, kv_type::tq4, kv_type::tq3, kv_type::tq2})
    if (s == name_of(t)) return t;
  throw error("unknown KV cache type '" + std::string(s) + "' (supported: f16, f32, q8_0, tq4, tq3, tq2)");
}

struct kv_cache_types {
  kv_type k = kv_type::f16;
  kv_type v = kv_type::f16;
};

// The command-line rule shared by strata-run, strata-bench and strata-serve: --kv-type sets
// both K and V; --kv-type-k / --kv-type-v (non-empty) override one side, e.g. K q8_0 + V tq3.
inline kv_cache_types parse_kv_cache_types(std::string_view both, std::string_view k = {}, std::string_view v = {}) {
  kv_cache_types t;
  t.k = t.v = parse_kv_type(both.empty() ? std::string_view("f16") : both);
  if (!k.empty()) t.k = parse_kv_type(k);
  if (!v.empty()) t.v = parse_kv_type(v);
  return t;
}

inline constexpr std::uint32_t default_full_precision_window = 128;

struct kv_config {
  std::uint32_t n_layer = 0;
  std::uint32_t n_head_kv = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t n_ctx = 0;        // total token slots (shared by all sequences)
  std::uint32_t n_seq = 1;        // sequences that can be resident at once
  std::uint32_t block_size = 32;  // tokens per block
  kv_type type_k = kv_type::f16;
  kv_type type_v = kv_type::f16;
  // Compressed types (q8_0, tq*): attention at position p reads the keys and values of positions
  // p − window + 1 .. p from an f16 copy instead of their compressed form (0: no window).
  std::uint32_t full_precision_window = default_full_precision_window;
  std::uint32_t max_batch = 512;  // most tokens one forward step appends (sizes the f16 ring)

  std::uint32_t row_elems() const noexcept { return n_head_kv * head_dim; }
  // Token slots of the cache: n_ctx rounded up to whole blocks (block_table and storages agree).
  std::uint32_t n_slots() const noexcept { return (n_ctx + block_size - 1) / block_size * block_size; }
};

}  // namespace strata::kv
