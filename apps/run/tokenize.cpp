// `--tokenize TEXT` and `--detokenize IDS`: llama-tokenize compatible output.
#include <iostream>
#include <sstream>

#include "modes.hpp"
#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace strata::app {

std::vector<std::int32_t> parse_id_list(const std::string& s, const char* flag) {
  std::vector<std::int32_t> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',' || s[i] == '[' || s[i] == ']' || s[i] == '\n')) ++i;
    if (i >= s.size()) break;
    std::size_t j = i;
    while (j < s.size() && s[j] != ',' && s[j] != ' ' && s[j] != ']' && s[j] != '\n') ++j;
    const std::string item = s.substr(i, j - i);
    try {
      std::size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      out.push_back(std::int32_t(v));
    } catch (const std::logic_error&) {
      throw error(std::string(flag) + ": '" + item + "' is not a token id (expected non-negative integers separated by commas)");
    }
    i = j;
  }
  return out;
}

int run_tokenize(const run_options& opt) {
  const gguf::file f(opt.model);
  const auto tok = tokenizer::tokenizer::from_gguf(f.gguf());
  const auto ids = tok.encode(opt.tokenize_text, /*add_special=*/true, /*parse_special=*/!opt.no_parse_special);
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < ids.size(); ++i) o << (i ? ", " : "") << ids[i];
  o << "]";
  std::cout << o.str() << "\n";
  return 0;
}

int run_detokenize(const run_options& opt) {
  const gguf::file f(opt.model);
  const auto tok = tokenizer::tokenizer::from_gguf(f.gguf());
  const auto ids = parse_id_list(opt.detokenize_ids, "--detokenize");
  std::cout << tok.decode(ids, /*render_special=*/true) << "\n";
  return 0;
}

}  // namespace strata::app
