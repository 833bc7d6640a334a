// Llama 4 header format: <|begin_of_text|> then <|header_start|>role<|header_end|>\n\ncontent<|eot|>
// per turn. Must match HF transformers' Jinja2 rendering of the Llama 4 `chat_template` (in
// transformers' models/llama4/processing_llama4.py, shipped with Llama-4-Scout/Maverick; a copy is
// tests/fixtures/chat/llama4_template.jinja) byte for byte; checked in tests/chat/.
#pragma once
#include <array>
#include <span>
#include <string>
#include <string_view>

#include "strata/chat/detail/text.hpp"
#include "strata/chat/llama31.hpp"
#include "strata/chat/message.hpp"

namespace strata::chat {

// - A system message first becomes the system turn, its content trimmed (Jinja `trim`); it is
//   emitted even when empty. No default system text and no date line (the template computes a
//   date but never prints it).
// - Every other turn, a later system message included, is printed untrimmed under its own role.
// - Tool results are printed under the role "ipython", with the content passed through `tojson`:
//   Jinja2 counts a string as iterable, so the template quotes and escapes it as a JSON string.
// - Tools: "Environment: ipython\n" opens the system turn (only written when there is a system
//   message); the tool list goes into the first remaining message, made a user turn with its
//   content trimmed (or into the system turn with tools_in_user_message = false), as Llama 3.1.
// - Assistant tool calls: <|python_start|>{content}<|python_end|> then each call as
//   {"name": "…", "parameters": <arguments|tojson>}, then <|eot|>.
// - add_generation_prompt appends <|header_start|>assistant<|header_end|>\n\n.
// - Not modelled: custom_tools, images.
// - llama.cpp's built-in (non-Jinja) llama4 format trims every turn instead; we follow the template.
// - BOS: as for llama3, the text starts with <|begin_of_text|> (see prompt_for_tokenizer()).
struct llama4 {
  static constexpr std::string_view name = "llama4";
  static constexpr std::string_view bos_text = "<|begin_of_text|>";
  static constexpr std::array<std::string_view, 5> roles = {"system", "user", "assistant", "tool", "ipython"};

  static std::string render(std::span<const message> msgs, const render_options& opt = {}) {
    detail::check_roles(msgs, name, roles);
    std::string out(bos_text);
    const bool tools = opt.tools != nullptr;
    if (msgs[0].role == "system") {
      out += "<|header_start|>system<|header_end|>\n\n";
      if (tools) out += "Environment: ipython\n";
      if (tools && !opt.tools_in_user_message) llama31::tool_list(out, *opt.tools, false);
      out += detail::py_strip(msgs[0].content);
      out += "<|eot|>";
      msgs = msgs.subspan(1);
    }
    if (tools && opt.tools_in_user_message) {
      if (msgs.empty())
        throw error("chat: Cannot put tools in the first user message when there's no first user message! "
                    "(llama4 template)");
      out += "<|header_start|>user<|header_end|>\n\n";
      llama31::tool_list(out, *opt.tools, true);
      out += detail::py_strip(msgs[0].content);
      out += "<|eot|>";
      msgs = msgs.subspan(1);
    }
    for (const message& m : msgs) {
      if (!m.tool_calls.empty()) {
        out += "<|header_start|>assistant<|header_end|>\n\n<|python_start|>" + m.content + "<|python_end|>";
        for (const tool_call& c : m.tool_calls)
          out += "{\"name\": \"" + c.name + "\", \"parameters\": " + llama31::arguments_json(c) + "}";
        out += "<|eot|>";
      } else if (m.role == "tool" || m.role == "ipython") {
        turn(out, "ipython", detail::json_quote(m.content));
      } else {
        turn(out, m.role, m.content);
      }
    }
    if (opt.add_generation_prompt) out += "<|header_start|>assistant<|header_end|>\n\n";
    return out;
  }

 private:
  static void turn(std::string& out, std::string_view role, std::string_view content) {
    out += "<|header_start|>";
    out += role;
    out += "<|header_end|>\n\n";
    out += content;
    out += "<|eot|>";
  }
};

}  // namespace strata::chat
