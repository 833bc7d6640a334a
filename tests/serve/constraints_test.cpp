// The grammar a request gets (constraints.hpp) on Qwen3's real vocabulary: tool_choice auto stays
// dormant through a think block that mentions <tool_call> and switches on at a call after it;
// tools with a response_format constrain from the first token to a call or the JSON answer; bad
// schemas and tools name the request field they came from.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "serve/constraints.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/json/parse.hpp"

using namespace strata;
using namespace strata::serve;

namespace {

// The real Qwen3 vocabulary (151,936 ids; <tool_call> is one token), not the fixture model's.
const tokenizer::tokenizer& constraints_qwen3_tokenizer() {
  static const auto f = gguf::open(STRATA_TEST_FIXTURES "/tokenizer/ggml-vocab-qwen3.gguf");
  static const auto tok = tokenizer::tokenizer::from_gguf(f.gguf());
  return tok;
}

grammar_cache& cache() {
  static grammar_cache c(constraints_qwen3_tokenizer());
  return c;
}

parsed_request with_tools(chat::tool_choice_mode mode) {
  parsed_request r;
  r.tools = {json::parse(R"({"type": "function", "function": {"name": "get_time",
      "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}})")};
  r.tool_choice.mode = mode;
  return r;
}

grammar_constraint constraint_for(const parsed_request& r) {
  request_grammar g = grammar_for(r, chat::template_kind::chatml);
  REQUIRE(!g.gbnf.empty());
  return grammar_constraint(cache().get(g.gbnf), g.trigger);
}

void accept_text(grammar_constraint& c, std::string_view text) {
  for (const auto t : constraints_qwen3_tokenizer().encode(text, false, true)) {
    REQUIRE(c.allows(t));
    c.accept(t);
  }
}

sampling::token_id one_token(std::string_view text) {
  const auto ids = constraints_qwen3_tokenizer().encode(text, false, true);
  REQUIRE(ids.size() == 1);
  return ids[0];
}

}  // namespace

TEST_CASE("tool_choice auto: dormant through the think block, active at a call after it") {
  auto c = constraint_for(with_tools(chat::tool_choice_mode::automatic));
  CHECK_FALSE(c.active());
  accept_text(c, "<think>\nMaybe <tool_call> the clock?\n</think>\n\nLet me check.\n");
  CHECK_FALSE(c.active());
  accept_text(c, "<tool_call>");
  CHECK(c.active());
  CHECK(c.allows(one_token("\n")));
  CHECK_FALSE(c.allows(one_token("Hello")));
}

TEST_CASE("tools with a response_format: a call or the JSON answer from the first token") {
  for (const auto fmt : {output_format::json_object, output_format::json_schema}) {
    CAPTURE(int(fmt));
    auto r = with_tools(chat::tool_choice_mode::automatic);
    r.format = fmt;
    r.schema = R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})";
    r.schema_param = "response_format.json_schema.schema";
    auto c = constraint_for(r);
    CHECK(c.active());
    CHECK(c.allows(one_token("<tool_call>")));
    CHECK(c.allows(one_token("{")));
    CHECK_FALSE(c.allows(one_token("Hello")));
    accept_text(c, fmt == output_format::json_schema ? "{\"ok\": true}" : "{\"any\": [1]}");
  }
  // A forced call leaves no room for the answer.
  auto forced = with_tools(chat::tool_choice_mode::required);
  forced.format = output_format::json_object;
  auto c = constraint_for(forced);
  CHECK(c.allows(one_token("<tool_call>")));
  CHECK_FALSE(c.allows(one_token("{")));
}

TEST_CASE("a schema or tool the grammar cannot take is a 400 naming its field") {
  auto r = with_tools(chat::tool_choice_mode::automatic);
  r.format = output_format::json_schema;
  r.schema_param = "text.format.schema";
  r.schema = R"({"type": "object", "properties": {"a": {"not": {}}}})";
  try {
    (void)grammar_for(r, chat::template_kind::chatml);
    FAIL("no error");
  } catch (const api_error& e) {
    CHECK(e.status == 400);
    CHECK(e.param == "text.format.schema");
    CHECK(std::string(e.what()).find("keyword 'not' is not supported") != std::string::npos);
  }
  r.schema = "{\"type\": ";
  try {
    (void)grammar_for(r, chat::template_kind::chatml);
    FAIL("no error");
  } catch (const api_error& e) {
    CHECK(e.param == "text.format.schema");
  }
  r.schema = R"({"type": "object"})";
  r.tools = {json::parse(R"({"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"a": {"not": {}}}}}})")};
  try {
    (void)grammar_for(r, chat::template_kind::chatml);
    FAIL("no error");
  } catch (const api_error& e) {
    CHECK(e.param == "tools");
    CHECK(std::string(e.what()).find("tool 'f' parameters") != std::string::npos);
  }
}
