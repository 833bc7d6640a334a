// strata-run modes: each takes the parsed options and returns the process exit code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tier_options.hpp"

namespace strata::app {

class logger;

struct run_options {
  const logger* log = nullptr;       // where status lines go (--log-level, STRATA_LOG)
  std::string model;                 // -m
  bool info = false;                 // --info
  bool json = false;                 // --json (with --info)
  // Tokenizer.
  std::string tokenize_text;         // --tokenize TEXT
  bool tokenize = false;
  std::string detokenize_ids;        // --detokenize "1,2,3"
  bool detokenize = false;
  bool no_parse_special = false;     // --no-parse-special
  // Prompt.
  std::string prompt;                // -p
  std::string prompt_file;           // -f
  std::string tokens;                // --tokens "1,2,3" (raw ids, no BOS added)
  std::string system_prompt;         // -sys
  bool conversation = false;         // -cnv
  std::string chat_template;         // --chat-template NAME
  bool no_think = false;             // --no-think (Qwen3: enable_thinking = false)
  // Generation.
  std::int32_t n_predict = -1;       // -n (-1: until end of generation or context full)
  bool n_predict_set = false;
  std::uint32_t n_ctx = 4096;        // -c (0: the model's context_length)
  bool n_ctx_set = false;
  std::uint32_t n_batch = 0;         // -b (0: the engine chooses)
  unsigned threads = 0;              // -t (0: physical cores)
  std::uint64_t seed = 0xFFFFFFFFu;  // -s (default: random, printed)
  float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  std::int32_t top_k = 40, repeat_last_n = 64;
  bool ignore_eos = false;
  // Output constraint (at most one): a GBNF grammar or a JSON Schema, inline or from a file.
  std::string grammar;               // --grammar GBNF
  std::string grammar_file;          // --grammar-file FILE
  std::string json_schema;           // -j / --json-schema SCHEMA
  std::string json_schema_file;      // -jf / --json-schema-file FILE
  std::string kv_type = "f16";       // --kv-type (K and V)
  std::string kv_type_k, kv_type_v;  // --kv-type-k, --kv-type-v (override one side)
  std::uint32_t kv_window = 128;     // --kv-window (full-precision recent tokens, compressed types)
  std::string backend = "auto";      // --backend
  int device = -1;                   // --device (Vulkan device index)
  int n_gpu_layers = -1;             // -ngl / --n-gpu-layers (-1: all)
  std::string dump_logits;           // --dump-logits FILE
  bool print_ids = false;            // --print-ids
  bool no_display_prompt = false;    // --no-display-prompt
  std::string perplexity_file;       // --perplexity FILE
  std::int32_t n_chunks = -1;        // --chunks (with --perplexity; -1: all)
  // Memory tiers (issue 14): budgets, overrides and --fit for every mode; --plan prints the placement.
  tier_options tiers;
  bool plan = false;                 // --plan: print the placement plan and exit
  bool probe = false;                // --probe: measure the links now (and cache them)
};

int run_info(const run_options& opt);
int run_tokenize(const run_options& opt);
int run_detokenize(const run_options& opt);
int run_generate(const run_options& opt);
int run_perplexity(const run_options& opt);
int run_plan(const run_options& opt);

// "1, 2,3" -> {1, 2, 3}; throws strata::error naming the bad item.
std::vector<std::int32_t> parse_id_list(const std::string& s, const char* flag);

}  // namespace strata::app
