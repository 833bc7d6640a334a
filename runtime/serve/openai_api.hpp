// The OpenAI wire formats: POST /v1/chat/completions, /v1/completions and /v1/responses
// (docs/spec/api.md §2): request parsing into parsed_request and the response/SSE shapes the
// official `openai` SDK accepts (role in the first chunk, finish_reason, usage chunk, [DONE]).
#pragma once
#include <memory>

#include "request.hpp"
#include "response_format.hpp"

namespace strata::serve::openai {

parsed_request parse_chat(const json_in::object& body);
parsed_request parse_completion(const json_in::object& body);
parsed_request parse_responses(const json_in::object& body);

std::unique_ptr<response_format> chat_format(response_meta meta, bool include_usage);
std::unique_ptr<response_format> completion_format(response_meta meta, bool include_usage);
std::unique_ptr<response_format> responses_format(response_meta meta, const parsed_request& req);

// "stop" / "length" for an engine finish reason.
const char* finish_reason_name(rt::finish_reason r);

}  // namespace strata::serve::openai
