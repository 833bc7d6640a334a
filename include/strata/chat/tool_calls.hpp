// Tool calls in each family's native output format, and what a server needs to force them:
//   chatml (Qwen3): <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, "\n" between calls
//   llama31 (3.1-3.3): {"name": "f", "parameters": {...}}, one call per message
//   llama4: {"name": "f", "parameters": {...}}, calls back to back
// (the formats the templates render assistant tool_calls in, and their tool instructions ask
// for). llama3 (3.0) and generic have no tool format; they get the Llama one for grammar and
// parsing, but their prompts do not describe the tools (has_native_tools() is false).
//
// Server flow for tool_choice required / a named function: render the prompt with the tools,
// append forced_output_prefix(), constrain generation with tool_call_grammar() from the first
// token, parse with tool_call_parser. For tool_choice auto: the same grammar, activated lazily
// when the output reaches tool_call_trigger() (grammar::lazy_matcher); for tool_choice auto with
// a JSON answer format, tool_call_or_answer_grammar() from the first token.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/chat/message.hpp"
#include "strata/chat/template.hpp"
#include "strata/core/error.hpp"
#include "strata/grammar/detail/gbnf_text.hpp"
#include "strata/grammar/json_schema.hpp"
#include "strata/json/value.hpp"
#include "strata/json/write.hpp"

namespace strata::chat {

enum class tool_choice_mode { none, automatic, required, function };

struct tool_choice {
  tool_choice_mode mode = tool_choice_mode::automatic;
  std::string function;  // the forced function's name (mode function)
};

struct tool_spec {
  std::string name;
  json::value parameters;  // JSON Schema of the arguments object
};

// OpenAI tool objects ({"type": "function", "function": {"name", "description", "parameters"}})
// -> specs. No `parameters`: no arguments ({}); a schema without "type" is taken as an object.
// Throws strata::error naming tools[i] and the field.
inline std::vector<tool_spec> tool_specs(const std::vector<json::value>& tools) {
  std::vector<tool_spec> out;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json::value& t = tools[i];
    if (!t.is_object()) throw error("chat: " + at + " must be an object");
    const json::value* type = t.find("type");
    if (!type || !type->is_string() || type->as_string() != "function")
      throw error("chat: " + at + ".type must be \"function\"");
    const json::value* f = t.find("function");
    if (!f || !f->is_object()) throw error("chat: " + at + ".function must be an object");
    const json::value* name = f->find("name");
    if (!name || !name->is_string() || name->as_string().empty())
      throw error("chat: " + at + ".function.name must be a non-empty string");
    for (const auto& prev : out)
      if (prev.name == name->as_string()) throw error("chat: " + at + ": a second tool named '" + prev.name + "'");
    json::value params = json::value::object({{"type", json::value::string("object")}});
    if (const json::value* p = f->find("parameters")) {
      if (!p->is_object()) throw error("chat: " + at + ".function.parameters must be a JSON Schema object");
      params = *p;
      if (!params.find("type") && !params.find("$ref") && !params.find("anyOf") && !params.find("oneOf"))
        params.set("type", json::value::string("object"));
    }
    out.push_back({name->as_string(), std::move(params)});
  }
  return out;
}

struct call_syntax {
  std::string_view begin;          // before each call's JSON envelope
  std::string_view end;            // after it
  std::string_view separator;      // between two calls
  std::string_view arguments_key;  // key of the arguments in the envelope
  bool parallel;                   // the template renders several calls in one message
};

constexpr call_syntax syntax_of(template_kind k) noexcept {
  switch (k) {
    case template_kind::chatml: return {"<tool_call>\n", "\n</tool_call>", "\n", "arguments", true};
    case template_kind::llama31: return {"", "", "", "parameters", false};
    case template_kind::llama4: return {"", "", "", "parameters", true};
    case template_kind::llama3:
    case template_kind::generic: break;
  }
  return {"", "", "", "parameters", true};
}

constexpr bool has_native_tools(template_kind k) noexcept {
  return k == template_kind::chatml || k == template_kind::llama31 || k == template_kind::llama4;
}

// Text a call starts with; for tool_choice auto, a lazy grammar starts constraining there
// (grammar::lazy_matcher(automaton, text, at_start, skip_open, skip_close)). at_start: only at
// the start of the output (after whitespace). skip_open/skip_close: a leading block in which the
// trigger does not count (Qwen3's reasoning, where tool_call_parser does not look for calls
// either).
struct call_trigger {
  std::string text;
  bool at_start;
  std::string skip_open = {}, skip_close = {};
};
inline call_trigger tool_call_trigger(template_kind k) {
  if (k == template_kind::chatml) return {"<tool_call>", false, "<think>", "</think>"};
  return {"{\"name\": \"", true};
}

// Appended to the rendered prompt when the output is forced (a tool call or a JSON answer) so it
// starts at once: Qwen3 thinks first unless its generation prompt already closed the block
// (enable_thinking = false writes the same empty block).
constexpr std::string_view forced_output_prefix(template_kind k, const render_options& opt) noexcept {
  if (k == template_kind::chatml && opt.add_generation_prompt && opt.enable_thinking) return "<think>\n\n</think>\n\n";
  return "";
}

struct tool_grammar {
  std::string gbnf;
  std::vector<std::string> warnings;  // from the argument schemas
};

namespace detail {
// "call ::= ..." for one call to one of `tools` (only the named one for mode function), its
// argument schemas added to `set`. Throws as tool_call_grammar says.
inline std::string call_rule(template_kind k, std::span<const tool_spec> tools, const tool_choice& choice,
                             grammar::schema_set& set) {
  if (choice.mode == tool_choice_mode::none) throw error("chat: tool_choice none has no call grammar");
  if (tools.empty()) throw error("chat: a tool call grammar needs at least one tool");
  const call_syntax syn = syntax_of(k);
  std::string alts;
  bool found = false;
  for (const tool_spec& t : tools) {
    if (choice.mode == tool_choice_mode::function && t.name != choice.function) continue;
    found = true;
    std::string args;
    try {
      args = set.add(t.parameters, t.name + "-args");
    } catch (const grammar::schema_error& e) {
      throw grammar::schema_error("tool '" + t.name + "' parameters: " + e.what());
    }
    const std::string head = "{\"name\": " + json::quote(t.name) + ", " + json::quote(syn.arguments_key) + ": ";
    alts += (alts.empty() ? "" : " | ") + grammar::detail::literal(head) + " " + args;
  }
  if (!found) throw error("chat: tool_choice names function '" + choice.function + "', which is not in tools");
  return "call ::= " + grammar::detail::literal(std::string(syn.begin)) + " ( " + alts + " ) " +
         grammar::detail::literal("}" + std::string(syn.end)) + "\n";
}
// One call, or with parallel_tool_calls where the template allows several, one or more.
inline std::string calls_expr(template_kind k, bool parallel_tool_calls) {
  const call_syntax syn = syntax_of(k);
  if (!(parallel_tool_calls && syn.parallel)) return "call";
  return "call ( " + grammar::detail::literal(std::string(syn.separator)) + " call )*";
}
}  // namespace detail

// GBNF for the output under a tool choice: one call (or, with parallel_tool_calls where the
// template allows several, one or more) to one of `tools` (only the named one for mode
// function), arguments valid against its schema. Throws strata::error for mode none, an unknown
// forced function, no tools, or an argument schema the converter rejects (grammar::schema_error,
// naming the tool).
inline tool_grammar tool_call_grammar(template_kind k, std::span<const tool_spec> tools, const tool_choice& choice,
                                      bool parallel_tool_calls, const grammar::schema_options& opt = {}) {
  grammar::schema_set set(opt);
  const std::string call = detail::call_rule(k, tools, choice, set);
  return {set.gbnf(detail::calls_expr(k, parallel_tool_calls), call), set.warnings()};
}

// tool_choice auto with a structured answer (OpenAI tools + response_format): from the first
// character the output is either a JSON value valid against `answer` (a JSON Schema) or tool
// calls as tool_call_grammar(k, tools, auto, parallel) makes them; nothing before either (the
// server appends forced_output_prefix). A schema the converter rejects throws
// grammar::schema_error starting "answer: " (a tool's starts "tool '"), other errors as
// tool_call_grammar.
inline tool_grammar tool_call_or_answer_grammar(template_kind k, std::span<const tool_spec> tools,
                                                bool parallel_tool_calls, const json::value& answer,
                                                const grammar::schema_options& opt = {}) {
  grammar::schema_set set(opt);
  const std::string call = detail::call_rule(k, tools, {tool_choice_mode::automatic, ""}, set);
  std::string answer_rule;
  try {
    answer_rule = set.add(answer, "answer");
  } catch (const grammar::schema_error& e) {
    throw grammar::schema_error(std::string("answer: ") + e.what());
  }
  return {set.gbnf(answer_rule + " | " + detail::calls_expr(k, parallel_tool_calls), call), set.warnings()};
}

}  // namespace strata::chat
