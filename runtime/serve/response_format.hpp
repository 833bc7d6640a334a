// What a route sends back for one generation, streamed (SSE events) or not (one JSON body). Each
// API implements it once (openai_api.cpp, anthropic_api.cpp); the server only moves bytes. All
// JSON is built with Boost.JSON.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "api_error.hpp"
#include "strata/runtime/scheduler.hpp"

namespace strata::serve {

struct generation_result {
  std::string text;  // the whole text (non-streaming); streams send it as deltas
  rt::finish_reason reason = rt::finish_reason::none;
  std::string stop_sequence;  // the matched stop string, for finish_reason::stop_string
  std::uint32_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
};

struct response_meta {
  std::string id;        // "chatcmpl-…", "msg_…", "resp_…"
  std::string model;     // echoed model id
  std::int64_t created;  // unix seconds
  std::uint32_t prompt_tokens = 0;  // known before generation starts (Anthropic message_start)
};

class response_format {
 public:
  virtual ~response_format() = default;
  virtual api_flavor flavor() const noexcept = 0;
  // SSE bytes sent right after the 200 headers (role chunk, message_start, response.created...).
  virtual void begin(std::string& out) = 0;
  virtual void text(std::string_view delta, std::string& out) = 0;
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
