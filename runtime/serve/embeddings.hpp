// POST /v1/embeddings in the OpenAI shape (docs/spec/api.md §2.6): input as a string, strings,
// token ids or lists of token ids; encoding_format float or base64 (little-endian float32, the
// openai SDK's default); one pooled, L2-normalized vector per input.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "json_input.hpp"

namespace strata::serve {

inline constexpr std::size_t max_embedding_inputs = 2048;  // the OpenAI API's limit

struct embedding_request {
  std::string model;
  // One entry per input: its text, or (text empty) its token ids.
  std::vector<std::string> texts;
  std::vector<std::vector<std::int32_t>> token_inputs;
  bool base64 = false;
  std::size_t size() const noexcept { return texts.size(); }
};

// `n_embd`: the model's width, which `dimensions` must equal when given.
embedding_request parse_embeddings(const json_in::object& body, std::uint32_t n_embd);

// Base64 of the vector as little-endian float32 bytes.
std::string base64_floats(std::span<const float> v);

std::string embeddings_body(const std::string& model, std::span<const std::vector<float>> vectors, bool base64,
                            std::uint32_t prompt_tokens);

}  // namespace strata::serve
