// Shared OpenAI readers and JSON pieces (openai_shared.hpp).
#include "openai_shared.hpp"

#include "strata/core/utf8.hpp"

namespace strata::serve::openai::detail {

const char* finish_reason(const choice_result& c) {
  switch (c.reason) {
    case rt::finish_reason::max_tokens:
    case rt::finish_reason::context_full: return "length";
    default: return c.tool_calls.empty() ? "stop" : "tool_calls";
  }
}

json::object usage_json(const generation_result& r) {
  const std::uint32_t completion = r.completion_tokens();
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", r.prompt_tokens + completion},
          {"prompt_tokens_details", json::object{{"cached_tokens", r.cached_tokens}}}};
}

namespace {
json::array bytes_of(std::string_view s) {
  json::array b;
  for (const char c : s) b.push_back(static_cast<unsigned char>(c));
  return b;
}
}  // namespace

json::array chat_logprobs(std::span<const logprob_entry> lp) {
  json::array out;
  for (const auto& e : lp) {
    json::array top;
    for (const auto& a : e.top)
      top.push_back(json::object{{"token", utf8::sanitize(a.token)}, {"logprob", a.logprob}, {"bytes", bytes_of(a.token)}});
    out.push_back(json::object{{"token", utf8::sanitize(e.token)},
                               {"logprob", e.logprob},
                               {"bytes", bytes_of(e.token)},
                               {"top_logprobs", std::move(top)}});
  }
  return out;
}

}  // namespace strata::serve::openai::detail
