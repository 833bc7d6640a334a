// One generation request as every API route reduces it: a conversation (or a raw prompt), the
// sampling parameters, stop strings and streaming options. The per-API parsers
// (openai_api.hpp, anthropic_api.hpp) fill it from the JSON body, naming bad fields.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "json_input.hpp"
#include "strata/chat/message.hpp"
#include "strata/sampling/sampler_params.hpp"

namespace strata::serve {

struct parsed_request {
  std::string model;                       // the model the client named
  bool chat = true;                        // messages (chat template) or a raw prompt
  std::vector<chat::message> messages;     // chat: rendered with the model's template
  std::optional<std::string> assistant_prefill;  // Anthropic: a trailing assistant turn to continue
  std::string prompt;                      // !chat: prompt text (special tokens parsed, BOS per GGUF)
  std::vector<std::int32_t> prompt_tokens; // !chat: token ids instead of text, if given
  sampling::sampler_params sampling;       // max_tokens inside (-1: until the context is full)
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;              // OpenAI stream_options.include_usage
};

// The sampling fields the APIs share (temperature, top_p, top_k, min_p, seed, penalties,
// logit_bias as {"token id": bias}); each is validated here or by sampling::validate later.
void read_sampling(const json_in::object& o, sampling::sampler_params& p);
// A max-token count from `key` (must be >= 0 where given).
std::optional<std::int32_t> read_max_tokens(const json_in::object& o, const char* key);
// "stop" / "stop_sequences": a string or an array of at most 16 non-empty strings.
std::vector<std::string> read_stop(const json_in::object& o, const char* key);

}  // namespace strata::serve
