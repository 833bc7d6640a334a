// Sampling parameters under the names of llama.cpp's server API ("temperature", "top_k",
// "repeat_penalty", ...) with the defaults of common_params_sampling, and their validation.
// One struct per request; validate() names the offending field in a strata::error.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/sampling/rng.hpp"

namespace strata::sampling {

using token_id = std::int32_t;  // same as tokenizer::token_id (llama_token)

struct logit_bias_entry {
  token_id token;  // vocabulary id, in [0, n_vocab)
  float bias;      // added to the logit; -INFINITY bans the token (+inf is rejected)
};

struct sampler_params {
  float temperature = 0.80f;          // divides logits after the filters; <= 0: greedy argmax
  std::int32_t top_k = 40;            // keep the k highest logits; 0: disabled
  float top_p = 0.95f;                // smallest set with cumulative probability >= top_p; 1: disabled
  float min_p = 0.05f;                // drop tokens with p < min_p * p_max; 0: disabled
  float repeat_penalty = 1.00f;       // > 0; 1: disabled (llama.cpp penalty_repeat)
  std::int32_t repeat_last_n = 64;    // window of accepted tokens for all three penalties; 0: none
  float frequency_penalty = 0.00f;    // logit -= count * frequency_penalty (OpenAI)
  float presence_penalty = 0.00f;     // logit -= (count > 0) * presence_penalty (OpenAI)
  std::uint64_t seed = default_seed;  // default_seed: the sampler draws one (see sampler::seed())
  std::vector<logit_bias_entry> logit_bias;  // applied in order; repeated tokens add up
  std::int32_t max_tokens = -1;       // generated-token limit for stop_conditions; -1: none
};

constexpr bool is_greedy(const sampler_params& p) noexcept { return !(p.temperature > 0.0f); }

// Whether the penalty step changes anything (llama.cpp skips it under the same test).
constexpr bool penalties_active(const sampler_params& p) noexcept {
  return p.repeat_last_n > 0 &&
         (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
}

namespace detail {
inline std::string fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}
[[noreturn]] inline void bad_param(const char* field, const std::string& what) {
  throw error(std::string("sampling: ") + field + " " + what);
}
}  // namespace detail

// Throws strata::error naming the first invalid field.
inline void validate(const sampler_params& p, std::int32_t n_vocab) {
  using detail::bad_param;
  using detail::fmt_float;
  if (n_vocab <= 0) bad_param("n_vocab", "must be positive, got " + std::to_string(n_vocab));
  if (!std::isfinite(p.temperature)) bad_param("temperature", "must be finite, got " + fmt_float(p.temperature));
  if (p.top_k < 0) bad_param("top_k", "must be >= 0 (0 disables it), got " + std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad_param("top_p", "must be in (0, 1], got " + fmt_float(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad_param("min_p", "must be in [0, 1], got " + fmt_float(p.min_p));
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
    bad_param("repeat_penalty", "must be finite and > 0 (1 disables it), got " + fmt_float(p.repeat_penalty));
  if (p.repeat_last_n < 0)
    bad_param("repeat_last_n", "must be >= 0 (pass the context size for llama.cpp's -1), got " +
                                   std::to_string(p.repeat_last_n));
  if (!std::isfinite(p.frequency_penalty))
    bad_param("frequency_penalty", "must be finite, got " + fmt_float(p.frequency_penalty));
  if (!std::isfinite(p.presence_penalty))
    bad_param("presence_penalty", "must be finite, got " + fmt_float(p.presence_penalty));
  for (std::size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto& b = p.logit_bias[i];
    const std::string field = "logit_bias[" + std::to_string(i) + "]";
    if (b.token < 0 || b.token >= n_vocab)
      bad_param(field.c_str(), "token " + std::to_string(b.token) + " is outside the vocabulary [0, " +
                                   std::to_string(n_vocab) + ")");
    if (std::isnan(b.bias) || b.bias == INFINITY)
      bad_param(field.c_str(), "bias must be finite or -inf, got " + fmt_float(b.bias));
  }
  if (p.max_tokens < -1) bad_param("max_tokens", "must be >= -1 (-1: unlimited), got " + std::to_string(p.max_tokens));
}

}  // namespace strata::sampling
