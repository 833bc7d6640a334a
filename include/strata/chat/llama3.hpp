// Llama 3 header format as the Llama 3.0 Instruct chat template renders it:
// <|begin_of_text|> then <|start_header_id|>role<|end_header_id|>\n\n{content|trim}<|eot_id|> per turn.
// Must match HF transformers' Jinja2 rendering of Meta-Llama-3-8B-Instruct's `chat_template` (the
// tokenizer.chat_template our Llama fixtures carry) byte for byte; checked in tests/chat/.
#pragma once
#include <array>
#include <span>
#include <string>
#include <string_view>

#include "strata/chat/detail/text.hpp"
#include "strata/chat/message.hpp"

namespace strata::chat {

// - Content is trimmed with Jinja's `trim` (Python str.strip(): Unicode whitespace, both ends).
// - Roles are printed as given, so a system message anywhere is rendered in place.
// - The 3.0 template appends the assistant header *unconditionally*: add_generation_prompt has no
//   effect (the HF renderings with add_generation_prompt=false end with it too). Meta's later
//   templates honour the flag; we render what the template our models ship does.
// - Not reproduced: the 3.1+/3.2 templates' default system block ("Cutting Knowledge Date: …")
//   and their tool conventions (ipython role, <|eom_id|>); this template has no tool role at all.
// - BOS: the text starts with <|begin_of_text|>. A tokenizer that adds BOS itself must be given
//   the text without it (see prompt_for_tokenizer() in chat/template.hpp), or the model sees two.
struct llama3 {
  static constexpr std::string_view name = "llama3";
  static constexpr std::string_view bos_text = "<|begin_of_text|>";
  static constexpr std::array<std::string_view, 3> roles = {"system", "user", "assistant"};

  static std::string render(std::span<const message> msgs, const render_options& /*opt*/ = {}) {
    detail::check_roles(msgs, name, roles);
    std::string out(bos_text);
    for (const message& m : msgs) {
      out += "<|start_header_id|>";
      out += m.role;
      out += "<|end_header_id|>\n\n";
      out += detail::py_strip(m.content);
      out += "<|eot_id|>";
    }
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
};

}  // namespace strata::chat
