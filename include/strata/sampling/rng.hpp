// Seeded, platform-independent randomness for sampling. std::mt19937's output sequence is fixed
// by the standard, but std::uniform_real_distribution / generate_canonical are not (libstdc++,
// libc++ and MSVC compose the words differently), so the [0, 1) draw is written out here.
// We compose it the way libstdc++ does, so a Linux llama.cpp build (dist sampler: mt19937 +
// uniform_real_distribution<double>(0, 1)) draws the same u for the same 32-bit seed.
#pragma once
#include <cstdint>
#include <random>

namespace strata::sampling {

// llama.cpp's LLAMA_DEFAULT_SEED: a seed of this value means "pick a random one".
inline constexpr std::uint64_t default_seed = 0xFFFF'FFFF;

// A fresh seed from std::random_device (32 bits, so it can also be replayed in llama.cpp);
// never default_seed itself.
inline std::uint64_t random_seed() {
  std::random_device rd;
  std::uint32_t s = rd();
  while (s == default_seed) s = rd();
  return s;
}

// default_seed -> random_seed(), anything else unchanged.
inline std::uint64_t resolve_seed(std::uint64_t seed) { return seed == default_seed ? random_seed() : seed; }

class rng {
 public:
  // Seeds that fit in 32 bits seed mt19937 directly, as llama.cpp does; wider seeds go through
  // std::seed_seq, whose mixing the standard also specifies exactly.
  explicit rng(std::uint64_t seed) : seed_(seed) { reseed(seed); }

  void reseed(std::uint64_t seed) {
    seed_ = seed;
    if (seed <= 0xFFFF'FFFFu) {
      mt_.seed(static_cast<std::uint32_t>(seed));
    } else {
      std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
      mt_.seed(seq);
    }
  }

  // Uniform in [0, 1) from two 32-bit words: u = round_to_double(lo + hi * 2^32) / 2^64, clamped
  // below 1 when that rounding reaches 2^64. The product and the division are exact, so the
  // single rounding of the sum is the only one and the result is the same on every platform.
  double uniform() noexcept {
    const double lo = static_cast<double>(mt_());
    const double hi = static_cast<double>(mt_());
    const double u = (lo + hi * 4294967296.0) / 18446744073709551616.0;
    return u < 1.0 ? u : 0x1.fffffffffffffp-1;  // largest double below 1
  }

  std::uint32_t next_u32() noexcept { return static_cast<std::uint32_t>(mt_()); }
  std::uint64_t seed() const noexcept { return seed_; }

 private:
  std::mt19937 mt_;
  std::uint64_t seed_;
};

}  // namespace strata::sampling
