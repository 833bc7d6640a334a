// Model inspection for `strata-run --info` (and later /v1/models): a summary of a GGUF's
// architecture, hyper-parameters, tokenizer and tensors, as text or as one JSON object.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "strata/gguf/reader.hpp"

namespace strata::rt {

struct tensor_row {
  std::string name;
  std::string type;            // ggml type name, e.g. "Q4_K"
  std::vector<std::uint64_t> shape;  // ggml ne order
  std::uint64_t bytes = 0;
  std::uint64_t offset = 0;    // absolute offset in the file
};

struct type_total {
  std::uint64_t tensors = 0;
  std::uint64_t bytes = 0;
  std::uint64_t elements = 0;
};

struct tokenizer_summary {
  bool present = false;
  std::string model;           // tokenizer.ggml.model: gpt2, llama, ...
  std::string pre;             // tokenizer.ggml.pre
  std::uint64_t vocab_size = 0;
  std::uint64_t merges = 0;
  std::map<std::string, std::int64_t> special_ids;  // bos, eos, eot, unk, pad
  std::map<std::string, bool> flags;                // add_bos_token, add_eos_token, ...
};

struct model_summary {
  std::string path;
  std::uint64_t file_size = 0;
  std::uint32_t gguf_version = 0;
  std::uint64_t alignment = 0;
  std::uint64_t data_offset = 0;
  std::string architecture;
  std::string name;
  std::vector<std::pair<std::string, std::string>> hparams;  // "<arch>.*" keys, rendered
  tokenizer_summary tokenizer;
  bool has_chat_template = false;
  std::uint64_t chat_template_bytes = 0;
  std::vector<tensor_row> tensors;
  std::map<std::string, type_total> by_type;
  std::uint64_t tensor_bytes = 0;
  std::uint64_t parameters = 0;
};

model_summary summarize(const gguf::reader& r);
std::string render_text(const model_summary& s);
// One JSON object: architecture, file, metadata (all keys; long arrays summarised), tensors, totals.
std::string render_json(const model_summary& s, const gguf::reader& r);

// A metadata value rendered for humans ("4096", "[1, 2, 3]", "array of 151936 string").
std::string render_value(const gguf::value& v, std::size_t max_items = 8);

}  // namespace strata::rt
