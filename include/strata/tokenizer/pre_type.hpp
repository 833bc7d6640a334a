// Pre-tokenizer kinds named by GGUF `tokenizer.ggml.pre`, and the load-time flags each name
// implies, as llama.cpp (d32676d77, llama_vocab::impl::load) sets them for BPE vocabularies.
// Only the names whose splitting rules are implemented in pre_tokenizer.hpp are accepted.
#pragma once
#include <array>
#include <optional>
#include <string_view>

namespace strata::tokenizer {

enum class pre_type {
  none,      // SentencePiece: no regex split
  standard,  // "default": four chained regexes (punctuation runs, GPT-2, digit runs, digit triples)
  gpt2,      // GPT-2 contractions / letters / digits / other / spaces
  llama3,    // Llama 3: case-insensitive contractions, digits in groups of up to 3
  qwen2,     // as llama3 but single digits
  gpt4o,     // o200k: case-aware letter runs (Llama 4 uses this one)
};

struct pre_config {
  std::string_view name;
  pre_type type;
  bool ignore_merges;          // a piece that is already a token skips the BPE merges
  bool clean_spaces;           // detokenize removes " ?", " !", " .", " ," and some " '" spaces
  std::optional<bool> add_bos; // default for tokenizer.ggml.add_bos_token, if the name sets one
};

namespace detail {

// Name -> flags; a GGUF key, when present, still overrides add_bos.
inline constexpr std::array<pre_config, 34> pre_configs{{
    {"default", pre_type::standard, false, true, {}},
    {"llama3", pre_type::llama3, true, true, true},
    {"llama-v3", pre_type::llama3, true, true, true},
    {"llama-bpe", pre_type::llama3, true, true, true},
    {"falcon3", pre_type::llama3, true, true, true},
    {"falcon-h1", pre_type::llama3, true, true, true},
    {"pixtral", pre_type::llama3, true, true, true},
    {"midm-2.0", pre_type::llama3, true, true, true},
    {"lfm2", pre_type::llama3, true, true, true},
    {"jina-v5-nano", pre_type::llama3, true, true, true},
    {"dbrx", pre_type::llama3, false, true, {}},
    {"smaug-bpe", pre_type::llama3, false, true, {}},
    {"gpt-2", pre_type::gpt2, false, true, {}},
    {"phi-2", pre_type::gpt2, false, true, {}},
    {"jina-es", pre_type::gpt2, false, true, {}},
    {"jina-de", pre_type::gpt2, false, true, {}},
    {"jina-v2-es", pre_type::gpt2, false, true, {}},
    {"jina-v2-de", pre_type::gpt2, false, true, {}},
    {"gigachat", pre_type::gpt2, false, true, {}},
    {"mpt", pre_type::gpt2, false, true, {}},
    {"olmo", pre_type::gpt2, false, true, {}},
    {"exaone4", pre_type::gpt2, false, true, {}},
    {"qwen2", pre_type::qwen2, false, false, {}},
    {"deepseek-r1-qwen", pre_type::qwen2, false, false, {}},
    {"kormo", pre_type::qwen2, false, false, {}},
    {"f2llmv2", pre_type::qwen2, false, false, {}},
    {"hunyuan", pre_type::qwen2, false, false, {}},
    {"megrez", pre_type::qwen2, false, true, {}},
    {"stablelm2", pre_type::qwen2, false, true, {}},
    {"gpt-4o", pre_type::gpt4o, false, false, {}},
    {"llama4", pre_type::gpt4o, false, false, {}},
    {"kanana2", pre_type::gpt4o, false, false, {}},
    {"talkie", pre_type::gpt4o, false, false, {}},
    {"minimax-m2", pre_type::gpt4o, false, false, {}},
}};

}  // namespace detail

// nullptr when the name is not supported.
constexpr const pre_config* find_pre_config(std::string_view name) noexcept {
  for (const auto& c : detail::pre_configs)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace strata::tokenizer
