// Request parsing of the OpenAI and Anthropic routes: accepted shapes, and every bad field
// named in a 400 (runtime/serve/openai_api.hpp, anthropic_api.hpp, request.hpp).
#include <doctest/doctest.h>

#include <string>

#include "serve/anthropic_api.hpp"
#include "serve/openai_api.hpp"
#include "support/error_of.hpp"

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

TEST_CASE("chat: response_format, n, logprobs") {
  const auto a = openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_object"},"n":3,"logprobs":true,"top_logprobs":4})"));
  CHECK(a.messages.size() == 1);  // structure comes from a grammar, not an injected instruction
  CHECK(a.format == output_format::json_object);
  CHECK(a.forced_structure());
  CHECK(a.n == 3);
  CHECK(a.top_logprobs == 4);
  const auto b = openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,"schema":{"type":"object"}}}})"));
  CHECK(b.format == output_format::json_schema);
  CHECK(b.schema == R"({"type":"object"})");
  CHECK(b.schema_name == "n");
  CHECK(b.schema_param == "response_format.json_schema.schema");
  const auto c = openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true})"));
  CHECK(c.top_logprobs == 0);
  CHECK(openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user","content":"x"}]})")).top_logprobs == -1);
}

TEST_CASE("chat: tools, tool_choice, assistant tool_calls and tool results") {
  const auto r = openai::parse_chat(body(R"({"model":"m","messages":[
      {"role":"user","content":"weather?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"sunny"}],
    "tools":[{"type":"function","function":{"name":"get_weather","description":"d",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],
    "tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false})"));
  REQUIRE(r.messages.size() == 3);
  REQUIRE(r.messages[1].tool_calls.size() == 1);
  CHECK(r.messages[1].tool_calls[0].id == "call_1");
  CHECK(r.messages[1].tool_calls[0].name == "get_weather");
  CHECK(r.messages[1].tool_calls[0].arguments == R"({"city":"Paris"})");
  CHECK(r.messages[2].role == "tool");
  CHECK(r.messages[2].tool_call_id == "call_1");
  CHECK(r.messages[2].content == "sunny");
  REQUIRE(r.tools.size() == 1);
  const auto& fn = *r.tools[0].find("function");
  CHECK(fn.find("name")->as_string() == "get_weather");
  CHECK(fn.find("parameters")->find("required") != nullptr);
  CHECK(fn.find("description")->as_string() == "d");
  CHECK(r.tool_choice.mode == strata::chat::tool_choice_mode::function);
  CHECK(r.tool_choice.function == "get_weather");
  CHECK(!r.parallel_tool_calls);
  CHECK(r.forced_structure());
  const auto none = openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"})"));
  CHECK(!none.may_call_tools());
  CHECK(none.tools[0].find("function")->find("parameters")->find("type")->as_string() == "object");  // none: {}
}

TEST_CASE("tools: bad definitions and choices are named") {
  const auto chat = [](const std::string& extra) {
    return [extra] { openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user","content":"x"}])" + extra + "}")); };
  };
  CHECK(bad_param(chat(R"(,"tools":[{"type":"function"}])")) == "tools[0].function");
  CHECK(bad_param(chat(R"(,"tools":[{"type":"retrieval"}])")) == "tools[0].type");
  CHECK(bad_param(chat(R"(,"tools":[{"type":"function","function":{"name":"has space"}}])")) == "tools[0].function.name");
  CHECK(bad_param(chat(R"(,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}])")) ==
        "tools[0].function.parameters");
  CHECK(bad_param(chat(R"(,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])")) ==
        "tools[1]");
  CHECK(bad_param(chat(R"(,"tool_choice":"required")")) == "tool_choice");
  CHECK(bad_param(chat(R"(,"tool_choice":"sometimes","tools":[{"type":"function","function":{"name":"f"}}])")) == "tool_choice");
  CHECK(bad_param(chat(R"(,"tool_choice":{"type":"function","function":{"name":"g"}},"tools":[{"type":"function","function":{"name":"f"}}])")) ==
        "tool_choice");
  CHECK(bad_param([] {
          openai::parse_chat(body(R"({"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]})"));
        }) == "messages[0].tool_calls");
  CHECK(bad_param(chat(R"(,"n":17)")) == "n");
  CHECK(bad_param(chat(R"(,"top_logprobs":3)")) == "top_logprobs");
  CHECK(bad_param(chat(R"(,"logprobs":true,"top_logprobs":21)")) == "top_logprobs");
  CHECK(bad_param(chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}})")) ==
        "response_format.json_schema.schema");
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
  CHECK(bad_param(chat(R"(,"n":0)")) == "n");
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
  CHECK(bad_param([] { openai::parse_completion(body(R"({"model":"m","prompt":"x","logprobs":6})")); }) == "logprobs");
  const auto e = openai::parse_completion(body(R"({"model":"m","prompt":"x","logprobs":2,"n":2,"best_of":2})"));
  CHECK(e.top_logprobs == 2);
  CHECK(e.n == 2);
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
        "input[0].call_id");
  CHECK(bad_param([] { openai::parse_responses(body(R"({"model":"m","input":[{"type":"web_search_call"}]})")); }) ==
        "input[0].type");
  // Logprobs: asked for through include, top_logprobs, or both; other includables change nothing.
  CHECK(a.top_logprobs == -1);
  CHECK(openai::parse_responses(body(R"({"model":"m","input":"x","include":["message.output_text.logprobs"]})")).top_logprobs == 0);
  CHECK(openai::parse_responses(body(R"({"model":"m","input":"x","include":["message.output_text.logprobs"],"top_logprobs":3})")).top_logprobs == 3);
  CHECK(openai::parse_responses(body(R"({"model":"m","input":"x","top_logprobs":2})")).top_logprobs == 2);
  CHECK(openai::parse_responses(body(R"({"model":"m","input":"x","include":["reasoning.encrypted_content"]})")).top_logprobs == -1);
  CHECK(bad_param([] { openai::parse_responses(body(R"({"model":"m","input":"x","top_logprobs":21})")); }) == "top_logprobs");
  CHECK(bad_param([] { openai::parse_responses(body(R"({"model":"m","input":"x","include":[3]})")); }) == "include[0]");
  CHECK(bad_param([] { openai::parse_responses(body(R"({"model":"m","input":"x","include":"x"})")); }) == "include");
  // A tool round trip: the call and its output come back as items; tools are flat.
  auto c = openai::parse_responses(body(R"({"model":"m","input":[{"role":"user","content":"w?"},
      {"type":"function_call","call_id":"call_9","name":"f","arguments":"{}"},
      {"type":"function_call","call_id":"call_10","name":"f","arguments":"{\"a\":1}"},
      {"type":"function_call_output","call_id":"call_9","output":"ok"}],
    "tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"required",
    "text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"}}}})"));
  REQUIRE(c.messages.size() == 3);
  CHECK(c.messages[1].role == "assistant");
  REQUIRE(c.messages[1].tool_calls.size() == 2);
  CHECK(c.messages[1].tool_calls[1].arguments == R"({"a":1})");
  CHECK(c.messages[2].role == "tool");
  CHECK(c.messages[2].tool_call_id == "call_9");
  CHECK(c.tools.at(0).find("function")->find("name")->as_string() == "f");
  CHECK(c.tool_choice.mode == strata::chat::tool_choice_mode::required);
  CHECK(c.format == output_format::json_schema);
  CHECK(c.schema_param == "text.format.schema");
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

TEST_CASE("anthropic: tools, tool_choice, tool_use and tool_result blocks") {
  auto r = anthropic::parse_messages(body(R"({"model":"m","max_tokens":8,
      "tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
      "tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true},
      "messages":[{"role":"user","content":"weather?"},
        {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":""},{"type":"text","text":"Let me see."},
          {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"}]},
          {"type":"text","text":"and tomorrow?"}]}]})"));
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages[1].role == "assistant");
  CHECK(r.messages[1].content == "Let me see.");
  CHECK(r.messages[1].reasoning_content == "hmm");
  REQUIRE(r.messages[1].tool_calls.size() == 1);
  CHECK(r.messages[1].tool_calls[0].arguments == R"({"city":"Paris"})");
  CHECK(r.messages[2].role == "tool");
  CHECK(r.messages[2].tool_call_id == "toolu_1");
  CHECK(r.messages[2].content == "sunny");
  CHECK(r.messages[3].role == "user");
  CHECK(r.messages[3].content == "and tomorrow?");
  CHECK(r.tool_choice.mode == strata::chat::tool_choice_mode::function);
  CHECK(!r.parallel_tool_calls);
  CHECK(r.tools[0].find("function")->find("parameters") != nullptr);  // printed in the OpenAI shape
  const auto any = anthropic::parse_messages(body(R"({"model":"m","max_tokens":8,"tools":[{"name":"f","input_schema":{"type":"object"}}],
      "tool_choice":{"type":"any"},"messages":[{"role":"user","content":"q"}]})"));
  CHECK(any.tool_choice.mode == strata::chat::tool_choice_mode::required);
  const auto msg = [](const std::string& extra) {
    return [extra] { anthropic::parse_messages(body(R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}])" + extra + "}")); };
  };
  CHECK(bad_param(msg(R"(,"tools":[{"type":"web_search_20250305","name":"web_search"}])")) == "tools[0].type");
  CHECK(bad_param(msg(R"(,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool"})")) == "tool_choice.name");
  CHECK(bad_param(msg(R"(,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"g"})")) == "tool_choice.name");
  CHECK(bad_param(msg(R"(,"tool_choice":{"type":"any"})")) == "tool_choice");
  CHECK(bad_param(msg(R"(,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"maybe"})")) == "tool_choice.type");
  CHECK(bad_param([] {
          anthropic::parse_messages(body(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},
              {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]})"));
        }) == "messages");
}

TEST_CASE("anthropic: structured outputs (output_config.format, output_format)") {
  const auto msg = [](const std::string& extra) {
    return anthropic::parse_messages(body(R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}])" + extra + "}"));
  };
  CHECK(msg("").format == output_format::text);
  const auto a = msg(R"(,"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}})");
  CHECK(a.format == output_format::json_schema);
  CHECK(a.schema == R"({"type":"object"})");
  CHECK(a.schema_param == "output_config.format.schema");
  const auto b = msg(R"(,"output_format":{"type":"json_schema","schema":{"type":"array"}})");
  CHECK(b.schema == R"({"type":"array"})");
  CHECK(b.schema_param == "output_format.schema");
  CHECK(msg(R"(,"output_config":{"effort":"low"})").format == output_format::text);
  CHECK(bad_param([&] { msg(R"(,"output_config":{"format":{"type":"json_object"}})"); }) == "output_config.format.type");
  CHECK(bad_param([&] { msg(R"(,"output_format":{"type":"json_schema"})"); }) == "output_format.schema");
  CHECK(bad_param([&] { msg(R"(,"output_format":{"type":"json_schema","schema":"x"})"); }) == "output_format.schema");
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

// The fields the APIs share are read by one parser from a per-API table (request_fields.cpp):
// each API's names, defaults and limits, and messages that name the field and the limit.
TEST_CASE("shared fields: each API's names, defaults and limits") {
  using strata::test::error_of;
  const std::string chat = R"({"model":"m","messages":[{"role":"user","content":"x"}])";
  const std::string cmpl = R"({"model":"m","prompt":"x")";
  const std::string resp = R"({"model":"m","input":"x")";
  const std::string anth = R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}])";
  const auto parse_chat = [](const std::string& s) { return openai::parse_chat(body(s + "}")); };
  const auto parse_cmpl = [](const std::string& s) { return openai::parse_completion(body(s + "}")); };
  const auto parse_resp = [](const std::string& s) { return openai::parse_responses(body(s + "}")); };
  const auto parse_anth = [](const std::string& s) { return anthropic::parse_messages(body(s + "}")); };

  CHECK(error_of([] { openai::parse_responses(body(R"({"input":"x"})")); }) == "'model' is required");
  CHECK(error_of([] { anthropic::parse_messages(body(R"({"max_tokens":1})")); }) == "model: Field required");
  // Max tokens: each API's key and default; other APIs' keys are not read.
  CHECK(parse_chat(chat + R"(,"max_tokens":3)").sampling.max_tokens == 3);
  CHECK(parse_cmpl(cmpl).sampling.max_tokens == 16);
  CHECK(parse_resp(resp + R"(,"max_tokens":3)").sampling.max_tokens == -1);
  CHECK(parse_anth(anth).sampling.max_tokens == 4);
  CHECK(error_of([&] { parse_resp(resp + R"(,"max_output_tokens":-2)"); }) ==
        "'max_output_tokens' must be a non-negative integer");
  // Stop strings: "stop" in OpenAI chat and completions, "stop_sequences" in Anthropic, none in Responses.
  CHECK(parse_cmpl(cmpl + R"(,"stop":["a","b"])").stop == std::vector<std::string>{"a", "b"});
  CHECK(parse_anth(anth + R"(,"stop":"x")").stop.empty());
  CHECK(parse_resp(resp + R"(,"stop":"x")").stop.empty());
  std::string seventeen = R"(,"stop_sequences":["s")";
  for (int i = 0; i < 16; ++i) seventeen += R"(,"s")";
  CHECK(error_of([&] { parse_anth(anth + seventeen + "]"); }) == "'stop_sequences' has more than 16 entries");
  // n: OpenAI chat and completions only.
  CHECK(parse_cmpl(cmpl + R"(,"n":2)").n == 2);
  CHECK(parse_resp(resp + R"(,"n":2)").n == 1);
  CHECK(parse_anth(anth + R"(,"n":2)").n == 1);
  CHECK(error_of([&] { parse_chat(chat + R"(,"n":17)"); }) == "'n' must be in [1, 16], got 17");
  // Logprobs: 20 alternatives in chat and Responses, 5 in legacy completions, none in Anthropic.
  CHECK(error_of([&] { parse_chat(chat + R"(,"logprobs":true,"top_logprobs":21)"); }) == "'top_logprobs' must be in [0, 20]");
  CHECK(error_of([&] { parse_resp(resp + R"(,"top_logprobs":21)"); }) == "'top_logprobs' must be in [0, 20]");
  CHECK(error_of([&] { parse_cmpl(cmpl + R"(,"logprobs":6)"); }) == "'logprobs' must be in [0, 5]");
  CHECK(error_of([&] { parse_chat(chat + R"(,"top_logprobs":2)"); }) == "'top_logprobs' requires 'logprobs': true");
  CHECK(parse_anth(anth + R"(,"top_logprobs":3)").top_logprobs == -1);
  // Sampling fields are the same everywhere.
  CHECK(error_of([&] { parse_anth(anth + R"(,"frequency_penalty":3)"); }) == "'frequency_penalty' must be in [-2, 2]");
  CHECK(error_of([&] { parse_resp(resp + R"(,"presence_penalty":-2.5)"); }) == "'presence_penalty' must be in [-2, 2]");
  CHECK(error_of([&] { parse_cmpl(cmpl + R"(,"logit_bias":{"7":101})"); }) == "'logit_bias.7' must be in [-100, 100]");
  CHECK(parse_anth(anth + R"(,"seed":9)").sampling.seed == 9);
  // Tools: none in legacy completions (ignored), each API's shape elsewhere.
  CHECK(parse_cmpl(cmpl + R"(,"tools":[{"bad":1}])").tools.empty());
  // Output formats: each API's location and types.
  CHECK(error_of([&] { parse_chat(chat + R"(,"response_format":{"type":"xml"})"); }) ==
        "'response_format.type' must be text, json_object or json_schema, got 'xml'");
  CHECK(error_of([&] { parse_resp(resp + R"(,"text":{"format":{"type":"json_schema"}})"); }) ==
        "'text.format.schema' is required for json_schema");
  CHECK(error_of([&] { parse_anth(anth + R"(,"output_config":{"format":{"type":"json_object"}})"); }) ==
        "'output_config.format.type' must be json_schema, got 'json_object'");
  CHECK(error_of([&] { parse_anth(anth + R"(,"output_format":{})"); }) == "'output_format.type' is required");
  CHECK(parse_cmpl(cmpl + R"(,"response_format":{"type":"xml"})").format == output_format::text);
  CHECK(parse_resp(resp + R"(,"text":{"format":{"type":"json_object"}})").format == output_format::json_object);
}
