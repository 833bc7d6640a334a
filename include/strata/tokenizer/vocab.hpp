// A GGUF vocabulary (tokenizer.ggml.*): token texts, scores and types (as llama.cpp's attribute
// bits), special ids, the add_bos / add_eos / add_space_prefix flags, and the name-based detection
// of EOT / EOM / FIM / end-of-generation tokens, all with llama.cpp's defaults (d32676d77,
// llama_vocab::impl::load). Bad metadata throws format_error naming the file and the key.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/gguf/keys.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/tokenizer/pre_type.hpp"
#include "strata/tokenizer/string_index.hpp"

namespace strata::tokenizer {

using token_id = std::int32_t;
inline constexpr token_id null_token = -1;

enum class model_kind { spm, bpe };  // tokenizer.ggml.model "llama" / "gpt2"

// GGUF tokenizer.ggml.token_type values.
enum class token_type : std::int32_t {
  undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

// Attribute bits, numerically equal to llama.cpp's llama_token_attr.
struct token_attr {
  static constexpr std::uint32_t undefined = 0;
  static constexpr std::uint32_t unknown = 1u << 0;
  static constexpr std::uint32_t unused = 1u << 1;
  static constexpr std::uint32_t normal = 1u << 2;
  static constexpr std::uint32_t control = 1u << 3;
  static constexpr std::uint32_t user_defined = 1u << 4;
  static constexpr std::uint32_t byte = 1u << 5;
  static constexpr std::uint32_t normalized = 1u << 6;
  static constexpr std::uint32_t lstrip = 1u << 7;
  static constexpr std::uint32_t rstrip = 1u << 8;
  static constexpr std::uint32_t single_word = 1u << 9;
};

constexpr std::uint32_t attr_of(std::int32_t gguf_type) noexcept {
  switch (token_type(gguf_type)) {
    case token_type::unknown: return token_attr::unknown;
    case token_type::unused: return token_attr::unused;
    case token_type::normal: return token_attr::normal;
    case token_type::control: return token_attr::control;
    case token_type::user_defined: return token_attr::user_defined;
    case token_type::byte: return token_attr::byte;
    default: return token_attr::undefined;
  }
}

struct special_ids {
  token_id bos = null_token, eos = null_token, eot = null_token, eom = null_token;
  token_id unk = null_token, sep = null_token, pad = null_token, mask = null_token;
  token_id fim_pre = null_token, fim_suf = null_token, fim_mid = null_token;
  token_id fim_pad = null_token, fim_rep = null_token, fim_sep = null_token;
};

namespace detail {

// Token texts that llama.cpp recognises when the GGUF names no id (first listed wins here;
// llama.cpp takes whichever its hash map yields first, which for Llama 3 and Qwen is this one).
inline constexpr std::string_view eot_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<end_of_utterance>"};
inline constexpr std::string_view eom_names[] = {"<|eom_id|>"};
inline constexpr std::string_view fim_pre_names[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"};
inline constexpr std::string_view fim_suf_names[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"};
inline constexpr std::string_view fim_mid_names[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};
inline constexpr std::string_view fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
inline constexpr std::string_view fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                                     "<reponame>"};
inline constexpr std::string_view fim_sep_names[] = {"<|file_sep|>"};
// Every token with one of these texts ends generation.
inline constexpr std::string_view eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["};

// Runs f, re-throwing a plain error (from gguf::value) as a format_error naming file and key.
template <class F>
auto with_key(const gguf::reader& r, std::string_view key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const format_error&) {
    throw;
  } catch (const error& e) {
    throw format_error(r.source() + ": metadata key '" + std::string(key) + "': " + e.what());
  }
}

}  // namespace detail

class vocab {
 public:
  static vocab from_gguf(const gguf::reader& r);

  model_kind kind() const noexcept { return kind_; }
  const pre_config& pre() const noexcept { return pre_; }
  std::int32_t size() const noexcept { return std::int32_t(texts_.size()); }
  bool contains(token_id id) const noexcept { return id >= 0 && id < size(); }
  // Throws strata::error naming the id and the vocabulary size.
  void check(token_id id) const {
    if (!contains(id))
      throw error("token id " + std::to_string(id) + " is out of range for a vocabulary of " +
                  std::to_string(size()) + " tokens");
  }

  std::string_view text(token_id id) const noexcept { return texts_.at(std::uint32_t(id)); }
  float score(token_id id) const noexcept { return scores_[std::size_t(id)]; }
  std::uint32_t attr(token_id id) const noexcept { return attrs_[std::size_t(id)]; }
  bool has_attr(token_id id, std::uint32_t bits) const noexcept { return (attrs_[std::size_t(id)] & bits) != 0; }
  // Exact-text lookup; null_token when absent.
  token_id find(std::string_view t) const noexcept {
    const std::uint32_t i = texts_.find(t);
    return i == detail::string_index::npos ? null_token : token_id(i);
  }
  std::size_t max_token_len() const noexcept { return max_token_len_; }

  const special_ids& special() const noexcept { return special_; }
  token_id bos() const noexcept { return special_.bos; }
  token_id eos() const noexcept { return special_.eos; }
  token_id eot() const noexcept { return special_.eot; }
  token_id unk() const noexcept { return special_.unk; }
  token_id pad() const noexcept { return special_.pad; }
  bool add_bos() const noexcept { return add_bos_; }
  bool add_eos() const noexcept { return add_eos_; }
  bool add_space_prefix() const noexcept { return add_space_prefix_; }
  bool clean_spaces() const noexcept { return pre_.clean_spaces; }
  bool ignore_merges() const noexcept { return pre_.ignore_merges; }

  bool is_eog(token_id id) const noexcept { return std::binary_search(eog_.begin(), eog_.end(), id); }
  std::span<const token_id> eog_ids() const noexcept { return eog_; }
  // Tokens matched in raw text before the model runs (CONTROL, USER_DEFINED or UNKNOWN), longest
  // text first; equal lengths keep id order (llama.cpp's unstable sort leaves that unspecified).
  std::span<const token_id> special_tokens() const noexcept { return special_tokens_; }

 private:
  vocab() = default;

  void load_tokens(const gguf::reader& r);
  void load_special_ids(const gguf::reader& r);
  void detect_by_name();

  model_kind kind_ = model_kind::spm;
  pre_config pre_{"", pre_type::none, false, false, {}};
  detail::string_index texts_;          // token texts; index = token id
  std::vector<float> scores_;           // tokenizer.ggml.scores, 0 when absent
  std::vector<std::uint32_t> attrs_;    // token_attr bits
  std::size_t max_token_len_ = 0;
  special_ids special_;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  std::vector<token_id> eog_;            // sorted
  std::vector<token_id> special_tokens_;
};

inline vocab vocab::from_gguf(const gguf::reader& r) {
  namespace k = gguf::keys;
  vocab v;
  const std::string_view model = r.get_string(k::tok_model);
  if (model == "llama") {
    v.kind_ = model_kind::spm;
    v.special_ = {.bos = 1, .eos = 2, .unk = 0};
    v.add_bos_ = true;
    v.add_space_prefix_ = true;
  } else if (model == "gpt2") {
    v.kind_ = model_kind::bpe;
    v.special_ = {.bos = 11, .eos = 11};
    const std::string_view pre = r.find_string(k::tok_pre).value_or("default");
    const pre_config* c = find_pre_config(pre);
    if (!c)
      throw format_error(r.source() + ": metadata key '" + std::string(k::tok_pre) + "': unsupported pre-tokenizer '" +
                         std::string(pre) + "' (supported: default, llama-bpe/llama3, qwen2, llama4/gpt-4o, gpt-2 " +
                         "and their aliases)");
    v.pre_ = *c;
    if (c->add_bos) v.add_bos_ = *c->add_bos;
  } else {
    throw format_error(r.source() + ": metadata key '" + std::string(k::tok_model) +
                       "': unsupported tokenizer model '" + std::string(model) +
                       "' (supported: 'llama' = SentencePiece, 'gpt2' = byte-level BPE)");
  }
  if (auto b = r.find_bool(k::tok_add_space_prefix)) v.add_space_prefix_ = *b;

  v.load_tokens(r);
  v.load_special_ids(r);
  if (auto b = r.find_bool(k::tok_add_bos)) v.add_bos_ = *b;
  if (auto b = r.find_bool(k::tok_add_eos)) v.add_eos_ = *b;
  v.detect_by_name();

  for (token_id id = 0; id < v.size(); ++id)
    if (v.has_attr(id, token_attr::control | token_attr::user_defined | token_attr::unknown))
      v.special_tokens_.push_back(id);
  std::stable_sort(v.special_tokens_.begin(), v.special_tokens_.end(),
                   [&](token_id a, token_id b) { return v.text(a).size() > v.text(b).size(); });

  if (v.add_bos_ && v.special_.bos == null_token)
    throw format_error(r.source() + ": '" + std::string(k::tok_add_bos) +
                       "' is set but the vocabulary has no BOS token");
  if (v.add_eos_ && v.special_.eos == null_token)
    throw format_error(r.source() + ": '" + std::string(k::tok_add_eos) +
                       "' is set but the vocabulary has no EOS token");
  return v;
}

inline void vocab::load_tokens(const gguf::reader& r) {
  namespace k = gguf::keys;
  const auto& toks = detail::with_key(r, k::tok_tokens, [&]() -> const std::vector<std::string_view>& {
    return r.at(k::tok_tokens).strings();
  });
  const std::size_t n = toks.size();
  if (n == 0) throw format_error(r.source() + ": metadata key '" + std::string(k::tok_tokens) + "' is empty");
  if (n > std::size_t(INT32_MAX))
    throw format_error(r.source() + ": metadata key '" + std::string(k::tok_tokens) + "' has too many tokens");

  const auto check_len = [&](std::string_view key, std::size_t got) {
    if (got != n)
      throw format_error(r.source() + ": metadata key '" + std::string(key) + "' has " + std::to_string(got) +
                         " entries but '" + std::string(k::tok_tokens) + "' has " + std::to_string(n));
  };
  if (const gguf::value* s = r.find(k::tok_scores)) {
    scores_ = detail::with_key(r, k::tok_scores, [&] { return s->to_vector<float>(); });
    check_len(k::tok_scores, scores_.size());
  } else {
    scores_.assign(n, 0.0f);
  }
  std::vector<std::int32_t> types;
  if (const gguf::value* t = r.find(k::tok_token_type)) {
    types = detail::with_key(r, k::tok_token_type, [&] { return t->to_vector<std::int32_t>(); });
    check_len(k::tok_token_type, types.size());
  }

  // Empty texts are renamed as llama.cpp does, so every token stays addressable by text.
  std::size_t total = 0;
  for (const auto t : toks) total += t.empty() ? 24 : t.size();
  texts_.reserve(n, total);
  for (std::size_t i = 0; i < n; ++i) {
    const std::string renamed = toks[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : std::string();
    const std::string_view t = toks[i].empty() ? std::string_view(renamed) : toks[i];
    const auto [id, fresh] = texts_.insert(t);
    if (!fresh)
      throw format_error(r.source() + ": metadata key '" + std::string(k::tok_tokens) + "': tokens " +
                         std::to_string(id) + " and " + std::to_string(i) + " have the same text");
    max_token_len_ = std::max(max_token_len_, t.size());
  }
  attrs_.resize(n, token_attr::normal);
  if (!types.empty())
    for (std::size_t i = 0; i < n; ++i) attrs_[i] = attr_of(types[i]);
}

inline void vocab::load_special_ids(const gguf::reader& r) {
  const std::pair<std::string_view, token_id special_ids::*> keys[] = {
      {gguf::keys::tok_bos_id, &special_ids::bos},
      {gguf::keys::tok_eos_id, &special_ids::eos},
      {gguf::keys::tok_eot_id, &special_ids::eot},
      {"tokenizer.ggml.eom_token_id", &special_ids::eom},
      {gguf::keys::tok_unk_id, &special_ids::unk},
      {"tokenizer.ggml.seperator_token_id", &special_ids::sep},  // sic: llama.cpp's spelling
      {gguf::keys::tok_pad_id, &special_ids::pad},
      {"tokenizer.ggml.mask_token_id", &special_ids::mask},
      {"tokenizer.ggml.fim_pre_token_id", &special_ids::fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &special_ids::fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &special_ids::fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &special_ids::fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &special_ids::fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &special_ids::fim_sep},
      {"tokenizer.ggml.prefix_token_id", &special_ids::fim_pre},  // deprecated spellings
      {"tokenizer.ggml.suffix_token_id", &special_ids::fim_suf},
      {"tokenizer.ggml.middle_token_id", &special_ids::fim_mid},
  };
  for (const auto& [key, member] : keys) {
    token_id& id = special_.*member;
    if (id != null_token && !contains(id)) id = null_token;  // a built-in default the vocab lacks
    const auto v = r.find_uint(key);
    if (!v) continue;
    // llama.cpp warns and keeps the default here; an id outside the vocabulary is a broken file.
    if (*v >= std::uint64_t(size()))
      throw format_error(r.source() + ": metadata key '" + std::string(key) + "' = " + std::to_string(*v) +
                         " is out of range for a vocabulary of " + std::to_string(size()) + " tokens");
    id = token_id(*v);
  }
}

inline void vocab::detect_by_name() {
  const auto mark_control = [&](token_id id) { attrs_[std::size_t(id)] |= token_attr::control; };
  const auto detect = [&](token_id& slot, std::span<const std::string_view> names) {
    if (slot != null_token) return;
    for (const auto name : names)
      if (const token_id id = find(name); id != null_token) {
        slot = id;
        mark_control(id);
        return;
      }
  };
  detect(special_.eot, detail::eot_names);
  detect(special_.eom, detail::eom_names);
  detect(special_.fim_pre, detail::fim_pre_names);
  detect(special_.fim_suf, detail::fim_suf_names);
  detect(special_.fim_mid, detail::fim_mid_names);
  detect(special_.fim_pad, detail::fim_pad_names);
  detect(special_.fim_rep, detail::fim_rep_names);
  detect(special_.fim_sep, detail::fim_sep_names);

  // Control tokens named "...unused..." are unused.
  for (token_id id = 0; id < size(); ++id)
    if (has_attr(id, token_attr::control) && text(id).find("unused") != std::string_view::npos)
      attrs_[std::size_t(id)] |= token_attr::unused;

  for (const token_id id : {special_.fim_pad, special_.fim_rep, special_.fim_sep})
    if (id != null_token) eog_.push_back(id);
  for (const auto name : detail::eog_names)
    if (const token_id id = find(name); id != null_token) {
      eog_.push_back(id);
      mark_control(id);
    }
  for (const token_id id : {special_.eos, special_.eot, special_.eom})
    if (id != null_token) eog_.push_back(id);
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
}

}  // namespace strata::tokenizer
