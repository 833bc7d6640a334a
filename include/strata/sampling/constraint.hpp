// The hook a structural constraint (a grammar matcher, include/strata/grammar/matcher.hpp) plugs
// into the sampler: which tokens may come next, asked per token (cheap) or as a bitset over the
// whole vocabulary (bit t of word t / 64: the same words a GPU backend would upload to mask its
// logits). The sampler only reads; the caller advances the constraint with the chosen token.
#pragma once
#include <cstdint>
#include <span>

#include "strata/sampling/sampler_params.hpp"

namespace strata::sampling {

class token_constraint {
 public:
  virtual ~token_constraint() = default;
  // Whether token t may come next.
  virtual bool allows(token_id t) = 0;
  // Every allowed token as a bitset of (n_vocab + 63) / 64 words; valid until the constraint is
  // used again.
  virtual std::span<const std::uint64_t> allowed() = 0;
};

// How the sampler applies a constraint.
enum class constraint_mode {
  // Mask the logits first, then run the chain: draws from the constrained distribution. The
  // mask costs one vocabulary walk per step (cached per grammar state).
  mask_first,
  // llama.cpp's order: sample from the unconstrained chain, keep the token if allowed, otherwise
  // mask and sample again. Identical to mask_first for greedy decoding; with temperature > 0 an
  // allowed token is drawn with probability p(t) + P(rejected) * p_masked(t), not p_masked(t).
  // sampler::last_candidates() is then the set the kept draw came from (the unconstrained one
  // when the first draw was allowed); use mask_first when those probabilities are reported.
  check_first,
};

constexpr bool mask_allows(std::span<const std::uint64_t> words, token_id t) noexcept {
  return (words[static_cast<std::size_t>(t) >> 6] >> (t & 63)) & 1;
}

}  // namespace strata::sampling
