// Shared helpers for the grammar tests: toy vocabularies (every single byte, or a list of pieces)
// and whole-text acceptance through the automaton, as llama.cpp's gbnf-validator checks a string.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/grammar/all.hpp"

namespace grammar_test {

using namespace strata::grammar;

// Tokens 0..255 are the single bytes, `extra` pieces follow, and the last id is an
// end-of-generation token.
inline std::shared_ptr<const token_trie> byte_trie(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
  for (const auto& e : extra) pieces.push_back(e);
  std::vector<std::string_view> views(pieces.begin(), pieces.end());
  std::vector<token_kind> kinds(pieces.size(), token_kind::text);
  views.push_back({});
  kinds.push_back(token_kind::end_of_generation);
  return std::make_shared<const token_trie>(kinds, views);
}

// Whether the grammar matches all of `text`.
inline bool accepts(automaton& a, std::string_view text) {
  const auto s = a.advance(a.intern(a.initial_configs()), text);
  return s != 0 && a.accepting(s);
}
// Whether `text` can be extended to a match (a viable prefix).
inline bool viable(automaton& a, std::string_view text) {
  return a.advance(a.intern(a.initial_configs()), text) != 0;
}

inline std::shared_ptr<automaton> compile(std::string_view gbnf) { return compile_gbnf(gbnf, byte_trie()); }

}  // namespace grammar_test
