// Grammar-constrained decoding for the server: the grammar a request's structure needs
// (response_format json_object / json_schema, tool calls in the template's syntax, chat/tool_calls.hpp)
// compiled over the model's vocabulary, and the per-choice rt::token_constraint the scheduler applies. Automata are cached
// by GBNF text, since clients repeat the same schema and tools request after request.
#pragma once
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "request.hpp"
#include "strata/chat/template.hpp"
#include "strata/chat/tool_calls.hpp"
#include "strata/grammar/lazy_matcher.hpp"
#include "strata/grammar/matcher.hpp"
#include "strata/grammar/token_trie.hpp"
#include "strata/runtime/token_constraint.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace strata::serve {

// Compiled grammars over one vocabulary, least recently used dropped beyond `capacity`. Used on
// the server's network thread only; the automata it hands out are used on the scheduler thread.
class grammar_cache {
 public:
  grammar_cache(const tokenizer::tokenizer& tok, std::size_t capacity = 32);
  // Throws grammar::grammar_error for bad GBNF.
  std::shared_ptr<grammar::automaton> get(const std::string& gbnf);
  const grammar::token_trie& trie() const noexcept { return *trie_; }

 private:
  std::shared_ptr<const grammar::token_trie> trie_;
  std::size_t capacity_;
  std::list<std::pair<std::string, std::shared_ptr<grammar::automaton>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

// The grammar a request's output must follow, if any: a forced tool call (tool_choice required
// or a function) or JSON (response_format) from the first token, or with tool_choice auto the
// tool-call grammar from the moment the output reaches the template's call trigger. JSON output
// and optional tool calls do not combine: with a response_format, tool_choice auto calls nothing.
struct request_grammar {
  std::string gbnf;             // empty: unconstrained
  chat::call_trigger trigger{};  // text empty: from the first token
};
// Throws a 400 naming the schema or the tools when a grammar cannot be built for them.
request_grammar grammar_for(const parsed_request& r, chat::template_kind k);

// A grammar as the scheduler's constraint (grammar::matcher, or grammar::lazy_matcher with a
// trigger). The matcher is built on first use, on the scheduler thread, because matching
// extends the automaton shared with other requests.
class grammar_constraint final : public rt::token_constraint {
 public:
  // An empty trigger text: eager from the first token; else lazy, skipping the trigger's
  // leading block (Qwen3's reasoning) as chat::tool_call_trigger says.
  explicit grammar_constraint(std::shared_ptr<grammar::automaton> a, chat::call_trigger trigger = {});
  bool active() override;
  bool allows(sampling::token_id t) override;
  std::span<const std::uint64_t> allowed() override;
  void accept(sampling::token_id t) override;

 private:
  sampling::token_constraint& get();
  std::shared_ptr<grammar::automaton> a_;
  chat::call_trigger trigger_;
  std::optional<grammar::matcher> eager_;
  std::optional<grammar::lazy_matcher> lazy_;
};

}  // namespace strata::serve
