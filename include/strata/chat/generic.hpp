// Plain-text fallback for models whose chat template is absent or of a family Strata does not
// implement: "role: content\n" per turn, then "assistant:" as the generation prompt. It matches
// no model's training format (it is not llama.cpp's fallback either, which is ChatML); it only
// gives base models a readable transcript to continue.
#pragma once
#include <array>
#include <span>
#include <string>
#include <string_view>

#include "strata/chat/message.hpp"

namespace strata::chat {

// Content is written verbatim; no special tokens and no BOS text (the tokenizer adds BOS if the
// vocabulary asks for it). enable_thinking and reasoning_content are ignored.
struct generic {
  static constexpr std::string_view name = "generic";
  static constexpr std::string_view bos_text = "";
  static constexpr std::array<std::string_view, 4> roles = {"system", "user", "assistant", "tool"};

  static std::string render(std::span<const message> msgs, const render_options& opt = {}) {
    detail::check_roles(msgs, name, roles);
    std::string out;
    for (const message& m : msgs) {
      out += m.role;
      out += ": ";
      out += m.content;
      out += '\n';
    }
    if (opt.add_generation_prompt) out += "assistant:";
    return out;
  }
};

}  // namespace strata::chat
