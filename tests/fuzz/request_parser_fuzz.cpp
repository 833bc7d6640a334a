// libFuzzer target for strata-serve's request parsers: the first byte picks the route (OpenAI
// chat/completions, completions, responses; Anthropic messages, count_tokens), the rest is the
// JSON body. The body must either parse into a request that then goes through what the server
// does before queuing it (the sampler and stop conditions built and validated, chat messages
// rendered with every template), or be refused with a 4xx api_error or a strata::error (which the
// server answers with 400). Anything else (crash, sanitizer report, another exception, a 5xx) is a
// finding. Build and run: tools/run_fuzz.sh [seconds] (the seed corpus is the SDK conformance
// traffic, tests/fuzz/seeds/requests/).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/anthropic_api.hpp"
#include "serve/openai_api.hpp"
#include "strata/chat/template.hpp"
#include "strata/sampling/chain.hpp"
#include "strata/sampling/stop.hpp"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  static simdjson::dom::parser jp;
  try {
    const serve::json_in::object o = serve::json_in::parse_object(jp, body);
    serve::parsed_request pr;
    switch (data[0] % 5) {
      case 0: pr = serve::openai::parse_chat(o); break;
      case 1: pr = serve::openai::parse_completion(o); break;
      case 2: pr = serve::openai::parse_responses(o); break;
      case 3: pr = serve::anthropic::parse_messages(o); break;
      default: pr = serve::anthropic::parse_messages(o, true); break;
    }
    try {
      const sampling::sampler smp(pr.sampling, 1000);
      const sampling::stop_conditions stop({2}, pr.sampling.max_tokens, pr.stop);
      if (pr.chat)
        for (const auto k : {chat::template_kind::chatml, chat::template_kind::llama3, chat::template_kind::llama4,
                             chat::template_kind::generic})
          (void)chat::render(k, pr.messages, {.add_generation_prompt = true, .enable_thinking = true});
    } catch (const error&) {  // the server's 400 for bad sampling values or messages
    }
  } catch (const serve::api_error& e) {
    if (e.status < 400 || e.status >= 500) std::abort();  // a bad body is the client's error
  }
  return 0;
}
