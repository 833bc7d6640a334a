// Response shapes: the SSE event sequences and bodies the official SDKs accept
// (docs/spec/api.md §1.4, §2.2, §2.7), and error bodies in each API's format.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "serve/anthropic_api.hpp"
#include "serve/openai_api.hpp"
#include "strata/json/parse.hpp"

using namespace strata::serve;
namespace bjson = boost::json;

namespace {

struct sse_event {
  std::string name;  // "" when the event has no `event:` line
  std::string data;
};

// Splits an SSE byte stream into events; every event must end with a blank line.
std::vector<sse_event> parse_sse(const std::string& s) {
  std::vector<sse_event> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t end = s.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    sse_event e;
    std::size_t line = pos;
    while (line < end) {
      const std::size_t nl = std::min(s.find('\n', line), end);
      const std::string l = s.substr(line, nl - line);
      if (l.rfind("event: ", 0) == 0) e.name = l.substr(7);
      else if (l.rfind("data: ", 0) == 0) e.data = l.substr(6);
      line = nl + 1;
    }
    out.push_back(e);
    pos = end + 2;
  }
  return out;
}

generation_result result(strata::rt::finish_reason r) {
  generation_result g;
  choice_result c;
  c.text = "Hello there";
  c.reason = r;
  c.completion_tokens = 3;
  g.choices.push_back(c);
  g.prompt_tokens = 12;
  g.cached_tokens = 4;
  return g;
}

const response_meta meta{"id_1", "local", 1700000000, 12};

parsed_request request(bool include_usage = false, std::int32_t top_logprobs = -1) {
  parsed_request pr;
  pr.include_usage = include_usage;
  pr.top_logprobs = top_logprobs;
  return pr;
}

const strata::serve::tool_call weather{"call_1", "get_weather", R"({"city": "Paris"})"};

bjson::object data(const sse_event& e) { return bjson::parse(e.data).as_object(); }
const bjson::object& choice0(const bjson::object& chunk) { return chunk.at("choices").as_array()[0].as_object(); }

}  // namespace

TEST_CASE("openai chat stream: role first, finish_reason, usage chunk, [DONE]") {
  auto f = openai::chat_format(meta, request(true));
  std::string out;
  f->begin(out);
  f->text(0, "Hel", {}, out);
  f->text(0, "", {}, out);  // empty deltas are not sent
  f->text(0, "lo", {}, out);
  const auto r = result(strata::rt::finish_reason::max_tokens);
  f->choice_end(0, r.choices[0], out);
  f->end(r, out);
  const auto ev = parse_sse(out);
  REQUIRE(ev.size() == 6);
  for (const auto& e : ev) CHECK(e.name.empty());
  const auto first = data(ev[0]);
  CHECK(first.at("object") == "chat.completion.chunk");
  CHECK(choice0(first).at("delta").at("role") == "assistant");
  CHECK(choice0(data(ev[2])).at("delta").at("content") == "lo");
  CHECK(choice0(data(ev[2])).at("logprobs").is_null());
  CHECK(choice0(data(ev[3])).at("finish_reason") == "length");
  const auto usage = data(ev[4]);
  CHECK(usage.at("choices").as_array().empty());
  CHECK(usage.at("usage").at("total_tokens") == 15);
  CHECK(usage.at("usage").at("prompt_tokens_details").at("cached_tokens") == 4);
  CHECK(ev[5].data == "[DONE]");
  for (std::size_t i = 0; i < 5; ++i) CHECK(data(ev[i]).at("id") == "id_1");
}

TEST_CASE("openai chat stream: tool call deltas (id and name first, arguments in pieces), finish tool_calls") {
  auto f = openai::chat_format(meta, request());
  std::string out;
  f->begin(out);
  f->tool_call_begin(0, 0, weather, out);
  f->tool_call_arguments(0, 0, R"({"city": "Pa)", out);
  f->tool_call_arguments(0, 0, R"(ris"})", out);
  f->tool_call_end(0, 0, weather, out);
  auto r = result(strata::rt::finish_reason::eog);
  r.choices[0].text.clear();
  r.choices[0].tool_calls = {weather};
  f->choice_end(0, r.choices[0], out);
  f->end(r, out);
  const auto ev = parse_sse(out);
  REQUIRE(ev.size() == 6);
  const auto tc0 = choice0(data(ev[1])).at("delta").at("tool_calls").as_array()[0].as_object();
  CHECK(tc0.at("index") == 0);
  CHECK(tc0.at("id") == "call_1");
  CHECK(tc0.at("type") == "function");
  CHECK(tc0.at("function").at("name") == "get_weather");
  CHECK(tc0.at("function").at("arguments") == "");
  std::string args;
  for (std::size_t i = 2; i <= 3; ++i) {
    const auto tc = choice0(data(ev[i])).at("delta").at("tool_calls").as_array()[0].as_object();
    CHECK(!tc.contains("id"));  // the SDK rejects a changing id; later pieces carry none
    args += tc.at("function").at("arguments").as_string();
  }
  CHECK(args == weather.arguments);
  CHECK(choice0(data(ev[4])).at("finish_reason") == "tool_calls");

  const auto b = bjson::parse(f->body(r)).as_object();
  const auto& msg = b.at("choices").as_array()[0].at("message").as_object();
  CHECK(msg.at("content").is_null());
  CHECK(msg.at("tool_calls").as_array()[0].at("function").at("arguments") .as_string() == weather.arguments);
  CHECK(b.at("choices").as_array()[0].at("finish_reason") == "tool_calls");
}

TEST_CASE("openai chat: n choices interleave by index, logprobs in chunks and bodies") {
  auto f = openai::chat_format({"id_2", "local", 1, 5, 2}, request(false, 2));
  std::string out;
  f->begin(out);
  const std::vector<logprob_entry> lp = {{"Hi", -0.5f, {{"Hi", -0.5f}, {"\xc3", -1.5f}}}};
  f->text(1, "Hi", lp, out);
  f->text(0, "", lp, out);  // a token with no text yet still reports its logprobs
  auto r = result(strata::rt::finish_reason::eog);
  r.choices.push_back(r.choices[0]);
  r.choices[1].logprobs = lp;
  f->choice_end(1, r.choices[1], out);
  f->choice_end(0, r.choices[0], out);
  f->end(r, out);
  const auto ev = parse_sse(out);
  REQUIRE(ev.size() == 7);
  CHECK(choice0(data(ev[0])).at("index") == 0);
  CHECK(choice0(data(ev[1])).at("index") == 1);  // every choice gets its role chunk first
  CHECK(choice0(data(ev[1])).at("delta").at("role") == "assistant");
  const auto c = choice0(data(ev[2]));
  CHECK(c.at("index") == 1);
  const auto& entry = c.at("logprobs").at("content").as_array()[0].as_object();
  CHECK(entry.at("token") == "Hi");
  CHECK(entry.at("logprob").as_double() == doctest::Approx(-0.5));
  CHECK(entry.at("bytes") == bjson::array{72, 105});
  const auto& alt = entry.at("top_logprobs").as_array()[1].as_object();
  CHECK(alt.at("token") == "\xef\xbf\xbd");  // a partial UTF-8 byte as U+FFFD; bytes keep it exact
  CHECK(alt.at("bytes") == bjson::array{195});
  CHECK(choice0(data(ev[3])).at("delta").at("content") == "");
  CHECK(ev[6].data == "[DONE]");
  const auto b = bjson::parse(f->body(r)).as_object();
  REQUIRE(b.at("choices").as_array().size() == 2);
  CHECK(b.at("choices").as_array()[1].at("index") == 1);
  CHECK(b.at("choices").as_array()[1].at("logprobs").at("content").as_array().size() == 1);
  CHECK(b.at("choices").as_array()[0].at("logprobs").at("content").as_array().empty());
  CHECK(b.at("usage").at("completion_tokens") == 6);  // summed over choices; the prompt once
  CHECK(b.at("usage").at("prompt_tokens") == 12);
}

TEST_CASE("openai chat body and finish reasons") {
  auto f = openai::chat_format(meta, request());
  const auto b = bjson::parse(f->body(result(strata::rt::finish_reason::eog))).as_object();
  CHECK(b.at("object") == "chat.completion");
  const auto& choice = b.at("choices").as_array()[0];
  CHECK(choice.at("message").at("content") == "Hello there");
  CHECK(!choice.at("message").as_object().contains("tool_calls"));
  CHECK(choice.at("logprobs").is_null());
  CHECK(choice.at("finish_reason") == "stop");
  CHECK(bjson::parse(f->body(result(strata::rt::finish_reason::context_full))).at("choices").as_array()[0].at("finish_reason") ==
        "length");
}

TEST_CASE("legacy completions: text_completion chunks per choice, the legacy logprobs object") {
  auto f = openai::completion_format({"cmpl-1", "local", 1, 3, 2}, request(false, 1));
  std::string out;
  f->begin(out);
  const std::vector<logprob_entry> lp = {{"Once", -1.0f, {{"Once", -1.0f}}}, {" upon", -2.0f, {{" upon", -2.0f}}}};
  f->text(1, "Once upon", lp, out);
  const auto ev = parse_sse(out);
  REQUIRE(ev.size() == 1);
  const auto c = choice0(data(ev[0]));
  CHECK(c.at("index") == 1);
  CHECK(c.at("text") == "Once upon");
  CHECK(c.at("logprobs").at("tokens") == bjson::array{"Once", " upon"});
  CHECK(c.at("logprobs").at("text_offset") == bjson::array{0, 4});
  CHECK(c.at("logprobs").at("top_logprobs").as_array()[1].at(" upon").as_double() == doctest::Approx(-2.0));
  auto r = result(strata::rt::finish_reason::max_tokens);
  r.choices.push_back(r.choices[0]);
  const auto b = bjson::parse(f->body(r)).as_object();
  CHECK(b.at("object") == "text_completion");
  CHECK(b.at("choices").as_array().size() == 2);
  CHECK(b.at("choices").as_array()[1].at("finish_reason") == "length");
  CHECK(b.at("choices").as_array()[0].at("logprobs").at("tokens").as_array().empty());
}

TEST_CASE("anthropic stream: exact event sequence with event: lines, ping, usage in message_delta") {
  auto f = anthropic::messages_format(meta, request());
  std::string out;
  f->begin(out);
  f->text(0, "Hel", {}, out);
  f->ping(out);
  f->text(0, "lo", {}, out);
  auto r = result(strata::rt::finish_reason::stop_string);
  r.choices[0].stop_sequence = "\n\n";
  f->choice_end(0, r.choices[0], out);
  f->end(r, out);
  const auto ev = parse_sse(out);
  std::vector<std::string> names;
  for (const auto& e : ev) {
    names.push_back(e.name);
    CHECK(bjson::parse(e.data).at("type").as_string() == e.name);  // every event is named as its type
  }
  CHECK(names == std::vector<std::string>{"message_start", "content_block_start", "ping", "content_block_delta", "ping",
                                          "content_block_delta", "content_block_stop", "message_delta", "message_stop"});
  const auto start = bjson::parse(ev[0].data).at("message").as_object();
  CHECK(start.at("id") == "id_1");
  CHECK(start.at("content").as_array().empty());
  CHECK(start.at("stop_reason").is_null());
  CHECK(start.at("usage").at("input_tokens") == 12);
  const auto delta = bjson::parse(ev[7].data).as_object();
  CHECK(delta.at("delta").at("stop_reason") == "stop_sequence");
  CHECK(delta.at("delta").at("stop_sequence") == "\n\n");
  CHECK(delta.at("usage").at("output_tokens") == 3);
}

TEST_CASE("anthropic stream: tool_use blocks with input_json_delta, stop_reason tool_use") {
  for (const bool forced : {false, true}) {
    CAPTURE(forced);
    parsed_request pr;
    pr.tools.push_back(strata::json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
    pr.tool_choice.mode = forced ? strata::chat::tool_choice_mode::required : strata::chat::tool_choice_mode::automatic;
    auto f = anthropic::messages_format(meta, pr);
    std::string out;
    f->begin(out);
    if (!forced) f->text(0, "Checking.", {}, out);
    f->tool_call_begin(0, 0, weather, out);
    f->tool_call_arguments(0, 0, R"({"city": "Pa)", out);
    f->tool_call_arguments(0, 0, R"(ris"})", out);
    f->tool_call_end(0, 0, weather, out);
    auto r = result(strata::rt::finish_reason::eog);
    r.choices[0].text = forced ? "" : "Checking.";
    r.choices[0].tool_calls = {weather};
    f->choice_end(0, r.choices[0], out);
    f->end(r, out);
    const auto ev = parse_sse(out);
    std::vector<std::string> names;
    for (const auto& e : ev) names.push_back(e.name);
    const std::vector<std::string> tool_part = {"content_block_start", "content_block_delta", "content_block_delta",
                                                "content_block_stop", "message_delta", "message_stop"};
    std::vector<std::string> want = forced ? std::vector<std::string>{"message_start", "ping"}
                                           : std::vector<std::string>{"message_start", "content_block_start", "ping",
                                                                      "content_block_delta", "content_block_stop"};
    want.insert(want.end(), tool_part.begin(), tool_part.end());
    CHECK(names == want);
    const std::size_t at = want.size() - tool_part.size();
    const auto start = data(ev[at]);
    CHECK(start.at("index") == (forced ? 0 : 1));
    CHECK(start.at("content_block").at("type") == "tool_use");
    CHECK(start.at("content_block").at("id") == "call_1");
    CHECK(start.at("content_block").at("input").as_object().empty());
    std::string partial;
    for (std::size_t i = at + 1; i <= at + 2; ++i) {
      CHECK(data(ev[i]).at("delta").at("type") == "input_json_delta");
      partial += data(ev[i]).at("delta").at("partial_json").as_string();
    }
    CHECK(bjson::parse(partial) == bjson::parse(weather.arguments));
    CHECK(data(ev[at + 4]).at("delta").at("stop_reason") == "tool_use");

    const auto b = bjson::parse(f->body(r)).as_object();
    const auto& content = b.at("content").as_array();
    REQUIRE(content.size() == (forced ? 1u : 2u));
    CHECK(content.back().at("type") == "tool_use");
    CHECK(content.back().at("input").at("city") == "Paris");
    CHECK(b.at("stop_reason") == "tool_use");
  }
}

TEST_CASE("anthropic body and stop reasons") {
  auto f = anthropic::messages_format(meta, request());
  const auto b = bjson::parse(f->body(result(strata::rt::finish_reason::max_tokens))).as_object();
  CHECK(b.at("type") == "message");
  CHECK(b.at("role") == "assistant");
  CHECK(b.at("content").as_array()[0].at("text") == "Hello there");
  CHECK(b.at("stop_reason") == "max_tokens");
  CHECK(b.at("stop_sequence").is_null());
  CHECK(b.at("usage").at("input_tokens") == 8);  // cache hits are reported apart
  CHECK(b.at("usage").at("cache_read_input_tokens") == 4);
  CHECK(std::string(anthropic::stop_reason_name(result(strata::rt::finish_reason::eog).choices[0])) == "end_turn");
  auto cut = result(strata::rt::finish_reason::max_tokens);
  cut.choices[0].tool_calls = {{"toolu_2", "f", R"({"a": )"}};  // cut short: input becomes {}
  const auto c = bjson::parse(f->body(cut)).as_object();
  CHECK(c.at("content").as_array()[1].at("input").as_object().empty());
}

TEST_CASE("responses stream: event order and sequence numbers") {
  parsed_request pr;
  pr.sampling.max_tokens = 8;
  auto f = openai::responses_format({"resp_abc", "local", 1, 3}, pr);
  std::string out;
  f->begin(out);
  f->text(0, "Hi", {}, out);
  const auto r = result(strata::rt::finish_reason::eog);
  f->choice_end(0, r.choices[0], out);
  f->end(r, out);
  const auto ev = parse_sse(out);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    names.push_back(ev[i].name);
    const auto o = bjson::parse(ev[i].data).as_object();
    CHECK(o.at("type").as_string() == ev[i].name);
    CHECK(o.at("sequence_number") == i);
  }
  CHECK(names == std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                          "response.content_part.added", "response.output_text.delta",
                                          "response.output_text.done", "response.content_part.done",
                                          "response.output_item.done", "response.completed"});
  const auto done = bjson::parse(ev.back().data).at("response").as_object();
  CHECK(done.at("status") == "completed");
  CHECK(done.at("output").as_array()[0].at("content").as_array()[0].at("text") == "Hi");
  CHECK(done.at("usage").at("output_tokens") == 3);
}

TEST_CASE("responses stream: function_call items with argument deltas, no empty message before them") {
  parsed_request pr;
  pr.tools.push_back(strata::json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  auto f = openai::responses_format({"resp_abc", "local", 1, 3}, pr);
  std::string out;
  f->begin(out);
  f->tool_call_begin(0, 0, weather, out);
  f->tool_call_arguments(0, 0, R"({"city": )", out);
  f->tool_call_arguments(0, 0, R"("Paris"})", out);
  f->tool_call_end(0, 0, weather, out);
  auto r = result(strata::rt::finish_reason::eog);
  r.choices[0].text.clear();
  r.choices[0].tool_calls = {weather};
  f->choice_end(0, r.choices[0], out);
  f->end(r, out);
  const auto ev = parse_sse(out);
  std::vector<std::string> names;
  for (const auto& e : ev) names.push_back(e.name);
  CHECK(names == std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                          "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                                          "response.function_call_arguments.done", "response.output_item.done",
                                          "response.completed"});
  const auto added = data(ev[2]).at("item").as_object();
  CHECK(added.at("type") == "function_call");
  CHECK(added.at("call_id") == "call_1");
  CHECK(added.at("name") == "get_weather");
  CHECK(data(ev[5]).at("arguments") .as_string() == weather.arguments);
  const auto done = data(ev.back()).at("response").as_object();
  REQUIRE(done.at("output").as_array().size() == 1);
  CHECK(done.at("output").as_array()[0].at("type") == "function_call");
  CHECK(done.at("output").as_array()[0].at("arguments") .as_string() == weather.arguments);
  const auto b = bjson::parse(f->body(r)).as_object();
  REQUIRE(b.at("output").as_array().size() == 1);
  CHECK(b.at("output").as_array()[0].at("status") == "completed");
}

TEST_CASE("responses logprobs: held-back tokens ride the next delta, a call's tokens are dropped, bodies cover the text") {
  auto pr = request(false, 1);
  pr.tools.push_back(strata::json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  auto f = openai::responses_format({"resp_abc", "local", 1, 3}, pr);
  const std::vector<logprob_entry> h = {{"H", -0.1f, {{"H", -0.1f}}}}, i = {{"i", -0.2f, {{"i", -0.2f}}}},
                                   call = {{"<tool_call>", -0.3f, {{"<tool_call>", -0.3f}}}};
  std::string out;
  f->begin(out);
  f->text(0, "", h, out);  // held back (it might open a call)
  f->text(0, "Hi", i, out);
  f->tool_call_begin(0, 0, weather, out);
  f->text(0, "", call, out);
  f->tool_call_end(0, 0, weather, out);
  auto r = result(strata::rt::finish_reason::eog);
  r.choices[0].text = "Hi";
  r.choices[0].tool_calls = {weather};
  r.choices[0].logprobs = {h[0], i[0], call[0]};
  f->choice_end(0, r.choices[0], out);
  f->end(r, out);
  const auto ev = parse_sse(out);
  const auto tokens = [](const bjson::value& lp) {
    std::vector<std::string> t;
    for (const auto& e : lp.as_array()) t.emplace_back(e.at("token").as_string());
    return t;
  };
  const std::vector<std::string> hi = {"H", "i"};
  bool saw_delta = false, saw_done = false;
  for (const auto& e : ev) {
    if (e.name == "response.output_text.delta") {
      CHECK(tokens(data(e).at("logprobs")) == hi);
      CHECK(data(e).at("logprobs").as_array()[0].at("top_logprobs").as_array().size() == 1);
      saw_delta = true;
    }
    if (e.name == "response.output_text.done") {
      CHECK(tokens(data(e).at("logprobs")) == hi);
      saw_done = true;
    }
  }
  CHECK((saw_delta && saw_done));
  const auto done = data(ev.back()).at("response").as_object();
  CHECK(tokens(done.at("output").as_array()[0].at("content").as_array()[0].at("logprobs")) == hi);
  const auto b = bjson::parse(f->body(r)).as_object();
  CHECK(tokens(b.at("output").as_array()[0].at("content").as_array()[0].at("logprobs")) == hi);
}

TEST_CASE("responses stream: text after a function call is a new message item with its own id") {
  parsed_request pr;
  pr.tools.push_back(strata::json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  auto f = openai::responses_format({"resp_abc", "local", 1, 3}, pr);
  std::string out;
  f->begin(out);
  f->text(0, "Let me see.", {}, out);
  f->tool_call_begin(0, 0, weather, out);
  f->tool_call_end(0, 0, weather, out);
  f->text(0, "Done.", {}, out);
  auto r = result(strata::rt::finish_reason::eog);
  f->choice_end(0, r.choices[0], out);
  f->end(r, out);
  const auto output = data(parse_sse(out).back()).at("response").at("output").as_array();
  REQUIRE(output.size() == 3);
  CHECK(output[0].at("id") == "msg_abc");
  CHECK(output[1].at("type") == "function_call");
  CHECK(output[2].at("id") == "msg_abc_1");
  CHECK(output[2].at("content").as_array()[0].at("text") == "Done.");
}

TEST_CASE("errors: OpenAI and Anthropic bodies, in-band events") {
  const api_error e = bad_request("'top_p' must be in (0, 1]", "top_p");
  const auto o = bjson::parse(error_body(api_flavor::openai, e, "req_1")).as_object();
  CHECK(o.at("error").at("type") == "invalid_request_error");
  CHECK(o.at("error").at("param") == "top_p");
  CHECK(o.at("error").at("message") == "'top_p' must be in (0, 1]");
  CHECK(o.at("error").at("code").is_null());
  // An unknown model has OpenAI's code; an unknown route does not.
  const api_error model(404, "not_found_error", "model 'x' does not exist", "model");
  CHECK(bjson::parse(error_body(api_flavor::openai, model, "r")).at("error").at("code") == "model_not_found");
  const api_error route(404, "not_found_error", "unknown route: GET /x");
  CHECK(bjson::parse(error_body(api_flavor::openai, route, "r")).at("error").at("code").is_null());
  const auto a = bjson::parse(error_body(api_flavor::anthropic, api_error(429, "rate_limit_error", "busy"), "req_2")).as_object();
  CHECK(a.at("type") == "error");
  CHECK(a.at("error").at("type") == "rate_limit_error");
  CHECK(a.at("request_id") == "req_2");
  CHECK(std::string(anthropic_type(413)) == "request_too_large");
  CHECK(std::string(anthropic_type(503)) == "overloaded_error");

  const auto ae = parse_sse(error_event(api_flavor::anthropic, api_error(500, "server_error", "boom")));
  REQUIRE(ae.size() == 1);
  CHECK(ae[0].name == "error");
  CHECK(bjson::parse(ae[0].data).at("error").at("type") == "api_error");
  const auto oe = parse_sse(error_event(api_flavor::openai, api_error(500, "server_error", "boom")));
  REQUIRE(oe.size() == 1);
  CHECK(oe[0].name.empty());
  CHECK(bjson::parse(oe[0].data).at("error").at("message") == "boom");
}

TEST_CASE("keepalive pings are events clients ignore") {
  std::string out;
  openai::chat_format(meta, request())->ping(out);
  CHECK(out == ": keepalive\n\n");
}
