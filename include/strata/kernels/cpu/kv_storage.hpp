// CPU KV-cache storage: per layer, K and V rows of n_head_kv head vectors per token slot (the
// model's kv::block_table assigns slots), each head vector in the cache's element type (kv::kv_type):
//   f32 / f16   plain, head_dim elements
//   q8_0        head_dim/32 ggml Q8_0 blocks (34 bytes each)
//   tq4/3/2     one packed TurboQuant row (turboquant/block.hpp; 50 bytes at head_dim 128, 3 bits)
// Compressed types also keep an f16 copy of each sequence's most recent tokens in a ring of
// full_precision_window + max_batch rows per layer: attention at position p reads positions
// p − window + 1 .. p from the ring (when the ring still holds them, checked by a position tag)
// and everything older from the compressed rows. Every token is compressed on append, so the
// window never changes what is stored, only what attention reads.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/core/fp16.hpp"
#include "strata/kernels/cpu/kv_row_kernels.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/quant/q8_0.hpp"
#include "strata/turboquant/fused_dot.hpp"


namespace strata::kernels::cpu {

// How one side (K or V) stores a head vector.
class kv_codec {
 public:
  kv_codec(kv::kv_type t, std::uint32_t head_dim) : type_(t), head_dim_(head_dim) {
    switch (t) {
      case kv::kv_type::f32: head_bytes_ = head_dim * 4; break;
      case kv::kv_type::f16: head_bytes_ = head_dim * 2; break;
      case kv::kv_type::q8_0:
        if (head_dim % quant::q8_0::block_elems)
          throw error("KV cache type q8_0 needs a head_dim that is a multiple of 32; this model's head_dim is " +
                      std::to_string(head_dim));
        head_bytes_ = head_dim / quant::q8_0::block_elems * sizeof(quant::q8_0::block);
        break;
      default:
        try {
          tq_.emplace(head_dim, kv::turboquant_bits(t), turboquant::scale_mode::norm_corrected);
        } catch (const error&) {
          throw error("KV cache type " + std::string(kv::name_of(t)) + " does not support this model's head_dim " +
                      std::to_string(head_dim) +
                      " (TurboQuant supports head_dim 64, 128, 256 and other multiples of 16 up to " +
                      std::to_string(turboquant::max_head_dim) + ", e.g. 80, 96, 192)");
        }
        tq_kernels_ = turboquant::kernels_for(tq_->bits());
        head_bytes_ = tq_->row_bytes();
    }
  }

  kv::kv_type type() const noexcept { return type_; }
  std::size_t head_bytes() const noexcept { return head_bytes_; }
  const turboquant::format* turboquant() const noexcept { return tq_ ? &*tq_ : nullptr; }
  const turboquant::fused_kernels& tq_kernels() const noexcept { return tq_kernels_; }

  // scratch: head_dim floats (TurboQuant rotates a copy).
  void encode(const float* x, std::uint8_t* dst, float* scratch) const noexcept {
    switch (type_) {
      case kv::kv_type::f32: std::memcpy(dst, x, head_dim_ * 4); break;
      case kv::kv_type::f16: rows_.narrow_f16(x, reinterpret_cast<fp16*>(dst), head_dim_); break;
      case kv::kv_type::q8_0: {
        auto* b = reinterpret_cast<quant::q8_0::block*>(dst);
        for (std::uint32_t i = 0; i < head_dim_ / 32; ++i)
          b[i] = quant::q8_0::quantize(std::span<const float, 32>(x + 32 * i, 32));
        break;
      }
      default: tq_->quantize(x, dst, scratch);
    }
  }
  void decode(const std::uint8_t* src, float* out) const noexcept {
    switch (type_) {
      case kv::kv_type::f32: std::memcpy(out, src, head_dim_ * 4); break;
      case kv::kv_type::f16: rows_.widen_f16(reinterpret_cast<const fp16*>(src), out, head_dim_); break;
      case kv::kv_type::q8_0: {
        const auto* b = reinterpret_cast<const quant::q8_0::block*>(src);
        for (std::uint32_t i = 0; i < head_dim_ / 32; ++i) quant::q8_0::dequant(b[i], std::span<float, 32>(out + 32 * i, 32));
        break;
      }
      default: tq_->dequantize(src, out);
    }
  }

 private:
  kv::kv_type type_;
  std::uint32_t head_dim_;
  std::size_t head_bytes_ = 0;
  std::optional<turboquant::format> tq_;
  turboquant::fused_kernels tq_kernels_{};
  kv_rows::kernels rows_ = kv_rows::best();
};

class kv_storage {
 public:
  explicit kv_storage(const kv::kv_config& cfg)
      : cfg_(cfg),
        k_(cfg.type_k, cfg.head_dim),
        v_(cfg.type_v, cfg.head_dim),
        ring_rows_(window() ? cfg.full_precision_window + std::max<std::uint32_t>(cfg.max_batch, 1) : 0),
        layers_(cfg.n_layer),
        scratch_(cfg.head_dim) {
    const std::size_t slots = cfg.n_slots();
    const std::size_t ring = std::size_t(cfg.n_seq) * ring_rows_ * cfg.row_elems();
    for (auto& l : layers_) {
      l.k.resize(slots * cfg.n_head_kv * k_.head_bytes());
      l.v.resize(slots * cfg.n_head_kv * v_.head_bytes());
      if (kv::is_compressed(cfg.type_k)) l.k_ring.resize(ring);
      if (kv::is_compressed(cfg.type_v)) l.v_ring.resize(ring);
      l.ring_pos.assign(std::size_t(cfg.n_seq) * ring_rows_, std::uint32_t(-1));
    }
  }

  const kv::kv_config& config() const noexcept { return cfg_; }
  const kv_codec& k_codec() const noexcept { return k_; }
  const kv_codec& v_codec() const noexcept { return v_; }
  // Row kernels for the compressed-attention path (widen f16, dot, axpy), chosen once.
  const kv_rows::kernels& rows() const noexcept { return rows_; }
  // Full-precision window in effect (0 when neither side is compressed).
  std::uint32_t window() const noexcept {
    return kv::is_compressed(cfg_.type_k) || kv::is_compressed(cfg_.type_v) ? cfg_.full_precision_window : 0;
  }

  // Stores the K and V rows (n_head_kv·head_dim floats each) of token `pos` of `seq` at `slot`:
  // compressed on append, plus the f16 ring copy for compressed types. `scratch` (head_dim
  // floats) lets several threads store different tokens at once; null uses the cache's own.
  void store(std::uint32_t layer, std::uint32_t seq, std::uint32_t pos, std::uint32_t slot, const float* k,
             const float* v, float* scratch = nullptr) noexcept {
    auto& l = layers_[layer];
    const std::uint32_t d = cfg_.head_dim;
    if (!scratch) scratch = scratch_.data();
    for (std::uint32_t h = 0; h < cfg_.n_head_kv; ++h) {
      k_.encode(k + h * d, l.k.data() + (std::size_t(slot) * cfg_.n_head_kv + h) * k_.head_bytes(), scratch);
      v_.encode(v + h * d, l.v.data() + (std::size_t(slot) * cfg_.n_head_kv + h) * v_.head_bytes(), scratch);
    }
    if (!ring_rows_) return;
    const std::size_t r = std::size_t(seq) * ring_rows_ + pos % ring_rows_, n = cfg_.row_elems();
    if (!l.k_ring.empty()) rows_.narrow_f16(k, l.k_ring.data() + r * n, n);
    if (!l.v_ring.empty()) rows_.narrow_f16(v, l.v_ring.data() + r * n, n);
    l.ring_pos[r] = pos;
  }
  // Single-sequence form kept for callers without positions: no ring copy.
  void store(std::uint32_t layer, std::uint32_t slot, const float* k, const float* v) noexcept {
    auto& l = layers_[layer];
    const std::uint32_t d = cfg_.head_dim;
    for (std::uint32_t h = 0; h < cfg_.n_head_kv; ++h) {
      k_.encode(k + h * d, l.k.data() + (std::size_t(slot) * cfg_.n_head_kv + h) * k_.head_bytes(), scratch_.data());
      v_.encode(v + h * d, l.v.data() + (std::size_t(slot) * cfg_.n_head_kv + h) * v_.head_bytes(), scratch_.data());
    }
  }

  // Encoded head vector `h` of the K (V) row at `slot`.
  const std::uint8_t* k_head(std::uint32_t layer, std::uint32_t slot, std::uint32_t h) const noexcept {
    return layers_[layer].k.data() + (std::size_t(slot) * cfg_.n_head_kv + h) * k_.head_bytes();
  }
  const std::uint8_t* v_head(std::uint32_t layer, std::uint32_t slot, std::uint32_t h) const noexcept {
    return layers_[layer].v.data() + (std::size_t(slot) * cfg_.n_head_kv + h) * v_.head_bytes();
  }
  // f16 copy of head `h` of position j of seq, or null when the ring no longer holds it.
  const fp16* k_recent(std::uint32_t layer, std::uint32_t seq, std::uint32_t j, std::uint32_t h) const noexcept {
    return recent(layers_[layer].k_ring, layer, seq, j, h);
  }
  const fp16* v_recent(std::uint32_t layer, std::uint32_t seq, std::uint32_t j, std::uint32_t h) const noexcept {
    return recent(layers_[layer].v_ring, layer, seq, j, h);
  }

  // Reads head `h` of the K (or V) row at `slot` as floats into out[head_dim] (decoded).
  void load_k(std::uint32_t layer, std::uint32_t slot, std::uint32_t h, float* out) const noexcept {
    k_.decode(k_head(layer, slot, h), out);
  }
  void load_v(std::uint32_t layer, std::uint32_t slot, std::uint32_t h, float* out) const noexcept {
    v_.decode(v_head(layer, slot, h), out);
  }

  // Bytes per token slot over all layers, compressed rows only (the ring is a fixed extra).
  std::size_t bytes_per_token() const noexcept {
    return std::size_t(cfg_.n_layer) * cfg_.n_head_kv * (k_.head_bytes() + v_.head_bytes());
  }
  std::size_t ring_bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& l : layers_) b += (l.k_ring.size() + l.v_ring.size()) * 2 + l.ring_pos.size() * 4;
    return b;
  }
  std::size_t bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& l : layers_) b += l.k.size() + l.v.size();
    return b + ring_bytes();
  }

 private:
  const fp16* recent(const std::vector<fp16>& ring, std::uint32_t layer, std::uint32_t seq, std::uint32_t j,
                     std::uint32_t h) const noexcept {
    if (ring.empty()) return nullptr;
    const std::size_t r = std::size_t(seq) * ring_rows_ + j % ring_rows_;
    if (layers_[layer].ring_pos[r] != j) return nullptr;
    return ring.data() + r * cfg_.row_elems() + std::size_t(h) * cfg_.head_dim;
  }

  struct layer {
    std::vector<std::uint8_t> k, v;        // [slot][head] encoded head vectors
    std::vector<fp16> k_ring, v_ring;      // [seq][ring row][head·head_dim], compressed types only
    std::vector<std::uint32_t> ring_pos;   // [seq][ring row]: position held (−1: none)
  };
  kv::kv_config cfg_;
  kv_codec k_, v_;
  std::uint32_t ring_rows_;
  std::vector<layer> layers_;
  std::vector<float> scratch_;  // head_dim floats for TurboQuant encoding (store is single-threaded)
  kv_rows::kernels rows_ = kv_rows::best();
};

}  // namespace strata::kernels::cpu
