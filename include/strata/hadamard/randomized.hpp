// Randomized Hadamard rotation R = (Ĥ·D_r)···(Ĥ·D_1): per round, flip signs with a fixed
// pseudo-random pattern, then a normalized (blocked) WHT. One round already gives the
// theoretical TurboQuant distortion on dense inputs; sparse or spiky inputs (one-hot, outlier
// channels) need 2–3 rounds (turboquant.md §1.6), so TurboQuant uses `default_rounds` = 3.
// The sign pattern is a pure function of (seed, round, index) so shaders can compute or
// tabulate the same one: sign_of() below is the definition.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "strata/hadamard/blocked.hpp"

namespace strata::hadamard {

inline constexpr std::uint64_t default_seed = 0x5354524154415451ull;  // "STRATATQ"
inline constexpr std::uint32_t default_rounds = 3;
inline constexpr std::uint32_t max_rounds = 4;

// splitmix64 (Steele et al.), the finalizer most PRNG seeders use.
constexpr std::uint64_t splitmix64(std::uint64_t z) noexcept {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Sign of coordinate i in round r: −1 when the top bit of splitmix64(seed ^ (r << 32 | i)) is set.
constexpr float sign_of(std::uint64_t seed, std::uint32_t round, std::uint32_t i) noexcept {
  return (splitmix64(seed ^ (std::uint64_t(round) << 32 | i)) >> 63) ? -1.0f : 1.0f;
}

class randomized_hadamard {
 public:
  randomized_hadamard(std::size_t dim, std::uint32_t rounds = default_rounds, std::uint64_t seed = default_seed)
      : dim_(dim), rounds_(rounds), seed_(seed), seg_(split_into_segments(dim)), signs_(dim * rounds) {
    if (rounds == 0 || rounds > max_rounds)
      throw error("randomized Hadamard: " + std::to_string(rounds) + " rounds (supported: 1.." +
                  std::to_string(max_rounds) + ")");
    for (std::uint32_t r = 0; r < rounds; ++r)
      for (std::size_t i = 0; i < dim; ++i) signs_[r * dim + i] = sign_of(seed, r, std::uint32_t(i));
  }

  std::size_t dim() const noexcept { return dim_; }
  std::uint32_t rounds() const noexcept { return rounds_; }
  std::uint64_t seed() const noexcept { return seed_; }
  const segments& segs() const noexcept { return seg_; }
  std::span<const float> signs(std::uint32_t round) const noexcept { return {signs_.data() + round * dim_, dim_}; }

  // x ← R·x (dim elements).
  void forward(float* x) const {
    for (std::uint32_t r = 0; r < rounds_; ++r) {
      const float* s = signs_.data() + r * dim_;
      for (std::size_t i = 0; i < dim_; ++i) x[i] *= s[i];
      fwht_blocked({x, dim_}, seg_);
    }
  }
  // x ← Rᵀ·x: rounds in reverse, each Ĥ then D (both self-inverse).
  void inverse(float* x) const {
    for (std::uint32_t r = rounds_; r-- > 0;) {
      fwht_blocked({x, dim_}, seg_);
      const float* s = signs_.data() + r * dim_;
      for (std::size_t i = 0; i < dim_; ++i) x[i] *= s[i];
    }
  }

 private:
  std::size_t dim_;
  std::uint32_t rounds_;
  std::uint64_t seed_;
  segments seg_;
  std::vector<float> signs_;  // rounds × dim, ±1
};

}  // namespace strata::hadamard
