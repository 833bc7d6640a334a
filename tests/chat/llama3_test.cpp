// chat::llama3 beyond the Jinja2 goldens: what the Llama 3.0 template does with
// add_generation_prompt (nothing), trimming, and the roles it accepts.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "strata/chat/llama3.hpp"
#include "strata/core/error.hpp"

namespace {

using strata::chat::llama3;
using strata::chat::message;

message llama3_msg(std::string role, std::string content) { return {std::move(role), std::move(content), {}}; }

}  // namespace

TEST_CASE("llama3: BOS first, content trimmed, assistant header always appended") {
  const std::vector<message> m = {llama3_msg("system", " S "), llama3_msg("user", "\n Hi \u3000")};
  const std::string expected =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  CHECK(llama3::render(m, {.add_generation_prompt = true}) == expected);
  CHECK(llama3::render(m, {.add_generation_prompt = false}) == expected);  // the 3.0 template ignores it
}

TEST_CASE("llama3: BOS appears once, before the first message only") {
  const std::vector<message> m = {llama3_msg("user", "a"), llama3_msg("assistant", "b"), llama3_msg("user", "c")};
  const std::string out = llama3::render(m);
  CHECK(out.find("<|begin_of_text|>") == 0);
  CHECK(out.find("<|begin_of_text|>", 1) == std::string::npos);
}

TEST_CASE("llama3: tool and unknown roles are errors naming the index") {
  const std::vector<message> tool = {llama3_msg("user", "a"), llama3_msg("assistant", "b"), llama3_msg("tool", "c")};
  CHECK_THROWS_WITH_AS(llama3::render(tool),
                       "chat: message 2 has role 'tool', which the llama3 template does not support "
                       "(expected system, user or assistant)",
                       strata::error);
  const std::vector<message> bad = {llama3_msg("User", "a")};
  CHECK_THROWS_WITH_AS(llama3::render(bad),
                       "chat: message 0 has role 'User', which the llama3 template does not support "
                       "(expected system, user or assistant)",
                       strata::error);
  CHECK_THROWS_AS(llama3::render(std::vector<message>{}), strata::error);
}
