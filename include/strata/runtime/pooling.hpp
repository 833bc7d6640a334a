// Pooling of per-token hidden states into one embedding vector, as llama.cpp's
// LLAMA_POOLING_TYPE_* (GGUF key "<arch>.pooling_type": 0 none, 1 mean, 2 cls, 3 last, 4 rank).
// Embedding models carry the key; for others the operator chooses (strata-serve --pooling).
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "strata/core/error.hpp"
#include "strata/gguf/keys.hpp"
#include "strata/gguf/reader.hpp"

namespace strata::rt {

enum class pooling : std::uint8_t {
  none,  // no embeddings
  mean,  // average over every prompt token
  cls,   // the first token's state
  last,  // the last token's state (causal embedding models, e.g. Qwen3-Embedding)
};

inline pooling parse_pooling(std::string_view s) {
  if (s == "mean") return pooling::mean;
  if (s == "cls") return pooling::cls;
  if (s == "last") return pooling::last;
  if (s == "none") return pooling::none;
  throw error("unknown pooling '" + std::string(s) + "' (expected mean, cls, last or none)");
}

constexpr std::string_view name(pooling p) noexcept {
  switch (p) {
    case pooling::mean: return "mean";
    case pooling::cls: return "cls";
    case pooling::last: return "last";
    case pooling::none: break;
  }
  return "none";
}

// The model's pooling from "<arch>.pooling_type"; nullopt when the key is absent. Rank pooling
// (rerankers, 4) and unknown values are errors naming the key.
inline std::optional<pooling> pooling_of(const gguf::reader& r) {
  const auto arch = r.find_string(gguf::keys::architecture);
  if (!arch) return std::nullopt;
  const std::string key = gguf::keys::arch_key(*arch, gguf::keys::pooling_type);
  const auto v = r.find_uint(key);
  if (!v) return std::nullopt;
  switch (*v) {
    case 0: return pooling::none;
    case 1: return pooling::mean;
    case 2: return pooling::cls;
    case 3: return pooling::last;
    default:
      throw format_error(key + " = " + std::to_string(*v) + " is not a supported pooling (0 none, 1 mean, 2 cls, 3 last)");
  }
}

// Scales v to unit L2 norm (OpenAI embeddings are unit vectors); a zero vector stays zero.
inline void l2_normalize(std::span<float> v) noexcept {
  double ss = 0;
  for (const float x : v) ss += double(x) * x;
  if (!(ss > 0)) return;
  const float inv = float(1.0 / std::sqrt(ss));
  for (float& x : v) x *= inv;
}

}  // namespace strata::rt
