// Errors of the HTTP APIs: one exception carrying the HTTP status, the API's error type, the
// offending field and a message, rendered in the shape of the API the route belongs to (OpenAI
// or Anthropic, see docs/spec/api.md §1.5 and §2.3). Nothing here ever contains a stack trace.
#pragma once
#include <stdexcept>
#include <string>

namespace strata::serve {

enum class api_flavor { openai, anthropic };

struct api_error : std::runtime_error {
  int status;
  std::string type;   // OpenAI-style type; anthropic_type() maps it
  std::string param;  // offending field, "" if none
  api_error(int status_, std::string type_, std::string message, std::string param_ = {})
      : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)) {}
};

inline api_error bad_request(std::string message, std::string param = {}) {
  return api_error(400, "invalid_request_error", std::move(message), std::move(param));
}

// The Anthropic error type for an HTTP status (docs/spec/api.md §1.5).
inline const char* anthropic_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

// JSON body of an error response in the route's API format.
std::string error_body(api_flavor f, const api_error& e, const std::string& request_id);
// The in-band form sent after a stream has started: the SSE bytes of one event.
std::string error_event(api_flavor f, const api_error& e);

}  // namespace strata::serve
