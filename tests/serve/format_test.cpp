// Response shapes: the SSE event sequences and bodies the official SDKs accept
// (docs/spec/api.md §1.4, §2.2, §2.7), and error bodies in each API's format.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "serve/anthropic_api.hpp"
#include "serve/openai_api.hpp"

using namespace strata::serve;
namespace json = boost::json;

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
  g.text = "Hello there";
  g.reason = r;
  g.prompt_tokens = 12;
  g.cached_tokens = 4;
  g.completion_tokens = 3;
  return g;
}

const response_meta meta{"id_1", "local", 1700000000, 12};

}  // namespace

TEST_CASE("openai chat stream: role first, finish_reason, usage chunk, [DONE]") {
  auto f = openai::chat_format(meta, true);
  std::string out;
  f->begin(out);
  f->text("Hel", out);
  f->text("", out);  // empty deltas are not sent
  f->text("lo", out);
  f->end(result(strata::rt::finish_reason::max_tokens), out);
  const auto ev = parse_sse(out);
  REQUIRE(ev.size() == 6);
  for (const auto& e : ev) CHECK(e.name.empty());
  const auto first = json::parse(ev[0].data).as_object();
  CHECK(first.at("object") == "chat.completion.chunk");
  CHECK(first.at("choices").as_array()[0].at("delta").at("role") == "assistant");
  CHECK(json::parse(ev[2].data).at("choices").as_array()[0].at("delta").at("content") == "lo");
  CHECK(json::parse(ev[3].data).at("choices").as_array()[0].at("finish_reason") == "length");
  const auto usage = json::parse(ev[4].data).as_object();
  CHECK(usage.at("choices").as_array().empty());
  CHECK(usage.at("usage").at("total_tokens") == 15);
  CHECK(usage.at("usage").at("prompt_tokens_details").at("cached_tokens") == 4);
  CHECK(ev[5].data == "[DONE]");
  for (std::size_t i = 0; i < 5; ++i) CHECK(json::parse(ev[i].data).at("id") == "id_1");
}

TEST_CASE("openai chat body and finish reasons") {
  auto f = openai::chat_format(meta, false);
  const auto b = json::parse(f->body(result(strata::rt::finish_reason::eog))).as_object();
  CHECK(b.at("object") == "chat.completion");
  const auto& choice = b.at("choices").as_array()[0];
  CHECK(choice.at("message").at("content") == "Hello there");
  CHECK(choice.at("finish_reason") == "stop");
  CHECK(std::string(openai::finish_reason_name(strata::rt::finish_reason::stop_string)) == "stop");
  CHECK(std::string(openai::finish_reason_name(strata::rt::finish_reason::context_full)) == "length");
}

TEST_CASE("anthropic stream: exact event sequence with event: lines, ping, usage in message_delta") {
  auto f = anthropic::messages_format(meta);
  std::string out;
  f->begin(out);
  f->text("Hel", out);
  f->ping(out);
  f->text("lo", out);
  auto r = result(strata::rt::finish_reason::stop_string);
  r.stop_sequence = "\n\n";
  f->end(r, out);
  const auto ev = parse_sse(out);
  std::vector<std::string> names;
  for (const auto& e : ev) {
    names.push_back(e.name);
    CHECK(json::parse(e.data).at("type").as_string() == e.name);  // every event is named as its type
  }
  CHECK(names == std::vector<std::string>{"message_start", "content_block_start", "ping", "content_block_delta", "ping",
                                          "content_block_delta", "content_block_stop", "message_delta", "message_stop"});
  const auto start = json::parse(ev[0].data).at("message").as_object();
  CHECK(start.at("id") == "id_1");
  CHECK(start.at("content").as_array().empty());
  CHECK(start.at("stop_reason").is_null());
  CHECK(start.at("usage").at("input_tokens") == 12);
  const auto delta = json::parse(ev[7].data).as_object();
  CHECK(delta.at("delta").at("stop_reason") == "stop_sequence");
  CHECK(delta.at("delta").at("stop_sequence") == "\n\n");
  CHECK(delta.at("usage").at("output_tokens") == 3);
}

TEST_CASE("anthropic body and stop reasons") {
  auto f = anthropic::messages_format(meta);
  const auto b = json::parse(f->body(result(strata::rt::finish_reason::max_tokens))).as_object();
  CHECK(b.at("type") == "message");
  CHECK(b.at("role") == "assistant");
  CHECK(b.at("content").as_array()[0].at("text") == "Hello there");
  CHECK(b.at("stop_reason") == "max_tokens");
  CHECK(b.at("stop_sequence").is_null());
  CHECK(b.at("usage").at("input_tokens") == 8);  // cache hits are reported apart
  CHECK(b.at("usage").at("cache_read_input_tokens") == 4);
  CHECK(std::string(anthropic::stop_reason_name(strata::rt::finish_reason::eog)) == "end_turn");
}

TEST_CASE("responses stream: event order and sequence numbers") {
  parsed_request pr;
  pr.sampling.max_tokens = 8;
  auto f = openai::responses_format({"resp_abc", "local", 1, 3}, pr);
  std::string out;
  f->begin(out);
  f->text("Hi", out);
  f->end(result(strata::rt::finish_reason::eog), out);
  const auto ev = parse_sse(out);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    names.push_back(ev[i].name);
    const auto o = json::parse(ev[i].data).as_object();
    CHECK(o.at("type").as_string() == ev[i].name);
    CHECK(o.at("sequence_number") == i);
  }
  CHECK(names == std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                          "response.content_part.added", "response.output_text.delta",
                                          "response.output_text.done", "response.content_part.done",
                                          "response.output_item.done", "response.completed"});
  const auto done = json::parse(ev.back().data).at("response").as_object();
  CHECK(done.at("status") == "completed");
  CHECK(done.at("output").as_array()[0].at("content").as_array()[0].at("text") == "Hi");
  CHECK(done.at("usage").at("output_tokens") == 3);
}

TEST_CASE("errors: OpenAI and Anthropic bodies, in-band events") {
  const api_error e = bad_request("'top_p' must be in (0, 1]", "top_p");
  const auto o = json::parse(error_body(api_flavor::openai, e, "req_1")).as_object();
  CHECK(o.at("error").at("type") == "invalid_request_error");
  CHECK(o.at("error").at("param") == "top_p");
  CHECK(o.at("error").at("message") == "'top_p' must be in (0, 1]");
  const auto a = json::parse(error_body(api_flavor::anthropic, api_error(429, "rate_limit_error", "busy"), "req_2")).as_object();
  CHECK(a.at("type") == "error");
  CHECK(a.at("error").at("type") == "rate_limit_error");
  CHECK(a.at("request_id") == "req_2");
  CHECK(std::string(anthropic_type(413)) == "request_too_large");
  CHECK(std::string(anthropic_type(503)) == "overloaded_error");

  const auto ae = parse_sse(error_event(api_flavor::anthropic, api_error(500, "server_error", "boom")));
  REQUIRE(ae.size() == 1);
  CHECK(ae[0].name == "error");
  CHECK(json::parse(ae[0].data).at("error").at("type") == "api_error");
  const auto oe = parse_sse(error_event(api_flavor::openai, api_error(500, "server_error", "boom")));
  REQUIRE(oe.size() == 1);
  CHECK(oe[0].name.empty());
  CHECK(json::parse(oe[0].data).at("error").at("message") == "boom");
}

TEST_CASE("keepalive pings are events clients ignore") {
  std::string out;
  openai::chat_format(meta, false)->ping(out);
  CHECK(out == ": keepalive\n\n");
}
