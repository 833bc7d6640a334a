// Pieces the OpenAI routes (openai_chat.cpp, openai_completions.cpp, openai_responses.cpp) share:
// finish reasons, usage objects, log-probability entries, and the reading of the fields every
// OpenAI request has. Internal to runtime/serve.
#pragma once
#include <boost/json.hpp>

#include <span>
#include <string>

#include "request.hpp"
#include "response_format.hpp"

namespace strata::serve::openai::detail {

namespace json = boost::json;
using namespace json_in;

std::string require_model(const object& body);

// "stop" | "length" | "tool_calls" for a finished choice.
const char* finish_reason(const choice_result& c);

// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details}.
json::object usage_json(const generation_result& r);

// Chat logprobs content entries: {token, logprob, bytes, top_logprobs: [...]}.
json::array chat_logprobs(std::span<const logprob_entry> lp);

// `n` (1..max_choices), `logprobs` + `top_logprobs` (chat: bool + 0..20; a top_logprobs without
// logprobs is refused as llama-server does).
void read_n(const object& body, parsed_request& r);
void read_chat_logprobs(const object& body, parsed_request& r);

// response_format / text.format: text, json_object, json_schema ({json_schema: {name, schema,
// strict}} in chat, flat {name, schema, strict} in the Responses API).
void read_output_format(const object& fmt, const std::string& path, parsed_request& r);

}  // namespace strata::serve::openai::detail
