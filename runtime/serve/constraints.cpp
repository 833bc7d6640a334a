// Grammar cache and the grammar constraint (constraints.hpp).
#include "constraints.hpp"

#include "strata/grammar/json_schema.hpp"

namespace strata::serve {

grammar_cache::grammar_cache(const tokenizer::tokenizer& tok, std::size_t capacity)
    : trie_(std::make_shared<const grammar::token_trie>(grammar::token_trie::from_tokenizer(tok))), capacity_(capacity) {}

std::shared_ptr<grammar::automaton> grammar_cache::get(const std::string& gbnf) {
  if (const auto it = index_.find(gbnf); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  auto a = grammar::compile_gbnf(gbnf, trie_);
  lru_.emplace_front(gbnf, a);
  index_[gbnf] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return a;
}

grammar_constraint::grammar_constraint(std::shared_ptr<grammar::automaton> a, std::string trigger, bool at_start)
    : a_(std::move(a)), trigger_(std::move(trigger)), at_start_(at_start) {}

sampling::token_constraint& grammar_constraint::get() {
  if (trigger_.empty()) {
    if (!eager_) eager_.emplace(a_);
    return *eager_;
  }
  if (!lazy_) lazy_.emplace(a_, trigger_, at_start_);
  return *lazy_;
}

bool grammar_constraint::active() {
  get();
  return eager_ || lazy_->active();
}
bool grammar_constraint::allows(sampling::token_id t) { return get().allows(t); }
std::span<const std::uint64_t> grammar_constraint::allowed() { return get().allowed(); }
void grammar_constraint::accept(sampling::token_id t) {
  get();
  if (eager_) eager_->accept(t);
  else lazy_->accept(t);
}

request_grammar grammar_for(const parsed_request& r, chat::template_kind k) {
  if (r.tool_calls_possible()) {
    std::vector<chat::tool_spec> specs;
    try {
      specs = chat::tool_specs(r.tools);
      std::string gbnf = chat::tool_call_grammar(k, specs, r.tool_choice, r.parallel_tool_calls).gbnf;
      if (r.forced_tool_call()) return {std::move(gbnf), {}, false};
      const chat::call_trigger t = chat::tool_call_trigger(k);
      return {std::move(gbnf), t.text, t.at_start};
    } catch (const error& e) {
      throw bad_request(std::string("tools: ") + e.what(), "tools");
    }
  }
  switch (r.format) {
    case output_format::text: return {};
    case output_format::json_object: return {grammar::json_object_gbnf(), {}, false};
    case output_format::json_schema: break;
  }
  try {
    return {grammar::json_schema_to_gbnf(r.schema).gbnf, {}, false};
  } catch (const error& e) {
    throw bad_request(r.schema_param + ": " + e.what(), r.schema_param);
  }
}

}  // namespace strata::serve
