// What a route sends back for one generation, streamed (SSE events) or not (one JSON body). Each
// API implements it once (openai_*.cpp, anthropic_api.cpp); the server only moves bytes. A
// generation has one or more choices (OpenAI `n`); each choice's output arrives as text deltas
// and tool calls (already split from the text, see tool_output.hpp). All JSON is built with
// Boost.JSON.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api_error.hpp"
#include "strata/chat/message.hpp"
#include "strata/runtime/scheduler.hpp"

namespace strata::serve {

// One function call the model made: id "call_…" (OpenAI) / "toolu_…" (Anthropic), name, and
// the arguments object as JSON text (the type chat templates render in history, too).
using tool_call = chat::tool_call;

// One generated token's log-probabilities as the APIs report them: the token's bytes (possibly
// part of a UTF-8 character) and the most likely alternatives.
struct logprob_entry {
  struct alternative {
    std::string token;
    float logprob = 0;
  };
  std::string token;
  float logprob = 0;
  std::vector<alternative> top;
};

struct choice_result {
  std::string text;                   // the answer's text (tool-call markup removed)
  std::vector<tool_call> tool_calls;
  std::vector<logprob_entry> logprobs;  // when requested
  rt::finish_reason reason = rt::finish_reason::none;
  std::string stop_sequence;          // the matched stop string, for finish_reason::stop_string
  std::uint32_t completion_tokens = 0;
};

struct generation_result {
  std::vector<choice_result> choices;  // at least one
  std::uint32_t prompt_tokens = 0, cached_tokens = 0;
  std::uint32_t completion_tokens() const noexcept {
    std::uint32_t n = 0;
    for (const auto& c : choices) n += c.completion_tokens;
    return n;
  }
};

struct response_meta {
  std::string id;        // "chatcmpl-…", "msg_…", "resp_…"
  std::string model;     // echoed model id
  std::int64_t created;  // unix seconds
  std::uint32_t prompt_tokens = 0;  // known before generation starts (Anthropic message_start)
  std::uint32_t n = 1;              // choices
};

class response_format {
 public:
  virtual ~response_format() = default;
  virtual api_flavor flavor() const noexcept = 0;
  // SSE bytes sent right after the 200 headers (role chunk, message_start, response.created...).
  virtual void begin(std::string& out) = 0;
  // New text of choice `c` and the log-probabilities of the tokens that produced it.
  virtual void text(std::uint32_t c, std::string_view delta, std::span<const logprob_entry> logprobs,
                    std::string& out) = 0;
  // Tool call `index` of choice `c` starts (id and name known), then its arguments stream in
  // pieces that concatenate to JSON text, then it ends. Only routes that accept tools see these.
  virtual void tool_call_begin(std::uint32_t c, std::uint32_t index, const tool_call& call, std::string& out) {
    (void)c, (void)index, (void)call, (void)out;
  }
  virtual void tool_call_arguments(std::uint32_t c, std::uint32_t index, std::string_view delta, std::string& out) {
    (void)c, (void)index, (void)delta, (void)out;
  }
  virtual void tool_call_end(std::uint32_t c, std::uint32_t index, const tool_call& call, std::string& out) {
    (void)c, (void)index, (void)call, (void)out;
  }
  // Choice `c` is finished (its finish_reason); end() follows once every choice has finished.
  virtual void choice_end(std::uint32_t c, const choice_result& r, std::string& out) { (void)c, (void)r, (void)out; }
  virtual void end(const generation_result& r, std::string& out) = 0;
  // Keepalive during long prefills: an event clients ignore.
  virtual void ping(std::string& out) { out += ": keepalive\n\n"; }
  // An error after the 200 went out, in-band in the API's format.
  virtual void error(const api_error& e, std::string& out) { out += error_event(flavor(), e); }
  // The non-streaming body.
  virtual std::string body(const generation_result& r) = 0;
};

// SSE framing: "event: NAME\n" (if any) + "data: JSON\n\n".
inline void sse(std::string& out, std::string_view event, std::string_view data) {
  if (!event.empty()) {
    out += "event: ";
    out += event;
    out += '\n';
  }
  out += "data: ";
  out += data;
  out += "\n\n";
}

}  // namespace strata::serve
