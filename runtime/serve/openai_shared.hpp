// Pieces the OpenAI routes (openai_chat.cpp, openai_completions.cpp, openai_responses.cpp) share:
// finish reasons, usage objects and log-probability entries (the request fields they share are
// read by request_fields.hpp). Internal to runtime/serve.
#pragma once
#include <boost/json.hpp>

#include <span>
#include <string>
#include <string_view>

#include "request.hpp"
#include "response_format.hpp"

namespace strata::serve::openai::detail {

namespace json = boost::json;
using namespace json_in;

// The content part types whose "text" a message's content array contributes (Chat Completions and
// Responses accept each other's spellings).
constexpr std::string_view text_parts[] = {"text", "input_text", "output_text"};

// "stop" | "length" | "tool_calls" for a finished choice.
const char* finish_reason(const choice_result& c);

// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details}.
json::object usage_json(const generation_result& r);

// Chat logprobs content entries: {token, logprob, bytes, top_logprobs: [...]}.
json::array chat_logprobs(std::span<const logprob_entry> lp);

}  // namespace strata::serve::openai::detail
