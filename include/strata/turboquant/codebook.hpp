// Lloyd-Max codebooks for TurboQuant_mse (arXiv:2504.19874, Eq. 4): the optimal b-bit scalar
// quantizer of one coordinate of a uniformly random unit vector in R^d, in the unit-variance
// domain z = √d·x. Tables come from codebooks_generated.hpp (tools/gen_codebooks.py); values
// checked against ../shared/docs/spec/turboquant.md §3.1 (d = 128, b = 3: ±0.24442, ±0.75333,
// ±1.33660, ±2.13147; D_mse 0.3609, 0.1160, 0.03397, 0.009315 for b = 1..4).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "strata/core/error.hpp"
#include "strata/turboquant/codebooks_generated.hpp"

namespace strata::turboquant {

inline constexpr std::array<std::uint32_t, 5> codebook_dims = {16, 32, 64, 128, 256};
inline constexpr std::uint32_t min_bits = 1, max_bits = 4;

// The paper's rounded D_mse (Thm 1, "≈ 0.36, 0.117, 0.03, 0.009"), indexed by b − 1.
inline constexpr std::array<double, 4> paper_d_mse = {0.36, 0.117, 0.03, 0.009};
// The paper's refined TurboQuant_prod distortion D_prod·d/‖y‖² (Thm 2), indexed by b − 1.
inline constexpr std::array<double, 4> paper_d_prod = {1.57, 0.56, 0.18, 0.047};

struct codebook {
  std::uint32_t dim = 0;                // vector dimension the marginal belongs to
  std::uint32_t bits = 0;               // b
  double d_mse = 0;                     // E‖x − x̃‖² for a unit vector (Lloyd-Max optimum)
  std::span<const float> centroids;     // 2^b ascending values, unit-variance domain
  std::span<const float> boundaries;    // 2^b − 1 midpoints

  constexpr std::uint32_t levels() const noexcept { return 1u << bits; }
  // Nearest centroid = number of boundaries below z (cells are Voronoi intervals).
  constexpr std::uint8_t index_of(float z) const noexcept {
    std::uint8_t k = 0;
    for (const float t : boundaries) k += z > t;
    return k;
  }
  // E[x̃ | x] = (1 − D)·x for Lloyd-Max centroids (turboquant.md §1.3): dividing the stored
  // scale by this makes inner products unbiased at no bit cost (EDEN scale).
  constexpr double shrink() const noexcept { return 1.0 - d_mse; }
};

// Codebook for (dim, bits); nullptr-free: throws for an unsupported pair.
constexpr codebook codebook_for(std::uint32_t dim, std::uint32_t bits) {
  for (const auto& r : detail::codebook_rows)
    if (r.dim == dim && r.bits == bits) {
      const std::size_t L = std::size_t(1) << bits;
      return {r.dim, r.bits, r.d_mse, std::span<const float>(r.centroids.data(), L),
              std::span<const float>(r.boundaries.data(), L - 1)};
    }
  throw error("TurboQuant: no codebook for d = " + std::to_string(dim) + ", b = " + std::to_string(bits) +
              " (codebooks exist for d = 16, 32, 64, 128, 256 and b = 1..4)");
}

}  // namespace strata::turboquant
