// The OpenAI wire formats (docs/spec/api.md §2): POST /v1/chat/completions (openai_chat.cpp),
// /v1/completions (openai_completions.cpp) and /v1/responses (openai_responses.cpp): request
// parsing into parsed_request and the response/SSE shapes the official `openai` SDK accepts (role
// in the first chunk, tool-call deltas, finish_reason, usage chunk, [DONE]; numbered Responses
// events).
#pragma once
#include <memory>

#include "request.hpp"
#include "response_format.hpp"

namespace strata::serve::openai {

parsed_request parse_chat(const json_in::object& body);
parsed_request parse_completion(const json_in::object& body);
parsed_request parse_responses(const json_in::object& body);

std::unique_ptr<response_format> chat_format(response_meta meta, const parsed_request& req);
std::unique_ptr<response_format> completion_format(response_meta meta, const parsed_request& req);
std::unique_ptr<response_format> responses_format(response_meta meta, const parsed_request& req);

}  // namespace strata::serve::openai
