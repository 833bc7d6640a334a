// CPU KV-cache storage: per layer, K and V rows of n_head_kv·head_dim elements in f32 or f16,
// one row per token slot of the shared block_table.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "strata/core/fp16.hpp"
#include "strata/kv/block_table.hpp"
#include "strata/kv/kv_config.hpp"

namespace strata::kernels::cpu {

class kv_storage {
 public:
  explicit kv_storage(const kv::kv_config& cfg)
      : cfg_(cfg), table_(cfg.n_ctx, cfg.block_size, cfg.n_seq), layers_(cfg.n_layer) {
    const std::size_t n = std::size_t(table_.n_slots()) * cfg.row_elems();
    for (auto& l : layers_) {
      if (cfg.type_k == kv::kv_type::f32) l.k32.resize(n); else l.k16.resize(n);
      if (cfg.type_v == kv::kv_type::f32) l.v32.resize(n); else l.v16.resize(n);
    }
  }

  const kv::kv_config& config() const noexcept { return cfg_; }
  kv::block_table& table() noexcept { return table_; }
  const kv::block_table& table() const noexcept { return table_; }

  void store(std::uint32_t layer, std::uint32_t slot, const float* k, const float* v) noexcept {
    auto& l = layers_[layer];
    const std::size_t n = cfg_.row_elems(), off = std::size_t(slot) * n;
    if (!l.k32.empty()) std::copy(k, k + n, l.k32.data() + off);
    else for (std::size_t i = 0; i < n; ++i) l.k16[off + i] = to_fp16(k[i]);
    if (!l.v32.empty()) std::copy(v, v + n, l.v32.data() + off);
    else for (std::size_t i = 0; i < n; ++i) l.v16[off + i] = to_fp16(v[i]);
  }

  // Reads head `h` of the K (or V) row at `slot` as floats into out[head_dim].
  void load_k(std::uint32_t layer, std::uint32_t slot, std::uint32_t h, float* out) const noexcept {
    load(layers_[layer].k32, layers_[layer].k16, slot, h, out);
  }
  void load_v(std::uint32_t layer, std::uint32_t slot, std::uint32_t h, float* out) const noexcept {
    load(layers_[layer].v32, layers_[layer].v16, slot, h, out);
  }
  std::size_t bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& l : layers_) b += (l.k32.size() + l.v32.size()) * 4 + (l.k16.size() + l.v16.size()) * 2;
    return b;
  }

 private:
  void load(const std::vector<float>& f32, const std::vector<fp16>& f16, std::uint32_t slot, std::uint32_t h,
            float* out) const noexcept {
    const std::size_t d = cfg_.head_dim, off = std::size_t(slot) * cfg_.row_elems() + h * d;
    if (!f32.empty()) std::copy(f32.data() + off, f32.data() + off + d, out);
    else for (std::size_t i = 0; i < d; ++i) out[i] = to_float(f16[off + i]);
  }

  struct layer {
    std::vector<float> k32, v32;
    std::vector<fp16> k16, v16;
  };
  kv::kv_config cfg_;
  kv::block_table table_;
  std::vector<layer> layers_;
};

}  // namespace strata::kernels::cpu
