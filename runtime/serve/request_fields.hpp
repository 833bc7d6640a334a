// The fields every generation API shares, read by one parser from a table of how each API names
// and bounds them (request_fields.cpp): model, sampling (temperature, top_p, top_k, min_p,
// penalties, seed, logit_bias), the max-token count, stop strings, stream options, n, logprobs,
// tools and tool_choice, and the structured-output format. Messages, prompts and the fields only
// one API has stay with that API's parser (openai_*.cpp, anthropic_api.cpp).
#pragma once
#include <cstdint>

#include "request.hpp"

namespace strata::serve {

enum class generation_api : std::uint8_t { chat_completions, completions, responses, anthropic_messages };

// A request holding the shared fields of `body` as `api` spells them; every bad field is named in
// a 400 api_error (field and limit).
parsed_request read_shared_fields(const json_in::object& body, generation_api api);

}  // namespace strata::serve
