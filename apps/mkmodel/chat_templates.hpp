// The real chat templates of the preset checkpoints (tokenizer.chat_template), verbatim.
#pragma once
#include <string_view>

namespace strata::mkmodel {

std::string_view llama3_chat_template() noexcept;   // Llama 3 8B Instruct (3.0; the fixtures' template)
std::string_view llama31_chat_template() noexcept;  // Llama 3.1 8B Instruct
std::string_view qwen3_chat_template() noexcept;    // Qwen3 (hybrid thinking)
std::string_view llama4_chat_template() noexcept;   // Llama 4 Scout / Maverick Instruct

}  // namespace strata::mkmodel
