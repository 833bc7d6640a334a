// Chat templates, implemented natively (no Jinja engine): pick the family from the GGUF's
// tokenizer.chat_template (or a CLI name) and render a conversation to the prompt text that the
// model's own template would produce. One header per family: chatml.hpp (Qwen3), llama3.hpp (3.0),
// llama31.hpp (3.1-3.3, tools), llama4.hpp, generic.hpp; each states which real template it
// reproduces and what it leaves out. Tool calls: tool_calls.hpp (format, grammar, prefix) and
// tool_call_parser.hpp (model output -> calls, streaming).
#pragma once
#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "strata/chat/chatml.hpp"
#include "strata/chat/generic.hpp"
#include "strata/chat/llama3.hpp"
#include "strata/chat/llama31.hpp"
#include "strata/chat/llama4.hpp"
#include "strata/chat/message.hpp"
#include "strata/gguf/keys.hpp"
#include "strata/gguf/reader.hpp"

namespace strata::chat {

enum class template_kind { chatml, llama3, llama31, llama4, generic };

// Names accepted by kind_from_name(), for a CLI flag's help and validation.
inline constexpr std::array<std::string_view, 6> template_names = {"chatml", "qwen3", "llama3", "llama31", "llama4",
                                                                   "generic"};

constexpr std::string_view name(template_kind k) noexcept {
  switch (k) {
    case template_kind::chatml: return chatml::name;
    case template_kind::llama3: return llama3::name;
    case template_kind::llama31: return llama31::name;
    case template_kind::llama4: return llama4::name;
    case template_kind::generic: break;
  }
  return generic::name;
}

// "qwen3" is an alias of "chatml" (the Qwen3 template is ChatML plus its thinking rules).
constexpr std::optional<template_kind> kind_from_name(std::string_view s) noexcept {
  if (s == "chatml" || s == "qwen3") return template_kind::chatml;
  if (s == "llama3") return template_kind::llama3;
  if (s == "llama31") return template_kind::llama31;
  if (s == "llama4") return template_kind::llama4;
  if (s == "generic") return template_kind::generic;
  return std::nullopt;
}

// Family of a Jinja chat template, by the special tokens it writes (the markers llama.cpp's
// llm_chat_detect_template uses for the same families, in the same order); a Llama 3 header
// template that writes "Cutting Knowledge Date" is the 3.1+ one. Anything else is generic.
constexpr template_kind detect(std::string_view chat_template) noexcept {
  const auto has = [&](std::string_view m) { return chat_template.find(m) != std::string_view::npos; };
  if (has("<|im_start|>")) return template_kind::chatml;
  if (has("<|start_header_id|>") && has("<|end_header_id|>"))
    return has("Cutting Knowledge Date") ? template_kind::llama31 : template_kind::llama3;
  if (has("<|header_start|>") && has("<|header_end|>")) return template_kind::llama4;
  return template_kind::generic;
}

// Family of a model's template. A file without tokenizer.chat_template gets generic (llama.cpp
// would use ChatML, whose markers a base model's vocabulary usually lacks as special tokens).
// Throws format_error when the key is present but not a string.
inline template_kind detect(const gguf::reader& r) {
  const auto t = r.find_string(gguf::keys::chat_template);
  return t ? detect(*t) : template_kind::generic;
}

// Throws strata::error for an empty conversation or a role the family does not support.
inline std::string render(template_kind k, std::span<const message> msgs, const render_options& opt = {}) {
  switch (k) {
    case template_kind::chatml: return chatml::render(msgs, opt);
    case template_kind::llama3: return llama3::render(msgs, opt);
    case template_kind::llama31: return llama31::render(msgs, opt);
    case template_kind::llama4: return llama4::render(msgs, opt);
    case template_kind::generic: break;
  }
  return generic::render(msgs, opt);
}

// BOS text the rendering starts with ("" when the template writes none).
constexpr std::string_view bos_text(template_kind k) noexcept {
  switch (k) {
    case template_kind::chatml: return chatml::bos_text;
    case template_kind::llama3: return llama3::bos_text;
    case template_kind::llama31: return llama31::bos_text;
    case template_kind::llama4: return llama4::bos_text;
    case template_kind::generic: break;
  }
  return generic::bos_text;
}

// Exactly one BOS. The Llama renderings start with the BOS *text*; tokenized with
// parse_special = true it becomes a BOS token, and a tokenizer called with add_special = true on a
// vocabulary with add_bos_token adds another. llama.cpp avoids the double BOS by removing the
// template's leading BOS text before tokenizing; this does the same. Pass the tokenizer's
// decision (add_special && the vocabulary's add_bos) as `tokenizer_adds_bos`; when it is false the
// text keeps its BOS, which then becomes the one BOS token.
constexpr std::string_view prompt_for_tokenizer(std::string_view rendered, template_kind k,
                                                bool tokenizer_adds_bos) noexcept {
  const std::string_view bos = bos_text(k);
  if (tokenizer_adds_bos && !bos.empty() && rendered.starts_with(bos)) rendered.remove_prefix(bos.size());
  return rendered;
}

}  // namespace strata::chat
