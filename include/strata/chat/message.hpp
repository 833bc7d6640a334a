// Chat input shared by every template renderer: one message per turn, the render options the
// HF chat-template variables map to (add_generation_prompt, enable_thinking), and the role check
// each renderer runs first. Roles use the OpenAI/HF vocabulary: system, user, assistant, tool.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/core/utf8.hpp"
#include "strata/json/value.hpp"

namespace strata::chat {

// One function call of an assistant turn (OpenAI `tool_calls[i]`).
struct tool_call {
  std::string id;         // the API's call id; no template renders it
  std::string name;       // function name
  std::string arguments;  // JSON text of the arguments object, as the client sent it
};

struct message {
  std::string role;     // "system", "user", "assistant" or "tool" ("ipython" = "tool" for Llama)
  std::string content;  // UTF-8 text, rendered verbatim unless the template trims it; null -> ""
  // Reasoning of an assistant turn, kept apart from `content` (HF's `reasoning_content`). Only the
  // Qwen3 template reads it; when set, even to "", `content` is not searched for <think>…</think>.
  std::optional<std::string> reasoning_content;
  // Calls of an assistant turn; empty = the message has no `tool_calls` key. Qwen3 prints each
  // `arguments` text verbatim (its template's string branch); the Llama templates print the
  // parsed object through tojson (llama.cpp also hands them objects), so it must be valid JSON.
  std::vector<tool_call> tool_calls = {};
  std::string tool_call_id = {};  // tool results: the call answered (not rendered)
};

struct render_options {
  bool add_generation_prompt = true;  // end with the assistant header, ready for the reply
  bool enable_thinking = true;        // Qwen3: false pre-fills an empty <think></think> block
  // Tool definitions as the client sent them (OpenAI {"type": "function", "function": {...}}),
  // printed through tojson; nullptr = no `tools` variable (an empty list differs for Llama).
  const std::vector<json::value>* tools = nullptr;
  std::string_view date_string = "26 Jul 2024";  // Llama 3.x: "Today Date:" (3.2 prints today's)
  bool tools_in_user_message = true;             // Llama 3.x/4: tools go into the first user turn
};

namespace detail {

// Throws unless the conversation is non-empty and every role is one of `allowed`; the message
// names the template, the offending message's index and its role.
inline void check_roles(std::span<const message> msgs, std::string_view template_name,
                        std::span<const std::string_view> allowed) {
  if (msgs.empty())
    throw error("chat: nothing to render with the " + std::string(template_name) + " template: no messages");
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    bool ok = false;
    for (const auto r : allowed) ok = ok || msgs[i].role == r;
    if (ok) continue;
    std::string expected;
    for (std::size_t k = 0; k < allowed.size(); ++k)
      expected += (k == 0 ? "" : k + 1 == allowed.size() ? " or " : ", ") + std::string(allowed[k]);
    throw error("chat: message " + std::to_string(i) + " has role '" + utf8::sanitize(msgs[i].role) +
                "', which the " + std::string(template_name) + " template does not support (expected " +
                expected + ")");
  }
}

}  // namespace detail
}  // namespace strata::chat
