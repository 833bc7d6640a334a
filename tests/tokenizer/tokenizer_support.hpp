// Shared by the tokenizer suite: the fixture tokenizers (loaded once per process), llama.cpp's
// test-vector files, and seeded random text for the property tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "strata/gguf/reader.hpp"
#include "strata/tokenizer/tokenizer.hpp"
#include "support/fixtures.hpp"

namespace strata::test {

using tokenizer::token_id;

inline std::filesystem::path tokenizer_fixture_dir() { return fixture_dir() / "tokenizer"; }

// "llama-spm", "llama-bpe" or "qwen3": tests/fixtures/tokenizer/ggml-vocab-<name>.gguf.
inline const tokenizer::tokenizer& vocab_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<tokenizer::tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    gguf::file f(tokenizer_fixture_dir() / ("ggml-vocab-" + name + ".gguf"));
    slot = std::make_unique<tokenizer::tokenizer>(tokenizer::tokenizer::from_gguf(f.gguf()));
  }
  return *slot;
}

inline const std::vector<std::string>& vocab_names() {
  static const std::vector<std::string> names = {"llama-spm", "llama-bpe", "qwen3"};
  return names;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open fixture " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct vector_case {
  std::string text;
  std::vector<token_id> ids;
};

// llama.cpp test-tokenizer-0 format: inputs separated by "\n__ggml_vocab_test__\n" (the last one
// runs to the end of the file), one line of space-separated ids per input.
inline std::vector<vector_case> read_vectors(const std::filesystem::path& inp, const std::filesystem::path& out) {
  const std::string raw = read_text(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<vector_case> cases;
  for (std::size_t pos = 0; pos < raw.size();) {
    const std::size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      cases.push_back({raw.substr(pos), {}});
      break;
    }
    cases.push_back({raw.substr(pos, next - pos), {}});
    pos = next + sep.size();
  }
  std::ifstream f(out);
  std::size_t i = 0;
  for (std::string line; std::getline(f, line); ++i) {
    if (i >= cases.size()) throw std::runtime_error(out.string() + ": more lines than inputs in " + inp.string());
    std::istringstream ls(line);
    for (long id; ls >> id;) cases[i].ids.push_back(token_id(id));
  }
  if (i != cases.size()) throw std::runtime_error(out.string() + ": fewer lines than inputs in " + inp.string());
  return cases;
}

inline std::string ids_string(const std::vector<token_id>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

// Printable form of test text for failure messages.
inline std::string escaped(std::string_view s) {
  std::string out;
  for (const char c : s.substr(0, 300)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (u < 32 || u == 127) out += "\\x" + std::string{"0123456789abcdef"[u >> 4], "0123456789abcdef"[u & 15]};
    else out += c;
  }
  if (s.size() > 300) out += "...";
  return out;
}

// Seeded random valid UTF-8 mixing what tokenizers find hard: several scripts, emoji with ZWJ
// and modifiers, combining marks, whitespace runs (incl. NBSP, ideographic space, CR/LF),
// digit runs, apostrophe contractions, punctuation runs and special-token-looking text.
class text_generator {
 public:
  explicit text_generator(std::uint32_t seed) : rng_(seed) {}

  std::string operator()(std::size_t max_parts = 12) {
    std::string s;
    const std::size_t parts = 1 + pick(max_parts);
    for (std::size_t i = 0; i < parts; ++i) part(s);
    return s;
  }

 private:
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  void cp(std::string& s, char32_t c) { tokenizer::lenient_utf8::append(s, c); }
  void range(std::string& s, char32_t lo, char32_t hi, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) cp(s, lo + char32_t(pick(hi - lo + 1)));
  }

  void part(std::string& s) {
    static constexpr std::string_view words[] = {"the", "Hello", "world", "don't", "I'm", "WE'RE", "it'S",
                                                 "naïve", "café", "Zürich", "tokenizer", "x", "A", "ok"};
    static constexpr std::string_view ws[] = {" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\xC2\xA0",
                                              "\xE3\x80\x80", "\xE2\x80\x83", "\x0B", "\x0C"};
    static constexpr std::string_view punct[] = {".", ",", "!", "?", "...", "'", "\"", "(", ")", "{}", "<<", "->",
                                                 "==", "/*", "#", "@", "$", "%", "&&", "||", "~", "`", "'s", "'ll"};
    static constexpr std::string_view specialish[] = {"<|eot_id|>", "<|im_start|>", "<s>", "</s>", "<think>",
                                                      "<|begin_of_text|>", "<unk>", "<|endoftext|>", "<|", "|>"};
    switch (pick(12)) {
      case 0: case 1: case 2: s += words[pick(std::size(words))]; break;
      case 3: s += ws[pick(std::size(ws))]; break;
      case 4: s += punct[pick(std::size(punct))]; break;
      case 5: range(s, '0', '9', 1 + pick(9)); break;
      case 6: range(s, 0x4E00, 0x9FFF, 1 + pick(6)); break;     // CJK ideographs
      case 7: range(s, 0x0400, 0x04FF, 1 + pick(8)); break;     // Cyrillic
      case 8: {                                                 // emoji, modifiers, ZWJ sequences
        static constexpr char32_t e[] = {0x1F600, 0x1F999, 0x2764, 0xFE0F, 0x1F44D, 0x1F3FD, 0x200D, 0x1F469,
                                         0x1F1E9, 0x1F1EA, 0x2705, 0x1F680};
        for (std::size_t i = 0, n = 1 + pick(4); i < n; ++i) cp(s, e[pick(std::size(e))]);
        break;
      }
      case 9: {  // other scripts and combining marks
        static constexpr char32_t c[] = {0x0301, 0x0308, 0x0915, 0x093F, 0x0E01, 0x0E34, 0x05D0, 0x0627, 0xAC00,
                                         0x3042, 0x30A2, 0x0660, 0x00E9, 0x00DF, 0x1E9E, 0xFF21, 0xFB01, 0x2028};
        for (std::size_t i = 0, n = 1 + pick(5); i < n; ++i) cp(s, c[pick(std::size(c))]);
        break;
      }
      case 10: s += specialish[pick(std::size(specialish))]; break;
      default: range(s, 0x20, 0x7E, 1 + pick(6)); break;       // printable ASCII
    }
  }

  std::mt19937 rng_;
};

}  // namespace strata::test
