// Tool calls: specs from OpenAI tool objects, the forced-call grammar per family (accepting what
// the templates render, rejecting wrong names and arguments), the streaming parser (the same
// events however the text is split; content, think blocks, not-a-call JSON, truncation), a round
// trip (random outputs of the grammar parse into valid calls), the lazy grammar trigger.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "grammar/helpers.hpp"
#include "strata/chat/tool_call_parser.hpp"
#include "strata/chat/tool_calls.hpp"
#include "strata/grammar/lazy_matcher.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/json/parse.hpp"
#include "strata/tokenizer/tokenizer.hpp"
#include "support/fixtures.hpp"

using namespace strata;
using chat::template_kind;

namespace {

std::vector<json::value> example_tools() {
  return {json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
              "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}})"),
          json::parse(R"({"type": "function", "function": {"name": "now"}})")};
}

std::shared_ptr<grammar::automaton> forced(template_kind k, chat::tool_choice c = {chat::tool_choice_mode::required, ""},
                                           bool parallel = true) {
  const auto specs = chat::tool_specs(example_tools());
  return grammar_test::compile(chat::tool_call_grammar(k, specs, c, parallel).gbnf);
}

struct parsed {
  std::string content;
  std::vector<chat::tool_call> calls;
  std::vector<chat::parse_event> events;
};

parsed parse_split(template_kind k, std::string_view text, const std::vector<std::size_t>& cuts) {
  chat::tool_call_parser p(k);
  parsed r;
  std::size_t at = 0;
  for (const std::size_t c : cuts) {
    p.feed(text.substr(at, c - at), r.events);
    at = c;
  }
  p.feed(text.substr(at), r.events);
  p.finish(r.events);
  r.content = p.content();
  r.calls.assign(p.calls().begin(), p.calls().end());
  return r;
}

// The events with consecutive pieces of one kind merged (splits change only the piece sizes).
std::vector<chat::parse_event> merged(const std::vector<chat::parse_event>& ev) {
  std::vector<chat::parse_event> out;
  for (const auto& e : ev) {
    if (!out.empty() && out.back().type == e.type && out.back().index == e.index &&
        (e.type == chat::parse_event::kind::content || e.type == chat::parse_event::kind::call_arguments))
      out.back().text += e.text;
    else
      out.push_back(e);
  }
  return out;
}

void check_splits(template_kind k, const std::string& text) {
  const parsed whole = parse_split(k, text, {});
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::size_t> cuts;
    for (std::size_t i = 1; i < text.size(); ++i)
      if (rng() % 4 == 0 || trial == 0) cuts.push_back(i);  // trial 0: one byte at a time
    const parsed p = parse_split(k, text, cuts);
    CAPTURE(trial);
    CHECK(p.content == whole.content);
    REQUIRE(p.calls.size() == whole.calls.size());
    const auto a = merged(p.events), b = merged(whole.events);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].type == b[i].type);
      CHECK(a[i].index == b[i].index);
      CHECK(a[i].text == b[i].text);
    }
  }
}

}  // namespace

TEST_CASE("tool_specs: OpenAI tool objects, with errors naming the field") {
  const auto specs = chat::tool_specs(example_tools());
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].name == "get_weather");
  CHECK(json::dumps(specs[1].parameters) == R"({"type": "object"})");
  const std::vector<std::pair<const char*, const char*>> bad = {
      {R"({"type": "function"})", "chat: tools[0].function must be an object"},
      {R"({"type": "retrieval", "function": {"name": "f"}})", "chat: tools[0].type must be \"function\""},
      {R"({"type": "function", "function": {"name": ""}})", "chat: tools[0].function.name must be a non-empty string"},
      {R"({"type": "function", "function": {"name": "f", "parameters": []}})",
       "chat: tools[0].function.parameters must be a JSON Schema object"},
  };
  for (const auto& [tool, msg] : bad) CHECK_THROWS_WITH_AS(chat::tool_specs({json::parse(tool)}), msg, error);
  CHECK_THROWS_WITH_AS(chat::tool_specs({example_tools()[1], example_tools()[1]}), "chat: tools[1]: a second tool named 'now'",
                       error);
}

TEST_CASE("tool_call_grammar: what the templates render, nothing else") {
  using grammar_test::accepts;
  auto q = forced(template_kind::chatml);
  CHECK(accepts(*q, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>"));
  CHECK(accepts(*q, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"));
  CHECK_FALSE(accepts(*q, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
  CHECK_FALSE(accepts(*q, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\"}}\n</tool_call>"));
  CHECK_FALSE(accepts(*q, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a very long city\"}}\n</tool_call>"));
  CHECK_FALSE(accepts(*q, "Sure! <tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  auto single = forced(template_kind::chatml, {chat::tool_choice_mode::required, ""}, false);
  CHECK_FALSE(accepts(*single, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                               "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  auto named = forced(template_kind::chatml, {chat::tool_choice_mode::function, "now"});
  CHECK(accepts(*named, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  CHECK_FALSE(accepts(*named, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>"));

  auto l31 = forced(template_kind::llama31);  // one call per message, whatever parallel says
  CHECK(accepts(*l31, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"));
  CHECK_FALSE(accepts(*l31, "{\"name\": \"now\", \"parameters\": {}}{\"name\": \"now\", \"parameters\": {}}"));
  auto l4 = forced(template_kind::llama4);
  CHECK(accepts(*l4, "{\"name\": \"now\", \"parameters\": {}}{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}"));

  const auto specs = chat::tool_specs(example_tools());
  CHECK_THROWS_WITH_AS(chat::tool_call_grammar(template_kind::chatml, specs, {chat::tool_choice_mode::function, "x"}, true),
                       "chat: tool_choice names function 'x', which is not in tools", error);
  CHECK_THROWS_WITH_AS(chat::tool_call_grammar(template_kind::chatml, specs, {chat::tool_choice_mode::none, ""}, true),
                       "chat: tool_choice none has no call grammar", error);
  const auto bad = chat::tool_specs({json::parse(R"({"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"a": {"not": {}}}}}})")});
  CHECK_THROWS_WITH_AS(chat::tool_call_grammar(template_kind::chatml, bad, {}, true),
                       "tool 'f' parameters: json schema: at /properties/a: keyword 'not' is not supported", error);
}

TEST_CASE("tool_call_or_answer_grammar: a JSON answer under the schema, or calls, nothing else") {
  using grammar_test::accepts;
  const auto specs = chat::tool_specs(example_tools());
  const auto schema = json::parse(R"({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]})");
  auto q = grammar_test::compile(chat::tool_call_or_answer_grammar(template_kind::chatml, specs, true, schema).gbnf);
  CHECK(accepts(*q, "{\"city\": \"Rome\"}"));
  CHECK(accepts(*q, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"));
  CHECK_FALSE(accepts(*q, "{\"city\": \"Oslo\"}"));  // not in the answer's enum
  CHECK_FALSE(accepts(*q, "Rome"));
  CHECK_FALSE(accepts(*q, "{\"city\": \"Rome\"}<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  CHECK_FALSE(accepts(*q, "Sure! <tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  auto single = grammar_test::compile(chat::tool_call_or_answer_grammar(template_kind::chatml, specs, false, schema).gbnf);
  CHECK_FALSE(accepts(*single, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                               "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  // Any object (json_object), and the Llama families' bare envelopes.
  const auto any = json::parse(R"({"type": "object", "additionalProperties": true})");
  auto l4 = grammar_test::compile(chat::tool_call_or_answer_grammar(template_kind::llama4, specs, true, any).gbnf);
  CHECK(accepts(*l4, "{\"a\": [1, {\"b\": null}], \"c\": \"d\"}"));
  CHECK(accepts(*l4, "{}"));
  CHECK(accepts(*l4, "{\"name\": \"now\", \"parameters\": {}}"));
  CHECK_FALSE(accepts(*l4, "[1]"));
  const auto bad = json::parse(R"({"type": "object", "properties": {"a": {"not": {}}}})");
  CHECK_THROWS_WITH_AS(chat::tool_call_or_answer_grammar(template_kind::chatml, specs, true, bad),
                       "answer: json schema: at /properties/a: keyword 'not' is not supported", grammar::schema_error);
}

TEST_CASE("forced_output_prefix: Qwen3 skips its think block, others start at once") {
  CHECK(chat::forced_output_prefix(template_kind::chatml, {}) == "<think>\n\n</think>\n\n");
  CHECK(chat::forced_output_prefix(template_kind::chatml, {.add_generation_prompt = true, .enable_thinking = false}).empty());
  CHECK(chat::forced_output_prefix(template_kind::llama31, {}).empty());
  CHECK(chat::forced_output_prefix(template_kind::llama4, {}).empty());
}

TEST_CASE("tool_call_parser: Qwen3 output") {
  const std::string text =
      "<think>\nI could write <tool_call> here, it is only a thought.\n</think>\n\nLet me check both.\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\\\"is\", \"n\": [1, {\"x\": \"}\"}]}}\n</tool_call>\n"
      "<tool_call>\n{\"arguments\": {}, \"name\": \"now\"}\n</tool_call>";
  const parsed p = parse_split(template_kind::chatml, text, {});
  CHECK(p.content == "<think>\nI could write <tool_call> here, it is only a thought.\n</think>\n\nLet me check both.");
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[0].name == "get_weather");
  CHECK(p.calls[0].arguments == "{\"city\": \"Par\\\"is\", \"n\": [1, {\"x\": \"}\"}]}");
  CHECK(p.calls[1].name == "now");
  CHECK(p.calls[1].arguments == "{}");
  const auto ev = merged(p.events);
  REQUIRE(ev.size() == 7);
  CHECK(ev[0].type == chat::parse_event::kind::content);
  CHECK(ev[1].type == chat::parse_event::kind::call_begin);
  CHECK(ev[1].text == "get_weather");
  CHECK(ev[2].type == chat::parse_event::kind::call_arguments);
  CHECK(ev[3].type == chat::parse_event::kind::call_end);
  CHECK(ev[4].text == "now");
  CHECK(ev[5].text == "{}");
  CHECK(ev[6].index == 1);
  check_splits(template_kind::chatml, text);
}

TEST_CASE("tool_call_parser: text that is not a call stays content") {
  const std::string text = "a <tool_call> b <tool_call>{\"x\": 1}</tool_call> c\n";
  const parsed p = parse_split(template_kind::chatml, text, {});
  CHECK(p.calls.empty());
  CHECK(p.content == text);
  check_splits(template_kind::chatml, text);
  for (const auto* t : {"{\"answer\": 42}", "Sure, here it is: {\"name\": \"x\"}", "  plain text"}) {
    CAPTURE(std::string(t));
    const parsed l = parse_split(template_kind::llama31, t, {});
    CHECK(l.calls.empty());
    CHECK(l.content == t);
    check_splits(template_kind::llama31, t);
  }
}

TEST_CASE("tool_call_parser: Llama output") {
  const std::string text = " <|python_start|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}; "
                           "{\"name\": \"now\", \"parameters\": {}}<|python_end|>";
  const parsed p = parse_split(template_kind::llama4, text, {});
  CHECK(p.content.empty());
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[0].arguments == "{\"city\": \"Rome\"}");
  CHECK(p.calls[1].name == "now");
  check_splits(template_kind::llama4, text);
  const parsed trailing = parse_split(template_kind::llama31, "{\"name\": \"now\", \"parameters\": {}} and more", {});
  CHECK(trailing.calls.size() == 1);
  CHECK(trailing.content == "and more");
}

TEST_CASE("tool_call_parser: a call cut off by the token limit is ended with what it has") {
  chat::tool_call_parser p(template_kind::chatml);
  std::vector<chat::parse_event> ev;
  p.feed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", ev);
  p.finish(ev);
  CHECK(p.truncated());
  REQUIRE(p.calls().size() == 1);
  CHECK(p.calls()[0].arguments == "{\"city\": \"Pa");
  chat::tool_call_parser q(template_kind::chatml);
  ev.clear();
  q.feed("<tool_call>\n{\"na", ev);
  q.finish(ev);
  CHECK(q.calls().empty());
  CHECK(q.content() == "<tool_call>\n{\"na");
}

TEST_CASE("tool calls round trip: random outputs of the forced grammar parse into valid calls") {
  const auto specs = chat::tool_specs(example_tools());
  for (const auto k : {template_kind::chatml, template_kind::llama31, template_kind::llama4}) {
    auto a = forced(k);
    std::mt19937 rng(17);
    int finished = 0;
    for (int trial = 0; trial < 40; ++trial) {
      grammar::matcher m(a);
      std::string out;
      bool ended = false;
      for (int step = 0; step < 600 && !ended; ++step) {
        if (m.can_end() && (m.finished() || rng() % 4 == 0)) {
          ended = true;
          break;
        }
        const auto mask = m.allowed();
        std::vector<grammar::token_id> ok;
        for (grammar::token_id t = 0; t < 256; ++t)
          if (sampling::mask_allows(mask, t)) ok.push_back(t);
        REQUIRE_FALSE(ok.empty());
        const auto t = ok[rng() % ok.size()];
        m.accept(t);
        out += char(t);
      }
      if (!ended) continue;
      ++finished;
      CAPTURE(out);
      const parsed p = parse_split(k, out, {});
      CHECK(p.content.empty());
      REQUIRE_FALSE(p.calls.empty());
      for (const auto& c : p.calls) {
        const json::value args = json::parse(c.arguments);
        CHECK(args.is_object());
        CHECK((c.name == "get_weather" || c.name == "now"));
        if (c.name == "get_weather") CHECK(args.find("city") != nullptr);
      }
    }
    CHECK(finished > 10);
  }
}

TEST_CASE("lazy_matcher: free text until the trigger, then the grammar") {
  const auto specs = chat::tool_specs(example_tools());
  auto a = grammar_test::compile(chat::tool_call_grammar(template_kind::chatml, specs, {}, true).gbnf);
  const auto trig = chat::tool_call_trigger(template_kind::chatml);
  grammar::lazy_matcher m(a, trig.text, trig.at_start);
  for (const char c : std::string("Hmm <tool_ca")) {
    CHECK(m.allows(grammar::token_id(c)));
    m.accept(grammar::token_id(static_cast<unsigned char>(c)));
  }
  CHECK_FALSE(m.active());
  CHECK(m.allows('x'));
  for (const char c : std::string("ll>\n{\"name\": \"")) m.accept(grammar::token_id(c));
  CHECK(m.active());
  CHECK(m.allows('n'));
  CHECK_FALSE(m.allows('x'));

  // In Qwen3's think block the trigger does not count; after it, it does.
  grammar::lazy_matcher thinking(a, trig.text, trig.at_start, trig.skip_open, trig.skip_close);
  for (const char c : std::string("\n<think>\nmaybe <tool_call>\n{\"name\": \"x\" no\n</think>\n\n"))
    thinking.accept(grammar::token_id(static_cast<unsigned char>(c)));
  CHECK_FALSE(thinking.active());
  for (const char c : std::string("<tool_call>\n{\"")) thinking.accept(grammar::token_id(c));
  CHECK(thinking.active());
  CHECK_FALSE(thinking.failed());
  grammar::lazy_matcher no_think(a, trig.text, trig.at_start, trig.skip_open, trig.skip_close);
  for (const char c : std::string("Sure. <tool_call>\n")) no_think.accept(grammar::token_id(c));
  CHECK(no_think.active());

  auto l = grammar_test::compile(chat::tool_call_grammar(template_kind::llama31, specs, {}, true).gbnf);
  const auto lt = chat::tool_call_trigger(template_kind::llama31);
  grammar::lazy_matcher at_start(l, lt.text, lt.at_start);
  for (const char c : std::string("Sure {\"name\": \"")) at_start.accept(grammar::token_id(c));
  CHECK_FALSE(at_start.active());  // other text came first
  grammar::lazy_matcher at_start2(l, lt.text, lt.at_start);
  for (const char c : std::string("\n {\"name\": \"")) at_start2.accept(grammar::token_id(c));
  CHECK(at_start2.active());
  CHECK_FALSE(at_start2.failed());
}

TEST_CASE("Qwen3's <tool_call> is one token the forced grammar allows, as are its spelled-out bytes") {
  const auto path = test::fixture_dir() / "tokenizer" / "ggml-vocab-qwen3.gguf";
  const gguf::file vocab_file(path);
  const auto tok = tokenizer::tokenizer::from_gguf(vocab_file.gguf());
  const auto open = tok.encode("<tool_call>", false, true);
  REQUIRE(open.size() == 1);
  const auto trie = std::make_shared<const grammar::token_trie>(grammar::token_trie::from_tokenizer(tok));
  CHECK(trie->kind(open[0]) == grammar::token_kind::text);
  CHECK(tok.token_to_piece(open[0], false) == "<tool_call>");  // user-defined: shown in the output text
  const auto specs = chat::tool_specs(example_tools());
  const auto a = grammar::compile_gbnf(chat::tool_call_grammar(template_kind::chatml, specs, {}, true).gbnf, trie);
  grammar::matcher m(a);
  CHECK(m.allows(open[0]));
  CHECK(m.allows(tok.encode("<", false, false)[0]));
  CHECK_FALSE(m.allows(tok.encode("Sure", false, false)[0]));
  m.accept(open[0]);
  CHECK(m.allows(tok.encode("\n", false, false)[0]));
}
