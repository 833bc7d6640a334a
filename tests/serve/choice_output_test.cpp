// One choice's output (choice_output.hpp): text and Qwen3 <tool_call> blocks split into content
// and tool-call events however the text is cut into deltas, calls given fresh ids, log-probability
// entries attached to the events of the step that produced them, and the finish recorded.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "serve/choice_output.hpp"
#include "strata/gguf/reader.hpp"

using namespace strata;
using namespace strata::serve;

namespace {

const tokenizer::tokenizer& qwen3_tokenizer() {
  static const auto f = gguf::open(STRATA_TEST_FIXTURES "/models/qwen3-Q4_K_M.gguf");
  static const auto tok = tokenizer::tokenizer::from_gguf(f.gguf());
  return tok;
}

// Records the events a format receives, as short strings.
struct recorder final : response_format {
  std::vector<std::string> ev;
  api_flavor flavor() const noexcept override { return api_flavor::openai; }
  void begin(std::string&) override {}
  void text(std::uint32_t c, std::string_view t, std::span<const logprob_entry> lp, std::string&) override {
    ev.push_back("text" + std::to_string(c) + ":" + std::string(t) + (lp.empty() ? "" : "|lp" + std::to_string(lp.size())));
  }
  void tool_call_begin(std::uint32_t, std::uint32_t i, const tool_call& call, std::string&) override {
    ev.push_back("begin" + std::to_string(i) + ":" + call.id + ":" + call.name);
  }
  void tool_call_arguments(std::uint32_t, std::uint32_t i, std::string_view d, std::string&) override {
    ev.push_back("args" + std::to_string(i) + ":" + std::string(d));
  }
  void tool_call_end(std::uint32_t, std::uint32_t i, const tool_call&, std::string&) override {
    ev.push_back("end" + std::to_string(i));
  }
  void choice_end(std::uint32_t c, const choice_result& r, std::string&) override {
    ev.push_back("finish" + std::to_string(c) + ":" + std::to_string(int(r.reason)));
  }
  void end(const generation_result&, std::string&) override {}
  std::string body(const generation_result&) override { return {}; }
};

const std::string output =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

}  // namespace

TEST_CASE("choice_output: tool calls split from the text, the same result however the text is cut") {
  const auto& tok = qwen3_tokenizer();
  for (const std::size_t piece : {1u, 3u, 7u, 1000u}) {
    CAPTURE(piece);
    int ids = 0;
    choice_output co(1, tok, chat::template_kind::chatml, [&] { return "call_" + std::to_string(ids++); });
    recorder fmt;
    std::string out;
    rt::generation_stream::state st;
    for (std::size_t i = 0; i < output.size(); i += piece) {
      st.text = output.substr(i, piece);
      co.feed(st, &fmt, out);
    }
    st.text.clear();
    st.done = true;
    st.reason = rt::finish_reason::eog;
    co.finish(st, {}, &fmt, out);
    const choice_result& r = co.result();
    CHECK(r.text == "Let me check.");
    REQUIRE(r.tool_calls.size() == 2);
    CHECK(r.tool_calls[0].id == "call_0");
    CHECK(r.tool_calls[0].name == "get_weather");
    CHECK(r.tool_calls[0].arguments == R"({"city": "Paris"})");
    CHECK(r.tool_calls[1].name == "get_time");
    CHECK(r.tool_calls[1].arguments == "{}");
    CHECK(r.reason == rt::finish_reason::eog);
    std::string args0, text;
    std::size_t begins = 0;
    for (const auto& e : fmt.ev) {
      if (e.starts_with("args0:")) args0 += e.substr(6);
      if (e.starts_with("text1:")) text += e.substr(6);
      begins += e.starts_with("begin");
    }
    CHECK(args0 == r.tool_calls[0].arguments);
    CHECK(text == r.text);
    CHECK(begins == 2);
    CHECK(fmt.ev.back() == "finish1:" + std::to_string(int(rt::finish_reason::eog)));
  }
}

TEST_CASE("choice_output: plain text passes through, logprobs ride with the step's text, or alone") {
  const auto& tok = qwen3_tokenizer();
  choice_output co(0, tok, std::nullopt, [] { return std::string("unused"); });
  recorder fmt;
  std::string out;
  rt::generation_stream::state st;
  st.text = "<tool_call>not parsed without tools";
  rt::token_logprobs lp;
  lp.token = tok.encode("Hello", false, false).at(0);
  lp.logprob = -0.25f;
  lp.n_top = 1;
  lp.top[0] = {lp.token, -0.25f};
  st.logprobs = {lp, lp};
  st.completion_tokens = 2;
  co.feed(st, &fmt, out);
  st.text.clear();  // a token whose text is held back (e.g. by a stop string) still reports its logprob
  st.logprobs = {lp};
  co.feed(st, &fmt, out);
  REQUIRE(fmt.ev.size() == 2);
  CHECK(fmt.ev[0] == "text0:<tool_call>not parsed without tools|lp2");
  CHECK(fmt.ev[1] == "text0:|lp1");
  const choice_result& r = co.result();
  CHECK(r.tool_calls.empty());
  REQUIRE(r.logprobs.size() == 3);
  const std::string piece(tok.token_to_piece(lp.token, true));
  CHECK(r.logprobs[0].token == piece);
  CHECK(r.logprobs[0].top.at(0).token == piece);
  CHECK(r.logprobs[2].logprob == -0.25f);
  st.done = true;
  st.reason = rt::finish_reason::stop_string;
  st.stop_index = 1;
  co.finish(st, {"a", "STOP"}, nullptr, out);  // not streaming: no events, the result only
  CHECK(co.result().stop_sequence == "STOP");
  CHECK(fmt.ev.size() == 2);
}
