// Synthetic byte-level BPE vocabularies and the tokenizer copy. Special-token ids and texts are
// those of the real tokenizers (Llama 3.1 tokenizer.json; Qwen3 tokenizer.json as in
// fixtures/tokenizer/ggml-vocab-qwen3.gguf; Llama 4 per meta-llama/llama-models
// models/llama4/tokenizer.py); ordinary tokens are synthetic but form a valid merge table.
#include "vocab.hpp"

#include <algorithm>
#include <array>
#include <unordered_set>

#include "chat_templates.hpp"
#include "strata/core/error.hpp"

namespace strata::mkmodel {

namespace {

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += char(cp);
  else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

struct special {
  std::uint32_t id;
  std::string text;
  token_type type;
};

// Llama 3.1: 256 CONTROL tokens from 128000; the unnamed ones are <|reserved_special_token_N|>
// numbered in id order.
std::vector<special> llama31_specials() {
  std::array<std::string, 256> s{};
  s[0] = "<|begin_of_text|>";
  s[1] = "<|end_of_text|>";
  s[4] = "<|finetune_right_pad_id|>";
  s[6] = "<|start_header_id|>";
  s[7] = "<|end_header_id|>";
  s[8] = "<|eom_id|>";
  s[9] = "<|eot_id|>";
  s[10] = "<|python_tag|>";
  std::vector<special> out;
  int reserved = 0;
  for (std::uint32_t i = 0; i < 256; ++i) {
    if (s[i].empty()) s[i] = "<|reserved_special_token_" + std::to_string(reserved++) + "|>";
    out.push_back({128000 + i, s[i], token_type::control});
  }
  return out;
}

// Qwen3: 26 added tokens from 151643 (the tool/think markers are not "special" in HF, hence
// USER_DEFINED in GGUF), then [PAD<id>] UNUSED fillers up to the padded vocab size.
std::vector<special> qwen3_specials(std::uint32_t n_vocab) {
  constexpr auto C = token_type::control;
  constexpr auto U = token_type::user_defined;
  const std::pair<const char*, token_type> named[] = {
      {"<|endoftext|>", C},   {"<|im_start|>", C},   {"<|im_end|>", C},       {"<|object_ref_start|>", C},
      {"<|object_ref_end|>", C}, {"<|box_start|>", C}, {"<|box_end|>", C},    {"<|quad_start|>", C},
      {"<|quad_end|>", C},    {"<|vision_start|>", C}, {"<|vision_end|>", C}, {"<|vision_pad|>", C},
      {"<|image_pad|>", C},   {"<|video_pad|>", C},  {"<tool_call>", U},      {"</tool_call>", U},
      {"<|fim_prefix|>", C},  {"<|fim_middle|>", C}, {"<|fim_suffix|>", C},   {"<|fim_pad|>", C},
      {"<|repo_name|>", C},   {"<|file_sep|>", C},   {"<tool_response>", U},  {"</tool_response>", U},
      {"<think>", U},         {"</think>", U},
  };
  std::vector<special> out;
  std::uint32_t id = 151643;
  for (const auto& [text, type] : named) out.push_back({id++, text, type});
  for (; id < n_vocab; ++id) out.push_back({id, "[PAD" + std::to_string(id) + "]", token_type::unused});
  return out;
}

// Llama 4: 2048 CONTROL tokens from 200000 in the order of llama-models' tokenizer.py.
std::vector<special> llama4_specials() {
  std::vector<std::string> s = {"<|begin_of_text|>", "<|end_of_text|>", "<|fim_prefix|>", "<|fim_middle|>",
                                "<|fim_suffix|>",    "<|header_start|>", "<|header_end|>", "<|eom|>",
                                "<|eot|>",           "<|step|>"};
  const auto reserved = [&](const std::string& kind, int n, int first) {
    for (int i = first; i < first + n; ++i) s.push_back("<|" + kind + "reserved_special_token_" + std::to_string(i) + "|>");
  };
  reserved("text_post_train_", 6, 0);
  for (const char* t : {"<|python_start|>", "<|python_end|>", "<|finetune_right_pad|>"}) s.push_back(t);
  reserved("text_post_train_", 61, 8);
  for (const char* t : {"<|image_start|>", "<|image_end|>", "<|vision_reserved_special_token_0|>",
                        "<|vision_reserved_special_token_1|>", "<|tile_x_separator|>", "<|tile_y_separator|>",
                        "<|vision_reserved_special_token_2|>", "<|vision_reserved_special_token_3|>",
                        "<|vision_reserved_special_token_4|>", "<|vision_reserved_special_token_5|>", "<|image|>",
                        "<|vision_reserved_special_token_6|>", "<|patch|>"})
    s.push_back(t);
  reserved("vision_", 1041, 7);
  reserved("reasoning_", 7, 0);
  s.push_back("<|reasoning_thinking_start|>");
  s.push_back("<|reasoning_thinking_end|>");
  reserved("", int(2048 - s.size()), 0);
  std::vector<special> out;
  for (std::uint32_t i = 0; i < s.size(); ++i) out.push_back({200000 + i, s[i], token_type::control});
  return out;
}

// Merge candidates (left, right): whitespace runs, space+letter, then letter strings of growing
// length over shrinking alphabets (most frequent English letters first), each also with a
// leading space. Every left part is a byte token or an earlier result, so the table is valid.
std::vector<std::pair<std::string, std::string>> merge_candidates(std::size_t max) {
  const std::string sp = utf8(0x120), nl = utf8(0x10A);  // byte-level ' ' and '\n'
  const std::string lower = "etaoinshrdlcumwfgypbvkjxqz";
  std::vector<std::pair<std::string, std::string>> out = {{sp, sp}, {sp + sp, sp + sp}, {nl, nl}};
  for (char c : lower) out.push_back({sp, std::string(1, c)});
  for (char c : lower) out.push_back({sp, std::string(1, char(c - 32))});
  std::vector<std::string> words(lower.size());
  std::vector<int> ranks(lower.size());
  for (std::size_t i = 0; i < lower.size(); ++i) words[i] = std::string(1, lower[i]), ranks[i] = int(i);
  constexpr std::size_t alphabet[] = {26, 26, 13, 8, 6, 5};  // letters usable at length 2, 3, ...
  for (std::size_t len = 2; len < 2 + std::size(alphabet) && out.size() < max; ++len) {
    const std::size_t a = alphabet[len - 2];
    std::vector<std::pair<int, std::string>> next;  // (rank sum, word)
    for (std::size_t w = 0; w < words.size(); ++w)
      for (std::size_t c = 0; c < a; ++c)
        if (std::all_of(words[w].begin(), words[w].end(), [&](char x) { return lower.find(x) < a; }))
          next.push_back({ranks[w] + int(c), words[w] + lower[c]});
    std::stable_sort(next.begin(), next.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    words.clear();
    ranks.clear();
    for (const auto& [r, w] : next) {
      const std::string left = w.substr(0, w.size() - 1), right = w.substr(w.size() - 1);
      out.push_back({left, right});
      out.push_back({sp + left, right});
      words.push_back(w);
      ranks.push_back(r);
    }
  }
  if (out.size() > max) out.resize(max);
  return out;
}

}  // namespace

std::vector<std::string> byte_level_tokens() {
  std::vector<std::string> out;
  std::array<bool, 256> printable{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    printable[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable[b]) out.push_back(utf8(b));
  }
  std::uint32_t n = 0;
  for (std::uint32_t b = 0; b < 256; ++b)
    if (!printable[b]) out.push_back(utf8(256 + n++));
  return out;
}

synthetic_vocab make_vocab(const preset& p, std::size_t max_merges) {
  synthetic_vocab v;
  const std::uint32_t n = p.n_vocab;
  std::vector<special> specials;
  switch (p.vocab) {
    case vocab_kind::llama3:
      specials = llama31_specials();
      v.pre = "llama-bpe";
      v.bos = 128000, v.eos = 128009, v.add_bos = true;  // eos = <|eot_id|> (Instruct)
      v.chat_template = llama31_chat_template();
      break;
    case vocab_kind::qwen3:
      specials = qwen3_specials(n);
      v.pre = "qwen2";
      v.bos = 151643, v.eos = 151645, v.pad = 151643, v.add_bos = false;
      v.chat_template = qwen3_chat_template();
      break;
    case vocab_kind::llama4:
      specials = llama4_specials();
      v.pre = "llama4";
      v.bos = 200000, v.eos = 200008, v.pad = 200018, v.add_bos = true;  // eos = <|eot|>
      v.chat_template = llama4_chat_template();
      break;
    case vocab_kind::tiny_llama3: {  // fixtures/README.md §1: K = n - 5
      const std::uint32_t k = n - 5;
      const char* t[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
      for (std::uint32_t i = 0; i < 5; ++i) specials.push_back({k + i, t[i], token_type::control});
      v.pre = "llama-bpe";
      v.bos = k, v.eos = k + 4, v.add_bos = true;
      v.chat_template = llama3_chat_template();
      break;
    }
    case vocab_kind::tiny_qwen3: {  // K = n - 3
      const std::uint32_t k = n - 3;
      const char* t[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
      for (std::uint32_t i = 0; i < 3; ++i) specials.push_back({k + i, t[i], token_type::control});
      v.pre = "qwen2";
      v.bos = k, v.eos = k + 2, v.pad = k, v.add_bos = false;
      v.chat_template = qwen3_chat_template();
      break;
    }
  }
  const std::uint32_t first_special = specials.empty() ? n : specials.front().id;
  if (first_special < 256 || specials.back().id >= n)
    throw error("vocab: " + std::to_string(n) + " tokens cannot hold the byte tokens and the special tokens");

  v.tokens = byte_level_tokens();
  v.types.assign(256, std::int32_t(token_type::normal));
  for (auto& [left, right] : merge_candidates(std::min<std::size_t>(max_merges, first_special - 256))) {
    v.merges.push_back(left + " " + right);
    v.tokens.push_back(left + right);
  }
  // Filler: unique word-like tokens (digits never occur in merge results).
  for (std::uint32_t id = std::uint32_t(v.tokens.size()); id < first_special; ++id)
    v.tokens.push_back(utf8(0x120) + "syn" + std::to_string(id));
  v.types.resize(first_special, std::int32_t(token_type::normal));
  for (const auto& s : specials) {
    v.tokens.push_back(s.text);
    v.types.push_back(std::int32_t(s.type));
  }
  if (v.tokens.size() != n) throw error("vocab: built " + std::to_string(v.tokens.size()) + " tokens, expected " + std::to_string(n));
  std::unordered_set<std::string_view> seen(v.tokens.begin(), v.tokens.end());
  if (seen.size() != v.tokens.size()) throw error("vocab: duplicate token text");
  return v;
}

void add_vocab(gguf::writer& w, const synthetic_vocab& v) {
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", std::string_view(v.pre));
  w.set_strings("tokenizer.ggml.tokens", v.tokens);
  w.set_array("tokenizer.ggml.token_type", v.types);
  w.set_strings("tokenizer.ggml.merges", v.merges);
  w.set("tokenizer.ggml.bos_token_id", v.bos);
  w.set("tokenizer.ggml.eos_token_id", v.eos);
  if (v.pad) w.set("tokenizer.ggml.padding_token_id", *v.pad);
  w.set("tokenizer.ggml.add_bos_token", v.add_bos);
  if (!v.chat_template.empty()) w.set("tokenizer.chat_template", v.chat_template);
}

void copy_vocab(gguf::writer& w, const std::filesystem::path& file, std::uint32_t n_vocab) {
  const gguf::file f(file);
  const auto& r = f.gguf();
  const gguf::value* tokens = r.find("tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array())
    throw error(file.string() + ": no tokenizer.ggml.tokens array, not a GGUF with a tokenizer");
  if (tokens->size() != n_vocab)
    throw error(file.string() + ": has " + std::to_string(tokens->size()) + " tokens but the preset's vocabulary has " +
                std::to_string(n_vocab) + " (token_embd/output rows must match)");
  for (const auto& [key, value] : r.metadata())
    if (key.starts_with("tokenizer.")) w.set(std::string(key), gguf::owned_value::from(value));
}

}  // namespace strata::mkmodel
