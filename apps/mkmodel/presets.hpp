// Model presets for strata-mkmodel: the hyper-parameters of real checkpoints (their HF
// config.json as llama.cpp's convert_hf_to_gguf.py writes them to GGUF) and of the tiny fixture
// models, and the tensor list (names, ggml `ne` shapes) each llama.cpp loader expects
// (src/models/{llama,qwen3,qwen3moe,llama4}.cpp; docs/spec/architectures.md §1.4, §2).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::mkmodel {

enum class arch { llama, qwen3, qwen3moe, llama4 };
std::string_view arch_name(arch a) noexcept;  // general.architecture value

// Tokenizer family of a preset (all byte-level BPE, tokenizer.ggml.model = "gpt2").
enum class vocab_kind {
  llama3,       // Llama 3.1: pre "llama-bpe", 256 specials from 128000
  qwen3,        // Qwen3: pre "qwen2", 26 specials from 151643, then [PAD<id>] up to the vocab size
  llama4,       // Llama 4: pre "llama4", 2048 specials from 200000
  tiny_llama3,  // fixture vocab: Llama 3 specials appended at the end (ids n_vocab-5 .. n_vocab-1)
  tiny_qwen3,   // fixture vocab: Qwen3 specials appended at the end (ids n_vocab-3 .. n_vocab-1)
};

// HF rope_scaling {rope_type: "llama3"}; the converter turns it into the rope_freqs.weight tensor.
struct rope_llama3 {
  float factor;                   // long-wavelength divisor
  float low_freq_factor;          // wavelengths above original_context / low are divided by factor
  float high_freq_factor;         // wavelengths below original_context / high are kept
  std::uint32_t original_context; // original_max_position_embeddings
};

struct preset {
  std::string_view name;        // --preset value
  std::string_view general_name;  // general.name
  std::string_view size_label;  // general.size_label ("8B", "30B-A3B", ...)
  arch architecture;            // general.architecture
  std::uint32_t n_layer;        // block_count
  std::uint32_t n_embd;         // embedding_length
  std::uint32_t n_head;         // attention.head_count
  std::uint32_t n_head_kv;      // attention.head_count_kv
  std::uint32_t head_dim;       // key_length = value_length = rope dims
  std::uint32_t n_ff;           // feed_forward_length (dense FFN width)
  std::uint32_t n_vocab;        // tokens; token_embd/output ne[1]
  std::uint32_t n_ctx;          // context_length (n_ctx_train)
  float rope_base;              // rope.freq_base
  float rms_eps;                // attention.layer_norm_rms_epsilon
  bool tied;                    // no output.weight: the LM head reuses token_embd
  std::uint32_t n_expert;       // expert_count (0: dense)
  std::uint32_t n_expert_used;  // expert_used_count
  std::uint32_t n_ff_exp;       // expert_feed_forward_length (Llama 4: also the shared expert width)
  std::uint32_t moe_step;       // llama4 interleave_moe_layer_step: layer il is MoE iff (il+1) % step == 0
  std::optional<rope_llama3> rope_scaling;  // rope_freqs.weight present iff set
  vocab_kind vocab;
  // Optional keys the real converted GGUF carries (the converter writes key/value_length only when
  // config.json has head_dim, rope.dimension_count and vocab_size only for LlamaModel subclasses).
  bool key_length_keys;
  bool rope_dimension_key;
  bool vocab_size_key;
  std::string_view fixture;     // fixture model family in fixtures/manifest.json ("llama", ...), or ""
  std::string_view source;      // provenance of the numbers, for --list
};

std::span<const preset> presets() noexcept;
const preset* find_preset(std::string_view name) noexcept;

// What a tensor holds, which decides how it is initialised.
enum class tensor_role {
  weight,      // projection / embedding matrix: random N(0, sigma)-like values
  norm,        // RMSNorm weight, F32, about 1
  router,      // MoE router ffn_gate_inp, F32 (never quantized)
  rope_freqs,  // Llama 3.1 / 4 per-pair RoPE divisors, F32, computed exactly
};

struct tensor_spec {
  std::string name;               // GGUF name, e.g. "blk.3.ffn_down_exps.weight"
  std::vector<std::uint64_t> ne;  // ggml order: ne[0] is the contiguous row length
  tensor_role role;
  int layer;                      // block index, -1 for global tensors
};

// The tensors of a preset in llama-quantize's output order: global tensors first, then block by
// block, each group sorted by name (llama_model_loader's weight_name_comparer). The quant-mix
// rules depend on this order (they count attn_v tensors as they go).
std::vector<tensor_spec> tensor_specs(const preset& p);

bool is_moe_layer(const preset& p, std::uint32_t il) noexcept;

// The rope_freqs.weight values (head_dim / 2 floats) as convert_hf_to_gguf.py computes them.
std::vector<float> llama3_rope_factors(const preset& p);

std::uint64_t parameter_count(const preset& p);

}  // namespace strata::mkmodel
