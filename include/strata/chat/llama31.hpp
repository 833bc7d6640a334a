// Llama 3.1 / 3.2 / 3.3 Instruct: the Llama 3 header format with a system turn that always
// carries "Cutting Knowledge Date" / "Today Date", JSON tool calls and the ipython role. Must match
// HF transformers' Jinja2 rendering of Meta-Llama-3.1-8B-Instruct's `chat_template` (3.3 ships the
// same text; 3.2 differs only in printing today's date) byte for byte; checked in tests/chat/.
#pragma once
#include <array>
#include <span>
#include <string>
#include <string_view>

#include "strata/chat/detail/text.hpp"
#include "strata/chat/message.hpp"
#include "strata/core/error.hpp"
#include "strata/json/parse.hpp"
#include "strata/json/write.hpp"

namespace strata::chat {

// - A first system message is taken out and trimmed; the system turn is always written:
//   ["Environment: ipython\n" when tools] "Cutting Knowledge Date: December 2023\nToday Date:
//   {date_string}\n\n" [tools, when !tools_in_user_message] {system}<|eot_id|>.
// - With tools and tools_in_user_message (the default), the next message, whatever its role, is
//   taken out and becomes a user turn: the instructions, each tool as tojson(indent=4) + "\n\n",
//   then its trimmed content. With no message left the template raises; so does this.
// - Other turns: content trimmed. Assistant tool calls: exactly one per message (the template
//   raises otherwise), written as {"name": "…", "parameters": <arguments|tojson>}<|eot_id|>.
// - Tool results: role ipython, content through tojson (a string is quoted: Jinja2 counts it as
//   iterable).
// - Not modelled: builtin_tools (brave_search, wolfram_alpha: <|python_tag|> and <|eom_id|>),
//   custom_tools, image content.
struct llama31 {
  static constexpr std::string_view name = "llama31";
  static constexpr std::string_view bos_text = "<|begin_of_text|>";
  static constexpr std::array<std::string_view, 5> roles = {"system", "user", "assistant", "tool", "ipython"};

  static std::string render(std::span<const message> msgs, const render_options& opt = {}) {
    detail::check_roles(msgs, name, roles);
    std::string out(bos_text);
    std::string_view system;
    if (msgs[0].role == "system") {
      system = detail::py_strip(msgs[0].content);
      msgs = msgs.subspan(1);
    }
    const bool tools = opt.tools != nullptr;
    out += "<|start_header_id|>system<|end_header_id|>\n\n";
    if (tools) out += "Environment: ipython\n";
    out += "Cutting Knowledge Date: December 2023\nToday Date: ";
    out += opt.date_string;
    out += "\n\n";
    if (tools && !opt.tools_in_user_message) tool_list(out, *opt.tools, false);
    out += system;
    out += "<|eot_id|>";
    if (tools && opt.tools_in_user_message) {
      if (msgs.empty())
        throw error("chat: Cannot put tools in the first user message when there's no first user message! "
                    "(llama31 template)");
      out += "<|start_header_id|>user<|end_header_id|>\n\n";
      tool_list(out, *opt.tools, true);
      out += detail::py_strip(msgs[0].content);
      out += "<|eot_id|>";
      msgs = msgs.subspan(1);
    }
    for (const message& m : msgs) {
      if (m.tool_calls.empty() && (m.role == "tool" || m.role == "ipython")) {
        out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + detail::json_quote(m.content) + "<|eot_id|>";
      } else if (!m.tool_calls.empty()) {
        if (m.tool_calls.size() != 1)
          throw error("chat: This model only supports single tool-calls at once! (llama31 template, " +
                      std::to_string(m.tool_calls.size()) + " calls in one message)");
        const tool_call& c = m.tool_calls[0];
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"" + c.name + "\", \"parameters\": " +
               arguments_json(c) + "}<|eot_id|>";
      } else {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
        out += detail::py_strip(m.content);
        out += "<|eot_id|>";
      }
    }
    if (opt.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }

  // The instructions and tool list both Llama 3.1 and Llama 4 write (in the user or system turn).
  static void tool_list(std::string& out, const std::vector<json::value>& tools, bool user_turn) {
    if (user_turn)
      out += "Given the following functions, please respond with a JSON for a function call with its proper "
             "arguments that best answers the given prompt.\n\n";
    else
      out += "You have access to the following functions. To call a function, please respond with JSON for a "
             "function call.";
    out += "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
           "value}.Do not use variables.\n\n";
    for (const json::value& t : tools) out += json::dumps(t, {.indent = 4}) + "\n\n";
  }

  // `arguments | tojson` of the parsed object.
  static std::string arguments_json(const tool_call& c) {
    try {
      return json::dumps(json::parse(c.arguments, "tool call arguments"));
    } catch (const json::parse_error& e) {
      throw error("chat: the arguments of tool call '" + c.name + "' are not valid JSON: " + e.what());
    }
  }
};

}  // namespace strata::chat
