// The Anthropic Messages wire format: POST /v1/messages and /v1/messages/count_tokens
// (docs/spec/api.md §1): request parsing (system as string or blocks, content blocks,
// stop_sequences, a trailing assistant turn as prefill) and the exact SSE event sequence with
// `event:` lines, ping, usage in message_delta and stop_reason/stop_sequence.
#pragma once
#include <memory>

#include "request.hpp"
#include "response_format.hpp"

namespace strata::serve::anthropic {

// count_tokens: max_tokens is not required there.
parsed_request parse_messages(const json_in::object& body, bool count_tokens = false);
std::unique_ptr<response_format> messages_format(response_meta meta);

const char* stop_reason_name(rt::finish_reason r);

}  // namespace strata::serve::anthropic
