// ChatML as the Qwen3 chat template renders it: <|im_start|>role\ncontent<|im_end|>\n per turn.
// Must match, byte for byte, HF transformers' Jinja2 rendering of the `chat_template` in Qwen3's
// tokenizer_config.json (also the GGUF's tokenizer.chat_template); checked against those renderings
// in tests/chat/, tool definitions, assistant tool_calls and tool results included.
#pragma once
#include <array>
#include <span>
#include <string>
#include <string_view>

#include "strata/chat/detail/text.hpp"
#include "strata/chat/message.hpp"
#include "strata/json/write.hpp"

namespace strata::chat {

// What the Qwen3 template does, beyond plain ChatML:
// - Content is never trimmed. A system message first becomes the system turn; a later one is
//   rendered in place like a user turn.
// - Reasoning: an assistant turn's reasoning is `reasoning_content` when set, else the text
//   between <think> and </think> in `content` (and `content` becomes what follows the last </think>).
//   Only assistant turns *after the last user query* (the turns of the current agentic step)
//   keep it, as <think>\n{reasoning}\n</think>\n\n; the last message always gets that block, even
//   empty. Earlier turns are rendered with their reasoning dropped.
// - A "user query" is a user message that is not entirely a <tool_response>…</tool_response>;
//   with none, every assistant turn counts as history.
// - Consecutive tool messages share one user turn, each wrapped in <tool_response>\n…\n</tool_response>.
// - enable_thinking = false adds an empty <think>\n\n</think>\n\n after the generation prompt.
// - Tools (a non-empty list): a system turn "# Tools ... <tools>" with one tojson line per tool
//   and the <tool_call> instructions, the first system message's content (if any) leading it.
//   Each assistant tool call follows the content as <tool_call>\n{"name": "…", "arguments": …}\n
//   </tool_call>, separated by "\n" (and from the content when the content is not empty).
// No BOS: Qwen3 vocabularies have add_bos_token = false.
struct chatml {
  static constexpr std::string_view name = "chatml";
  static constexpr std::string_view bos_text = "";
  static constexpr std::array<std::string_view, 4> roles = {"system", "user", "assistant", "tool"};

  static std::string render(std::span<const message> msgs, const render_options& opt = {}) {
    detail::check_roles(msgs, name, roles);
    const std::size_t last_query = last_query_index(msgs);
    std::string out;
    const bool tools = opt.tools != nullptr && !opt.tools->empty();
    if (tools) {
      out += "<|im_start|>system\n";
      if (msgs[0].role == "system") out += msgs[0].content + "\n\n";
      out += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
      for (const json::value& t : *opt.tools) {
        out += '\n';
        out += json::dumps(t);
      }
      out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
             "<args-json-object>}\n</tool_call><|im_end|>\n";
    }
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      const message& m = msgs[i];
      const bool last = i + 1 == msgs.size();
      if (m.role == "system" && i == 0 && tools) continue;  // already in the tools turn
      if (m.role == "system" || m.role == "user") {
        turn(out, m.role, m.content);
      } else if (m.role == "assistant") {
        std::string_view content = m.content;
        std::string_view reasoning;
        if (m.reasoning_content) {
          reasoning = *m.reasoning_content;
        } else if (content.find("</think>") != std::string_view::npos) {
          reasoning = detail::lstrip(
              detail::after_last(detail::rstrip(detail::before_first(content, "</think>"), '\n'), "<think>"), '\n');
          content = detail::lstrip(detail::after_last(content, "</think>"), '\n');
        }
        out += "<|im_start|>assistant\n";
        // `reasoning` is tested before stripping, as the template does: "\n" alone still counts.
        if (i > last_query && (last || !reasoning.empty())) {
          out += "<think>\n";
          out += detail::strip(reasoning, '\n');
          out += "\n</think>\n\n";
          out += detail::lstrip(content, '\n');
        } else {
          out += content;
        }
        for (std::size_t k = 0; k < m.tool_calls.size(); ++k) {
          if (k > 0 || !content.empty()) out += '\n';
          out += "<tool_call>\n{\"name\": \"" + m.tool_calls[k].name + "\", \"arguments\": " +
                 m.tool_calls[k].arguments + "}\n</tool_call>";
        }
        out += "<|im_end|>\n";
      } else {  // tool
        if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
        out += "\n<tool_response>\n";
        out += m.content;
        out += "\n</tool_response>";
        if (last || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
      }
    }
    if (opt.add_generation_prompt) {
      out += "<|im_start|>assistant\n";
      if (!opt.enable_thinking) out += "<think>\n\n</think>\n\n";
    }
    return out;
  }

 private:
  static void turn(std::string& out, std::string_view role, std::string_view content) {
    out += "<|im_start|>";
    out += role;
    out += '\n';
    out += content;
    out += "<|im_end|>\n";
  }

  // Index of the last user message that is a real query (not a wrapped tool response); the
  // template's default when there is none is the last index, which no turn can come after.
  static std::size_t last_query_index(std::span<const message> msgs) {
    for (std::size_t i = msgs.size(); i-- > 0;) {
      const std::string_view c = msgs[i].content;
      const bool tool_response = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
      if (msgs[i].role == "user" && !tool_response) return i;
    }
    return msgs.size() - 1;
  }
};

}  // namespace strata::chat
