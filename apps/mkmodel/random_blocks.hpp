// Seeded random tensor contents that are valid for their ggml type: quantized blocks with random
// codes and finite fp16 super-scales sized so the dequantized weights have the requested standard
// deviation (about N(0, 0.02) for projections), norms near 1, exact RoPE factors. Block layouts:
// ggml-common.h (block_q4_0 … block_q6_K).
//
// Determinism: a tensor's bytes are cut into fixed chunks of whole blocks (~256 KiB), each
// generated from its own seed (tensor seed, chunk index), so the output depends only on the seed,
// never on the thread count or on how the writer asks for the bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "presets.hpp"
#include "strata/gguf/type_id.hpp"

namespace strata::mkmodel {

struct fill_spec {
  gguf::type_id type = gguf::type_id::f32;
  tensor_role role = tensor_role::weight;
  float sigma = 0.02f;          // target std of the (dequantized) values; weight/router roles
  std::uint64_t seed = 0;       // per-tensor seed
  std::uint64_t nbytes = 0;     // tensor size in bytes
  std::shared_ptr<const std::vector<float>> values;  // exact F32 contents (rope_freqs), else null
  // Router rows (F32): row r of `row_elems` values is multiplied by (*row_scale)[r] (--router skewed).
  std::shared_ptr<const std::vector<float>> row_scale;
  std::uint64_t row_elems = 0;
};

// Types random_blocks can produce.
bool random_fill_supported(gguf::type_id t) noexcept;

// Writes bytes [offset, offset + out.size()) of the tensor described by `spec`, generating
// chunks on up to `threads` threads.
void fill_tensor(const fill_spec& spec, std::uint64_t offset, std::span<std::byte> out, unsigned threads);

// Per-tensor seed from the run seed and the tensor name (independent of the tensor's position).
std::uint64_t tensor_seed(std::uint64_t seed, std::string_view name) noexcept;

// Second moment E[x²] of a dequantized element for random codes and super-scale d = 1 (dmin
// chosen for zero mean, see random_blocks.cpp); exposed for tests.
double unit_second_moment(gguf::type_id t) noexcept;

}  // namespace strata::mkmodel
