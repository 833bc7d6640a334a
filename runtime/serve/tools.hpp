// Tool definitions and tool_choice as the two APIs send them (docs/spec/api.md §1.2, §2.1, §2.7),
// read into the request's API-neutral form: OpenAI chat nests {"type":"function","function":{name,
// description, parameters}}, the Responses API flattens it, Anthropic sends {name, description,
// input_schema}. Every tool becomes the OpenAI chat shape, which the chat templates print.
#pragma once
#include "request.hpp"

namespace strata::serve {

enum class tool_shape { chat, responses, anthropic };

// Reads body["tools"] into r.tools (names checked: [a-zA-Z0-9_-]{1,64}, unique).
void read_tools(const json_in::object& body, tool_shape shape, parsed_request& r);
// OpenAI tool_choice: "none" | "auto" | "required" | {"type":"function","function":{"name"}}
// (chat) or {"type":"function","name"} (Responses); parallel_tool_calls.
void read_openai_tool_choice(const json_in::object& body, parsed_request& r);
// Anthropic tool_choice: {"type":"auto"|"any"|"tool"|"none", "name", "disable_parallel_tool_use"}.
void read_anthropic_tool_choice(const json_in::object& body, parsed_request& r);

}  // namespace strata::serve
