// Grammar cache and the grammar constraint (constraints.hpp).
#include "constraints.hpp"

#include "strata/grammar/json_schema.hpp"
#include "strata/json/parse.hpp"

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

grammar_constraint::grammar_constraint(std::shared_ptr<grammar::automaton> a, chat::call_trigger trigger)
    : a_(std::move(a)), trigger_(std::move(trigger)) {}

sampling::token_constraint& grammar_constraint::get() {
  if (trigger_.text.empty()) {
    if (!eager_) eager_.emplace(a_);
    return *eager_;
  }
  if (!lazy_) lazy_.emplace(a_, trigger_.text, trigger_.at_start, trigger_.skip_open, trigger_.skip_close);
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

namespace {
// response_format's schema; json_object: any object.
json::value answer_schema(const parsed_request& r) {
  if (r.format == output_format::json_object)
    return json::value::object({{"type", json::value::string("object")}, {"additionalProperties", json::value::boolean(true)}});
  try {
    return json::parse(r.schema, "json schema");
  } catch (const json::parse_error& e) {
    throw bad_request(r.schema_param + ": " + e.what(), r.schema_param);
  }
}
}  // namespace

request_grammar grammar_for(const parsed_request& r, chat::template_kind k) {
  if (r.tool_calls_possible()) {
    try {
      const std::vector<chat::tool_spec> specs = chat::tool_specs(r.tools);
      if (r.forced_tool_call()) return {chat::tool_call_grammar(k, specs, r.tool_choice, r.parallel_tool_calls).gbnf, {}};
      if (r.format != output_format::text)
        return {chat::tool_call_or_answer_grammar(k, specs, r.parallel_tool_calls, answer_schema(r)).gbnf, {}};
      return {chat::tool_call_grammar(k, specs, r.tool_choice, r.parallel_tool_calls).gbnf, chat::tool_call_trigger(k)};
    } catch (const grammar::schema_error& e) {
      const std::string m = e.what();
      if (m.starts_with("answer: ")) throw bad_request(r.schema_param + ": " + m.substr(8), r.schema_param);
      throw bad_request("tools: " + m, "tools");
    } catch (const error& e) {
      throw bad_request(std::string("tools: ") + e.what(), "tools");
    }
  }
  switch (r.format) {
    case output_format::text: return {};
    case output_format::json_object: return {grammar::json_object_gbnf(), {}};
    case output_format::json_schema: break;
  }
  try {
    return {grammar::json_schema_to_gbnf(r.schema).gbnf, {}};
  } catch (const error& e) {
    throw bad_request(r.schema_param + ": " + e.what(), r.schema_param);
  }
}

}  // namespace strata::serve
