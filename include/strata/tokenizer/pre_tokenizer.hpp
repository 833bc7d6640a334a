// Regex pre-tokenization for byte-level BPE: splits text into the pieces that BPE merges never
// cross, with the regex lists llama.cpp (d32676d77, llm_tokenizer_bpe) uses per
// `tokenizer.ggml.pre`. Matching is PCRE2 (UTF + UCP, JIT when available). Each regex of a list
// splits every piece left by the previous one; text between matches becomes a piece too.
//
// Equivalence with llama.cpp: for llama3 / qwen2 / gpt2 it runs hand-written scanners and for
// the others std::regex over a one-byte-per-code-point "collapsed" text; both follow these
// regexes' leftmost-first semantics, classifying code points with its own Unicode 15.1 tables.
// The class escapes are rewritten to classify exactly as those tables do (checked for every code
// point against llama.cpp's unicode-data.cpp):
//  * `\s` / `\S` become [\t-\r\x{85}\p{Z}] (Unicode White_Space, llama.cpp's whitespace set):
//    PCRE2 10.42's own \s also matches U+180E.
//  * \p{L}, \p{N}, \p{P} get the code points Unicode 15.0/15.1 added that PCRE2 10.42's
//    Unicode 14 tables lack (unicode_delta.hpp: CJK extensions H and I, Kawi, ...). A PCRE2 with
//    Unicode 16 tables would know letters llama.cpp does not; nothing removes those.
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <span>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/tokenizer/pre_type.hpp"
#include "strata/tokenizer/unicode_delta.hpp"

namespace strata::tokenizer {

// A piece of the split text: byte offsets [begin, end).
struct text_piece {
  std::size_t begin;
  std::size_t end;
};

namespace detail {

// The regex lists, as llama.cpp writes them after adapting the tokenizer.json originals
// ("(?i:'s|...)" spelled as explicit case classes, which std::regex lacks).
inline constexpr std::string_view re_gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
inline constexpr std::string_view re_llama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view re_qwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// "[^a-z] that is a letter" stands for HF's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] the way llama.cpp
// adapts it: any non-ASCII letter counts as both cases and marks (\p{M}) are not letters.
inline constexpr std::string_view re_gpt4o =
    R"([^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])*(?:(?=\p{L})[^A-Z])+)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])+(?:(?=\p{L})[^A-Z])*)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view re_punct_runs = R"([\p{P}\$\+<=>\^~\|]+)";
inline constexpr std::string_view re_digit_runs = R"(\p{N}+)";
inline constexpr std::string_view re_digit_triples = R"([0-9][0-9][0-9])";

inline std::vector<std::string_view> regexes_for(pre_type t) {
  switch (t) {
    case pre_type::standard: return {re_punct_runs, re_gpt2, re_digit_runs, re_digit_triples};
    case pre_type::gpt2: return {re_gpt2};
    case pre_type::llama3: return {re_llama3};
    case pre_type::qwen2: return {re_qwen2};
    case pre_type::gpt4o: return {re_gpt4o};
    case pre_type::none: break;
  }
  return {};
}

inline std::string class_body(std::string_view property, std::span<const std::pair<char32_t, char32_t>> extra) {
  std::string body(property);
  char buf[32];
  for (const auto& [lo, hi] : extra) {
    std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", unsigned(lo), unsigned(hi));
    body += buf;
  }
  return body;
}

// Rewrites the class escapes so they classify code points as llama.cpp does (see the header
// comment): \s, \S as White_Space classes, and \p{L}, \p{N}, \p{P} extended by unicode_delta.
inline std::string with_llama_cpp_classes(std::string_view re) {
  const std::string ws = R"(\t-\r\x{85}\p{Z})";
  const std::string letters = class_body(R"(\p{L})", unicode_delta::letters);
  const std::string numbers = class_body(R"(\p{N})", unicode_delta::numbers);
  const std::string punct = class_body(R"(\p{P})", unicode_delta::punctuation);
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const std::string_view esc = re.substr(i, re.compare(i, 3, R"(\p{)") == 0 ? 5 : 2);
      const std::string* body = esc == R"(\s)"     ? &ws
                                : esc == R"(\p{L})" ? &letters
                                : esc == R"(\p{N})" ? &numbers
                                : esc == R"(\p{P})" ? &punct
                                                    : nullptr;
      if (body) {
        out += in_class ? *body : "[" + *body + "]";
      } else if (esc == R"(\S)" && !in_class) {
        out += "[^" + ws + "]";
      } else {
        out += esc;
      }
      i += esc.size() - 1;
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

inline std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// One compiled pattern, shared read-only between threads (PCRE2 code objects are immutable).
class regex {
 public:
  explicit regex(std::string_view pattern) : source_(with_llama_cpp_classes(pattern)) {
    int err = 0;
    PCRE2_SIZE at = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source_.data()), source_.size(), PCRE2_UTF | PCRE2_UCP, &err,
                          &at, nullptr);
    if (!code_)
      throw error("pre-tokenizer regex does not compile at offset " + std::to_string(at) + ": " +
                  pcre2_message(err) + " (" + source_ + ")");
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~regex() { pcre2_code_free(code_); }
  regex(const regex&) = delete;
  regex& operator=(const regex&) = delete;

  pcre2_code* code() const noexcept { return code_; }

  // Next match in subject[start..]: true and [mb, me) set, or false. `subject` must be UTF-8.
  bool find(std::string_view subject, std::size_t start, pcre2_match_data* md, std::size_t& mb, std::size_t& me) const {
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
    int rc = jit_ ? pcre2_jit_match(code_, s, subject.size(), start, 0, md, nullptr)
                  : pcre2_match(code_, s, subject.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = match_with_big_stack(s, subject.size(), start, md);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) throw error("pre-tokenizer regex failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    mb = ov[0];
    me = ov[1];
    return true;
  }

 private:
  // Very long letter runs can exhaust the default 32 KiB JIT stack on the group repeats of the
  // gpt4o pattern; retry that one match with a stack sized for the subject.
  int match_with_big_stack(PCRE2_SPTR s, std::size_t n, std::size_t start, pcre2_match_data* md) const {
    const std::size_t max = std::max<std::size_t>(1u << 20, 64 * (n - start) + (1u << 16));
    std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> stack(
        pcre2_jit_stack_create(1u << 15, max, nullptr), &pcre2_jit_stack_free);
    std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> ctx(pcre2_match_context_create(nullptr),
                                                                                    &pcre2_match_context_free);
    if (!stack || !ctx) throw std::bad_alloc();
    pcre2_jit_stack_assign(ctx.get(), nullptr, stack.get());
    return pcre2_jit_match(code_, s, n, start, 0, md, ctx.get());
  }

  std::string source_;
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

struct match_data_deleter {
  void operator()(pcre2_match_data* p) const noexcept { pcre2_match_data_free(p); }
};

}  // namespace detail

class pre_tokenizer {
 public:
  explicit pre_tokenizer(pre_type t) : type_(t) {
    for (const auto re : detail::regexes_for(t)) regexes_.push_back(std::make_shared<const detail::regex>(re));
  }

  pre_type type() const noexcept { return type_; }

  // Replaces `out` with the pieces of `text` (strict UTF-8; callers repair invalid input first,
  // see lenient_utf8::repair). `scratch` is reused between calls to avoid allocations.
  void split(std::string_view text, std::vector<text_piece>& out, std::vector<text_piece>& scratch) const {
    out.clear();
    if (text.empty()) return;
    out.push_back({0, text.size()});
    for (const auto& re : regexes_) {
      std::unique_ptr<pcre2_match_data, detail::match_data_deleter> md(
          pcre2_match_data_create_from_pattern(re->code(), nullptr));
      if (!md) throw std::bad_alloc();
      scratch.clear();
      for (const text_piece p : out) split_one(*re, text.substr(p.begin, p.end - p.begin), p.begin, md.get(), scratch);
      out.swap(scratch);
    }
  }

 private:
  static void split_one(const detail::regex& re, std::string_view s, std::size_t base, pcre2_match_data* md,
                        std::vector<text_piece>& out) {
    std::size_t pos = 0;   // end of the last emitted piece
    std::size_t from = 0;  // where the next search starts
    std::size_t mb = 0, me = 0;
    while (from < s.size() && re.find(s, from, md, mb, me)) {
      if (me == mb) {  // none of the patterns can match empty; guard against looping anyway
        from = mb + 1;
        while (from < s.size() && (static_cast<unsigned char>(s[from]) & 0xC0) == 0x80) ++from;
        continue;
      }
      if (mb > pos) out.push_back({base + pos, base + mb});
      out.push_back({base + mb, base + me});
      pos = from = me;
    }
    if (pos < s.size()) out.push_back({base + pos, base + s.size()});
  }

  pre_type type_;
  std::vector<std::shared_ptr<const detail::regex>> regexes_;
};

}  // namespace strata::tokenizer
