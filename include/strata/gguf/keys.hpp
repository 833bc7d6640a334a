// GGUF metadata key names used across Strata (llama.cpp's llama-arch.cpp LLM_KV names).
// Architecture-specific keys are "<arch>.<suffix>"; build them with arch_key().
#pragma once
#include <string>
#include <string_view>

namespace strata::gguf::keys {

inline constexpr std::string_view architecture = "general.architecture";
inline constexpr std::string_view name = "general.name";
inline constexpr std::string_view file_type = "general.file_type";
inline constexpr std::string_view quantization_version = "general.quantization_version";

inline constexpr std::string_view context_length = "context_length";
inline constexpr std::string_view embedding_length = "embedding_length";
inline constexpr std::string_view block_count = "block_count";
inline constexpr std::string_view feed_forward_length = "feed_forward_length";
inline constexpr std::string_view expert_feed_forward_length = "expert_feed_forward_length";
inline constexpr std::string_view expert_shared_feed_forward_length = "expert_shared_feed_forward_length";
inline constexpr std::string_view head_count = "attention.head_count";
inline constexpr std::string_view head_count_kv = "attention.head_count_kv";
inline constexpr std::string_view key_length = "attention.key_length";
inline constexpr std::string_view value_length = "attention.value_length";
inline constexpr std::string_view rms_eps = "attention.layer_norm_rms_epsilon";
inline constexpr std::string_view rope_freq_base = "rope.freq_base";
inline constexpr std::string_view rope_dimension_count = "rope.dimension_count";
inline constexpr std::string_view expert_count = "expert_count";
inline constexpr std::string_view expert_used_count = "expert_used_count";
inline constexpr std::string_view vocab_size = "vocab_size";
inline constexpr std::string_view pooling_type = "pooling_type";  // embedding models: 0 none, 1 mean, 2 cls, 3 last, 4 rank

inline constexpr std::string_view tok_model = "tokenizer.ggml.model";
inline constexpr std::string_view tok_pre = "tokenizer.ggml.pre";
inline constexpr std::string_view tok_tokens = "tokenizer.ggml.tokens";
inline constexpr std::string_view tok_scores = "tokenizer.ggml.scores";
inline constexpr std::string_view tok_token_type = "tokenizer.ggml.token_type";
inline constexpr std::string_view tok_merges = "tokenizer.ggml.merges";
inline constexpr std::string_view tok_bos_id = "tokenizer.ggml.bos_token_id";
inline constexpr std::string_view tok_eos_id = "tokenizer.ggml.eos_token_id";
inline constexpr std::string_view tok_eot_id = "tokenizer.ggml.eot_token_id";
inline constexpr std::string_view tok_unk_id = "tokenizer.ggml.unknown_token_id";
inline constexpr std::string_view tok_pad_id = "tokenizer.ggml.padding_token_id";
inline constexpr std::string_view tok_add_bos = "tokenizer.ggml.add_bos_token";
inline constexpr std::string_view tok_add_eos = "tokenizer.ggml.add_eos_token";
inline constexpr std::string_view tok_add_space_prefix = "tokenizer.ggml.add_space_prefix";
inline constexpr std::string_view chat_template = "tokenizer.chat_template";

// "<arch>.<suffix>", e.g. arch_key("qwen3", block_count) == "qwen3.block_count".
inline std::string arch_key(std::string_view arch, std::string_view suffix) {
  std::string k(arch);
  k += '.';
  k += suffix;
  return k;
}

}  // namespace strata::gguf::keys
