// The Anthropic Messages wire format: POST /v1/messages and /v1/messages/count_tokens
// (docs/spec/api.md §1): request parsing (system as string or blocks, text / tool_use /
// tool_result / thinking blocks, tools and tool_choice, stop_sequences, a trailing assistant turn
// as prefill) and the exact SSE event sequence with `event:` lines, ping, tool_use blocks with
// input_json_delta, usage in message_delta and stop_reason/stop_sequence.
#pragma once
#include <memory>

#include "request.hpp"
#include "response_format.hpp"

namespace strata::serve::anthropic {

// count_tokens: max_tokens is not required there.
parsed_request parse_messages(const json_in::object& body, bool count_tokens = false);
std::unique_ptr<response_format> messages_format(response_meta meta, const parsed_request& req);

// "end_turn" | "max_tokens" | "stop_sequence" | "tool_use" | "model_context_window_exceeded".
const char* stop_reason_name(const choice_result& c);

}  // namespace strata::serve::anthropic
