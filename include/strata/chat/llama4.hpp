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
#include "strata/chat/message.hpp"

namespace strata::chat {

// - A system message first becomes the system turn, its content trimmed (Jinja `trim`); it is
//   emitted even when empty. No default system text and no date line (the template computes a
//   date but never prints it).
// - Every other turn, a later system message included, is printed untrimmed under its own role.
// - Tool results are printed under the role "ipython", with the content passed through `tojson`:
//   Jinja2 counts a string as iterable, so the template quotes and escapes it as a JSON string.
// - add_generation_prompt appends <|header_start|>assistant<|header_end|>\n\n.
// - Not modelled: tool definitions, assistant tool_calls (<|python_start|>…), images.
// - llama.cpp's built-in (non-Jinja) llama4 format trims every turn instead; we follow the template.
// - BOS: as for llama3, the text starts with <|begin_of_text|> (see prompt_for_tokenizer()).
struct llama4 {
  static constexpr std::string_view name = "llama4";
  static constexpr std::string_view bos_text = "<|begin_of_text|>";
  static constexpr std::array<std::string_view, 4> roles = {"system", "user", "assistant", "tool"};

  static std::string render(std::span<const message> msgs, const render_options& opt = {}) {
    detail::check_roles(msgs, name, roles);
    std::string out(bos_text);
    std::size_t first = 0;
    if (msgs[0].role == "system") {
      turn(out, "system", detail::py_strip(msgs[0].content));
      first = 1;
    }
    for (std::size_t i = first; i < msgs.size(); ++i) {
      if (msgs[i].role == "tool")
        turn(out, "ipython", detail::json_quote(msgs[i].content));
      else
        turn(out, msgs[i].role, msgs[i].content);
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
