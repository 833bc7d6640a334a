// TurboQuant_mse vector format (arXiv:2504.19874, Algorithm 1, with the practical choices of
// ../shared/docs/spec/turboquant.md §1.6 and §6): a fixed randomized Hadamard rotation R (3
// rounds, shared by every vector of one head_dim), then, per power-of-two segment of n
// coordinates, an fp16 scale and b-bit Lloyd-Max indices of z = √n·y/‖y‖ (block.hpp has the
// bytes). `format` holds what a cache needs to quantize, dequantize and run fused kernels for
// one (head_dim, bits); it is built once per cache, never per token.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "strata/core/error.hpp"
#include "strata/core/fp16.hpp"
#include "strata/hadamard/randomized.hpp"
#include "strata/turboquant/block.hpp"
#include "strata/turboquant/codebook.hpp"

namespace strata::turboquant {

// How the stored scale s relates to the segment norm ‖y‖ (y = the rotated segment).
enum class scale_mode {
  plain,           // s = ‖y‖: the paper's TurboQuant_mse (MSE = D_mse·‖x‖²; E x̃ = (1 − D)·x)
  unbiased,        // s = ‖y‖/(1 − D_mse): unbiased inner products (EDEN scale); the KV default
  norm_corrected,  // s = √n·‖y‖/‖c[idx]‖: x̃ keeps the exact norm of x (community "norm correction")
};

inline constexpr std::uint32_t max_head_dim = 1024;

struct segment_info {
  std::uint32_t n = 0;            // coordinates (power of two, 16..256)
  std::uint32_t elem_offset = 0;  // first coordinate within the head vector
  std::uint32_t byte_offset = 0;  // first byte of its block within the packed row
  float inv_sqrt_n = 0;           // 1/√n (centroids are in the unit-variance domain)
  codebook cb;                    // Lloyd-Max table for (n, bits)
};

class format {
 public:
  format(std::uint32_t head_dim, std::uint32_t bits, scale_mode mode = scale_mode::unbiased,
         std::uint32_t rounds = hadamard::default_rounds, std::uint64_t seed = hadamard::default_seed)
      : head_dim_(check_dim(head_dim)), bits_(check_bits(bits)), mode_(mode), rot_(head_dim, rounds, seed) {
    const auto& s = rot_.segs();
    n_seg_ = s.count;
    std::uint32_t e = 0, b = 0;
    for (std::uint32_t i = 0; i < s.count; ++i) {
      seg_[i] = {s.size[i], e, b, 1.0f / std::sqrt(float(s.size[i])), codebook_for(s.size[i], bits)};
      e += s.size[i];
      b += std::uint32_t(block_bytes(s.size[i], bits));
    }
    row_bytes_ = b;
  }

  std::uint32_t head_dim() const noexcept { return head_dim_; }
  std::uint32_t bits() const noexcept { return bits_; }
  scale_mode mode() const noexcept { return mode_; }
  std::size_t row_bytes() const noexcept { return row_bytes_; }  // packed bytes per head vector
  std::span<const segment_info> segments() const noexcept { return {seg_.data(), n_seg_}; }
  const hadamard::randomized_hadamard& rotation() const noexcept { return rot_; }

  // Packs x[head_dim] into row[row_bytes()]; scratch holds head_dim floats (no allocation).
  void quantize(const float* x, std::uint8_t* row, float* scratch) const noexcept {
    for (std::uint32_t i = 0; i < head_dim_; ++i) scratch[i] = x[i];
    rot_.forward(scratch);
    std::array<std::uint8_t, hadamard::segments::max_segment> idx;
    for (const auto& sg : segments()) {
      const float* y = scratch + sg.elem_offset;
      double nn = 0;
      for (std::uint32_t i = 0; i < sg.n; ++i) nn += double(y[i]) * y[i];
      const float norm = float(std::sqrt(nn));
      const float to_z = norm > 0 ? std::sqrt(float(sg.n)) / norm : 0.0f;
      double cc = 0;
      for (std::uint32_t i = 0; i < sg.n; ++i) {
        idx[i] = sg.cb.index_of(y[i] * to_z);
        cc += double(sg.cb.centroids[idx[i]]) * sg.cb.centroids[idx[i]];
      }
      float s = norm;
      if (mode_ == scale_mode::unbiased) s = float(norm / sg.cb.shrink());
      if (mode_ == scale_mode::norm_corrected && cc > 0) s = float(norm * std::sqrt(double(sg.n) / cc));
      std::uint8_t* blk = row + sg.byte_offset;
      const fp16 h = to_fp16(std::min(s, 65504.0f));
      blk[block_scale_offset] = std::uint8_t(h.bits & 0xFF);
      blk[block_scale_offset + 1] = std::uint8_t(h.bits >> 8);
      pack_indices(idx.data(), sg.n, bits_, blk);
    }
  }

  // Scale of a segment's block as stored.
  static float scale_of(const std::uint8_t* blk) noexcept {
    return to_float(fp16{std::uint16_t(blk[block_scale_offset] | blk[block_scale_offset + 1] << 8)});
  }

  // ỹ in the rotated domain (reference path; the kernels never materialize it per token).
  void dequantize_rotated(const std::uint8_t* row, float* y) const noexcept {
    std::array<std::uint8_t, hadamard::segments::max_segment> idx;
    for (const auto& sg : segments()) {
      const std::uint8_t* blk = row + sg.byte_offset;
      unpack_indices(blk, sg.n, bits_, idx.data());
      const float s = scale_of(blk) * sg.inv_sqrt_n;
      for (std::uint32_t i = 0; i < sg.n; ++i) y[sg.elem_offset + i] = s * sg.cb.centroids[idx[i]];
    }
  }
  // x̃ = Rᵀ·ỹ.
  void dequantize(const std::uint8_t* row, float* x) const noexcept {
    dequantize_rotated(row, x);
    rot_.inverse(x);
  }

 private:
  static std::uint32_t check_dim(std::uint32_t d) {
    if (d == 0 || d % hadamard::segments::min_segment != 0 || d > max_head_dim)
      throw error("TurboQuant: head_dim " + std::to_string(d) +
                  " is not supported (supported: multiples of 16 up to 1024, e.g. 64, 80, 96, 128, 192, 256)");
    return d;
  }
  static std::uint32_t check_bits(std::uint32_t b) {
    if (b < min_bits || b > max_bits)
      throw error("TurboQuant: " + std::to_string(b) + " bits is not supported (1..4)");
    return b;
  }

  std::uint32_t head_dim_, bits_;
  scale_mode mode_;
  hadamard::randomized_hadamard rot_;
  std::array<segment_info, hadamard::segments::max_count> seg_{};
  std::uint32_t n_seg_ = 0;
  std::uint32_t row_bytes_ = 0;
};

}  // namespace strata::turboquant
