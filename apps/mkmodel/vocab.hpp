// The tokenizer section (tokenizer.* keys) of a generated model: a synthetic byte-level BPE
// vocabulary of the preset's exact size with the real special tokens at their real ids, or the
// tokenizer copied from an existing GGUF. Key meanings: docs/spec/architectures.md §1.5.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "presets.hpp"
#include "strata/gguf/writer.hpp"

namespace strata::mkmodel {

// tokenizer.ggml.token_type values (llama.cpp LLAMA_TOKEN_TYPE_*).
enum class token_type : std::int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

struct synthetic_vocab {
  std::string pre;                     // tokenizer.ggml.pre
  std::vector<std::string> tokens;     // id -> text (byte-level alphabet)
  std::vector<std::int32_t> types;     // id -> token_type
  std::vector<std::string> merges;     // "left right", rank = index
  std::uint32_t bos = 0, eos = 0;
  std::optional<std::uint32_t> pad;
  bool add_bos = false;
  std::string_view chat_template;
};

// GPT-2's byte-to-unicode map in vocabulary order: token i (< 256) of every GPT-2-style BPE vocab,
// printable bytes first (they map to themselves), then the rest shifted to U+0100.. .
std::vector<std::string> byte_level_tokens();

// 256 byte tokens, then merges (each result a new token), then unique filler tokens, with the
// family's special tokens (and Qwen's [PAD<id>] tail) at their real ids.
synthetic_vocab make_vocab(const preset& p, std::size_t max_merges = 4096);

void add_vocab(gguf::writer& w, const synthetic_vocab& v);

// Copies every tokenizer.* key of `file`; throws if its token count is not n_vocab (token_embd
// and output would not match it).
void copy_vocab(gguf::writer& w, const std::filesystem::path& file, std::uint32_t n_vocab);

}  // namespace strata::mkmodel
