// One generation request as every API route reduces it: a conversation (or a raw prompt), the
// sampling parameters, stop strings, streaming options, the tools the model may call and the
// structure its output must have. The per-API parsers (openai_api.hpp, anthropic_api.hpp) fill it
// from the JSON body, naming bad fields: the fields the APIs share through read_shared_fields
// (request_fields.hpp), their messages with the readers below.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "json_input.hpp"
#include "strata/chat/message.hpp"
#include "strata/chat/tool_calls.hpp"
#include "strata/json/value.hpp"
#include "strata/sampling/sampler_params.hpp"

namespace strata::serve {

inline constexpr std::uint32_t max_choices = 16;  // OpenAI `n`

enum class output_format : std::uint8_t { text, json_object, json_schema };

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
  std::uint32_t n = 1;                     // choices (OpenAI n)
  std::int32_t top_logprobs = -1;          // -1: no logprobs; else the alternatives per token
  // Structured output, enforced by a grammar.
  output_format format = output_format::text;
  std::string schema;                      // json_schema: the schema's JSON text
  std::string schema_name;
  std::string schema_param;                // the request field of the schema, for errors
  // Tools, each in the OpenAI chat shape {"type":"function","function":{name, description,
  // parameters}} whatever the API (what the chat templates print, chat::tool_specs reads).
  std::vector<strata::json::value> tools;
  chat::tool_choice tool_choice;
  bool parallel_tool_calls = true;

  bool may_call_tools() const noexcept { return !tools.empty() && tool_choice.mode != chat::tool_choice_mode::none; }
  bool forced_tool_call() const noexcept {
    return may_call_tools() && (tool_choice.mode == chat::tool_choice_mode::required ||
                                tool_choice.mode == chat::tool_choice_mode::function);
  }
  // Whether the output must be a tool call or JSON from its first token (no free text first).
  bool forced_structure() const noexcept { return format != output_format::text || forced_tool_call(); }
  // Whether the output may hold tool calls (with a JSON format and tool_choice auto: calls or
  // the JSON answer; a forced call leaves no answer).
  bool tool_calls_possible() const noexcept { return may_call_tools(); }
};

// Message content that is a string or an array of parts/blocks: the concatenated text of the
// parts whose "type" is in text_types. Any other part type is refused by name (dropping an image
// silently would give a wrong answer); `what` names the array's items in errors.
std::string content_text(const json_in::element& c, const std::string& path, std::span<const std::string_view> text_types,
                         std::string_view what);

// Calls fn(path, message, role) for each object of body["messages"] ("messages[i]", the object,
// its required "role"); `missing` is the error message when the array is absent.
template <class F>
void for_each_message(const json_in::object& body, const char* missing, F&& fn) {
  const auto msgs = json_in::get_array(body, "messages");
  if (!msgs) throw bad_request(missing, "messages");
  std::size_t i = 0;
  for (auto m : *msgs) {
    const std::string path = "messages[" + std::to_string(i++) + "]";
    const json_in::object mo = json_in::as_object(m, path);
    const auto role = json_in::get_string(mo, "role", path);
    if (!role) throw bad_request("'" + path + ".role' is required", path + ".role");
    fn(path, mo, std::string(*role));
  }
}

// A JSON value of the request (simdjson DOM) as an order-keeping strata::json tree.
strata::json::value to_json_tree(const json_in::element& e);

}  // namespace strata::serve
