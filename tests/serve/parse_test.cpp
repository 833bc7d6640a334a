// Request parsing of the OpenAI and Anthropic routes: accepted shapes, and every bad field
// named in a 400 (runtime/serve/openai_api.hpp, anthropic_api.hpp, request.hpp).
#include <doctest/doctest.h>

#include <string>

#include "serve/anthropic_api.hpp"
#include "serve/openai_api.hpp"

using namespace strata::serve;

namespace {

simdjson::dom::parser& parser() {
  static thread_local simdjson::dom::parser p;
  return p;
}
json_in::object body(const std::string& s) { return json_in::parse_object(parser(), s); }

// The param of the api_error thrown by fn (and that it is a 400).
template <class F>
std::string bad_param(F&& fn) {
  try {
    fn();
  } catch (const api_error& e) {
    CHECK(e.status == 400);
    return e.param;
  }
  FAIL("no error thrown");
  return {};
}

}  // namespace

TEST_CASE("chat: messages, sampling fields, stop, stream options") {
  const auto r = openai::parse_chat(body(R"({"model":"m","messages":[
      {"role":"developer","content":"be terse"},
      {"role":"user","content":[{"type":"text","text":"he"},{"type":"text","text":"llo"}]},
      {"role":"assistant","content":null}],
    "temperature":0,"top_p":0.5,"top_k":7,"min_p":0.1,"seed":42,"frequency_penalty":0.5,"presence_penalty":-1,
    "logit_bias":{"5":-100,"9":2.5},"max_completion_tokens":9,"max_tokens":3,"stop":"END","stream":true,
    "stream_options":{"include_usage":true},"user":"ignored","metadata":{"x":1}})"));
  CHECK(r.model == "m");
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[1].content == "hello");
  CHECK(r.messages[2].content.empty());
  CHECK(r.sampling.temperature == 0.0f);
  CHECK(r.sampling.top_p == 0.5f);
  CHECK(r.sampling.top_k == 7);
  CHECK(r.sampling.seed == 42);
  CHECK(r.sampling.max_tokens == 9);  // max_completion_tokens wins over the deprecated max_tokens
  REQUIRE(r.sampling.logit_bias.size() == 2);
  CHECK(r.sampling.logit_bias[0].bias == -INFINITY);  // -100 bans
  CHECK(r.sampling.logit_bias[1].bias == 2.5f);
  CHECK(r.stop == std::vector<std::string>{"END"});
  CHECK(r.stream);
  CHECK(r.include_usage);
}

TEST_CASE("chat: response_format json_object adds an instruction") {
  const auto a = openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_object"}})"));
  REQUIRE(a.messages.size() == 2);
  CHECK(a.messages[0].role == "system");
  CHECK(a.messages[0].content.find("JSON") != std::string::npos);
  const auto b = openai::parse_chat(body(R"({"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"x"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"}}}})"));
  REQUIRE(b.messages.size() == 2);
  CHECK(b.messages[0].content.find("S\n\n") == 0);
  CHECK(b.messages[0].content.find(R"({"type":"object"})") != std::string::npos);
}

TEST_CASE("chat: bad fields are named") {
  const auto chat = [](const std::string& extra) {
    return [extra] { openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user","content":"x"}])" + extra + "}")); };
  };
  CHECK(bad_param([] { openai::parse_chat(body(R"({"messages":[]})")); }) == "model");
  CHECK(bad_param([] { openai::parse_chat(body(R"({"model":"m"})")); }) == "messages");
  CHECK(bad_param([] { openai::parse_chat(body(R"({"model":"m","messages":[]})")); }) == "messages");
  CHECK(bad_param([] { openai::parse_chat(body(R"({"model":"m","messages":{}})")); }) == "messages");
  CHECK(bad_param([] { openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user"}]})")); }) == "messages[0].content");
  CHECK(bad_param([] { openai::parse_chat(body(R"({"model":"m","messages":[{"role":1,"content":"x"}]})")); }) == "messages[0].role");
  CHECK(bad_param(chat(R"(,"n":2)")) == "n");
  CHECK(bad_param(chat(R"(,"temperature":"hot")")) == "temperature");
  CHECK(bad_param(chat(R"(,"max_tokens":-1)")) == "max_tokens");
  CHECK(bad_param(chat(R"(,"max_tokens":1.5)")) == "max_tokens");
  CHECK(bad_param(chat(R"(,"top_k":-3)")) == "top_k");
  CHECK(bad_param(chat(R"(,"stop":["a",""])")) == "stop");
  CHECK(bad_param(chat(R"(,"stop":[1])")) == "stop[0]");
  CHECK(bad_param(chat(R"(,"logit_bias":{"x":1})")) == "logit_bias");
  CHECK(bad_param(chat(R"(,"logit_bias":{"1":500})")) == "logit_bias.1");
  CHECK(bad_param(chat(R"(,"frequency_penalty":3)")) == "frequency_penalty");
  CHECK(bad_param(chat(R"(,"stream":"yes")")) == "stream");
  CHECK(bad_param(chat(R"(,"response_format":{"type":"xml"})")) == "response_format.type");
  CHECK(bad_param(chat(R"(,"tools":[{"type":"function"}])")) == "tools");
  CHECK_NOTHROW(chat(R"(,"tools":[],"unknown_field":{"deep":[1]})")());
}

TEST_CASE("invalid JSON and non-object bodies") {
  CHECK_THROWS_AS(body("{"), api_error);
  CHECK_THROWS_AS(body("[]"), api_error);
  CHECK_THROWS_AS(body(""), api_error);
  try {
    body(R"({"a":})");
  } catch (const api_error& e) {
    CHECK(std::string(e.what()).find("invalid JSON") != std::string::npos);
  }
}

TEST_CASE("completions: prompt forms and refused options") {
  auto a = openai::parse_completion(body(R"({"model":"m","prompt":"Once"})"));
  CHECK(!a.chat);
  CHECK(a.prompt == "Once");
  CHECK(a.sampling.max_tokens == 16);  // OpenAI's default
  auto b = openai::parse_completion(body(R"({"model":"m","prompt":[1,2,3],"max_tokens":2})"));
  CHECK(b.prompt_tokens == std::vector<std::int32_t>{1, 2, 3});
  auto c = openai::parse_completion(body(R"({"model":"m","prompt":[[4,5]]})"));
  CHECK(c.prompt_tokens == std::vector<std::int32_t>{4, 5});
  auto d = openai::parse_completion(body(R"({"model":"m","prompt":["only one"]})"));
  CHECK(d.prompt == "only one");
  CHECK(bad_param([] { openai::parse_completion(body(R"({"model":"m","prompt":["a","b"]})")); }) == "prompt");
  CHECK(bad_param([] { openai::parse_completion(body(R"({"model":"m","prompt":[1,-2]})")); }) == "prompt");
  CHECK(bad_param([] { openai::parse_completion(body(R"({"model":"m","prompt":""})")); }) == "prompt");
  CHECK(bad_param([] { openai::parse_completion(body(R"({"model":"m","prompt":"x","echo":true})")); }) == "echo");
  CHECK(bad_param([] { openai::parse_completion(body(R"({"model":"m","prompt":"x","best_of":3})")); }) == "best_of");
}

TEST_CASE("responses: input forms, instructions, max_output_tokens") {
  auto a = openai::parse_responses(body(R"({"model":"m","input":"hi","instructions":"S","max_output_tokens":5})"));
  REQUIRE(a.messages.size() == 2);
  CHECK(a.messages[0].role == "system");
  CHECK(a.messages[1].content == "hi");
  CHECK(a.sampling.max_tokens == 5);
  auto b = openai::parse_responses(body(R"({"model":"m","input":[{"type":"message","role":"user",
      "content":[{"type":"input_text","text":"a"}]},{"role":"assistant","content":"b"}]})"));
  REQUIRE(b.messages.size() == 2);
  CHECK(b.messages[1].role == "assistant");
  CHECK(bad_param([] { openai::parse_responses(body(R"({"model":"m","input":[{"type":"function_call_output"}]})")); }) ==
        "input[0].type");
  CHECK(bad_param([] { openai::parse_responses(body(R"({"model":"m"})")); }) == "input");
}

TEST_CASE("anthropic: system blocks, content blocks, prefill, stop_sequences") {
  auto r = anthropic::parse_messages(body(R"({"model":"m","max_tokens":8,
      "system":[{"type":"text","text":"A"},{"type":"text","text":"B","cache_control":{"type":"ephemeral"}}],
      "messages":[{"role":"user","content":[{"type":"text","text":"q"}]},{"role":"assistant","content":"pre"}],
      "stop_sequences":["\n\n"],"temperature":0.5,"top_k":3,"metadata":{"user_id":"u"}})"));
  REQUIRE(r.messages.size() == 2);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[0].content == "AB");
  CHECK(r.messages[1].content == "q");
  CHECK(r.assistant_prefill == "pre");
  CHECK(r.sampling.max_tokens == 8);
  CHECK(r.sampling.top_k == 3);
  CHECK(r.stop == std::vector<std::string>{"\n\n"});
  CHECK_NOTHROW(anthropic::parse_messages(body(R"({"model":"m","messages":[{"role":"user","content":"q"}]})"), true));
}

TEST_CASE("anthropic: bad fields are named") {
  CHECK(bad_param([] { anthropic::parse_messages(body(R"({"model":"m","messages":[{"role":"user","content":"q"}]})")); }) ==
        "max_tokens");
  CHECK(bad_param([] { anthropic::parse_messages(body(R"({"max_tokens":1,"messages":[]})")); }) == "model");
  CHECK(bad_param([] { anthropic::parse_messages(body(R"({"model":"m","max_tokens":1,"messages":[]})")); }) == "messages");
  CHECK(bad_param([] {
          anthropic::parse_messages(body(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image"}]}]})"));
        }) == "messages[0].content[0].type");
  CHECK(bad_param([] {
          anthropic::parse_messages(body(R"({"model":"m","max_tokens":1,"system":7,"messages":[{"role":"user","content":"q"}]})"));
        }) == "system");
  CHECK(bad_param([] {
          anthropic::parse_messages(body(R"({"model":"m","max_tokens":1,"stop_sequences":[1],"messages":[{"role":"user","content":"q"}]})"));
        }) == "stop_sequences[0]");
}
