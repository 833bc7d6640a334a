// chat::llama4 by hand-written expectations read off the Llama 4 template text
// (tests/fixtures/chat/llama4_template.jinja): header tokens, which turns are trimmed, the
// ipython role and JSON quoting of tool results, and the generation prompt.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "strata/chat/llama4.hpp"
#include "strata/core/error.hpp"

namespace {

using strata::chat::llama4;
using strata::chat::message;

message llama4_msg(std::string role, std::string content) { return {std::move(role), std::move(content), {}}; }

}  // namespace

TEST_CASE("llama4: system + user, the example of architectures.md section 6.4") {
  const std::vector<message> m = {llama4_msg("system", "S"), llama4_msg("user", "Hi")};
  CHECK(llama4::render(m) ==
        "<|begin_of_text|><|header_start|>system<|header_end|>\n\nS<|eot|>"
        "<|header_start|>user<|header_end|>\n\nHi<|eot|>"
        "<|header_start|>assistant<|header_end|>\n\n");
  CHECK(llama4::render(m, {.add_generation_prompt = false}) ==
        "<|begin_of_text|><|header_start|>system<|header_end|>\n\nS<|eot|>"
        "<|header_start|>user<|header_end|>\n\nHi<|eot|>");
}

TEST_CASE("llama4: only the leading system message is trimmed") {
  const std::vector<message> m = {llama4_msg("system", " \tS\n"), llama4_msg("user", "  Hi  "), llama4_msg("assistant", "\nYo\n"),
                                  llama4_msg("system", " late ")};
  CHECK(llama4::render(m, {.add_generation_prompt = false}) ==
        "<|begin_of_text|><|header_start|>system<|header_end|>\n\nS<|eot|>"
        "<|header_start|>user<|header_end|>\n\n  Hi  <|eot|>"
        "<|header_start|>assistant<|header_end|>\n\n\nYo\n<|eot|>"
        "<|header_start|>system<|header_end|>\n\n late <|eot|>");
}

TEST_CASE("llama4: no system message means no system turn, not an empty one") {
  const std::vector<message> m = {llama4_msg("user", "Hi")};
  CHECK(llama4::render(m) ==
        "<|begin_of_text|><|header_start|>user<|header_end|>\n\nHi<|eot|>"
        "<|header_start|>assistant<|header_end|>\n\n");
  // ...but a supplied system message that trims to nothing still gets its (empty) turn.
  const std::vector<message> e = {llama4_msg("system", "  "), llama4_msg("user", "Hi")};
  CHECK(llama4::render(e, {.add_generation_prompt = false}) ==
        "<|begin_of_text|><|header_start|>system<|header_end|>\n\n<|eot|>"
        "<|header_start|>user<|header_end|>\n\nHi<|eot|>");
}

TEST_CASE("llama4: tool results go under ipython, JSON-quoted") {
  const std::vector<message> m = {llama4_msg("user", "T?"), llama4_msg("tool", "a \"b\"\n\\c"), llama4_msg("tool", "2")};
  CHECK(llama4::render(m, {.add_generation_prompt = false}) ==
        "<|begin_of_text|><|header_start|>user<|header_end|>\n\nT?<|eot|>"
        "<|header_start|>ipython<|header_end|>\n\n\"a \\\"b\\\"\\n\\\\c\"<|eot|>"
        "<|header_start|>ipython<|header_end|>\n\n\"2\"<|eot|>");
}

TEST_CASE("llama4: enable_thinking and reasoning_content do not exist here") {
  const std::vector<message> m = {llama4_msg("user", "Hi"), {"assistant", "<think>x</think>y", "r"}};
  CHECK(llama4::render(m, {.add_generation_prompt = true, .enable_thinking = false}) ==
        "<|begin_of_text|><|header_start|>user<|header_end|>\n\nHi<|eot|>"
        "<|header_start|>assistant<|header_end|>\n\n<think>x</think>y<|eot|>"
        "<|header_start|>assistant<|header_end|>\n\n");
}

TEST_CASE("llama4: unknown roles and empty conversations are errors") {
  const std::vector<message> bad = {llama4_msg("user", "a"), llama4_msg("function", "b")};
  CHECK_THROWS_WITH_AS(llama4::render(bad),
                       "chat: message 1 has role 'function', which the llama4 template does not support "
                       "(expected system, user, assistant, tool or ipython)",
                       strata::error);
  CHECK_THROWS_AS(llama4::render(std::vector<message>{}), strata::error);
}
