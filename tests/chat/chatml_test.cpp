// chat::chatml (Qwen3) beyond the Jinja2 goldens: the reasoning rules spelled out on small
// conversations, tool-result grouping, role errors.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "strata/chat/chatml.hpp"
#include "strata/core/error.hpp"

namespace {

using strata::chat::chatml;
using strata::chat::message;

message chatml_msg(std::string role, std::string content) { return {std::move(role), std::move(content), {}}; }

}  // namespace

TEST_CASE("chatml: plain turns, no BOS, generation prompt with and without thinking") {
  const std::vector<message> m = {chatml_msg("system", "S"), chatml_msg("user", "Hi")};
  CHECK(chatml::render(m) == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(chatml::render(m, {.add_generation_prompt = true, .enable_thinking = false}) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        "<think>\n\n</think>\n\n");
  // enable_thinking only shapes the generation prompt.
  CHECK(chatml::render(m, {.add_generation_prompt = false, .enable_thinking = false}) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST_CASE("chatml: reasoning is dropped from turns before the last user query") {
  const std::vector<message> m = {chatml_msg("user", "Q1"), chatml_msg("assistant", "<think>\nr1\n</think>\n\nA1"), chatml_msg("user", "Q2"),
                                  chatml_msg("assistant", "<think>\nr2\n</think>\n\nA2")};
  CHECK(chatml::render(m, {.add_generation_prompt = false}) ==
        "<|im_start|>user\nQ1<|im_end|>\n"
        "<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
}

TEST_CASE("chatml: reasoning_content overrides parsing, even when empty") {
  const std::vector<message> empty = {chatml_msg("user", "Q"), {"assistant", "<think>x</think>A", std::string()}};
  CHECK(chatml::render(empty, {.add_generation_prompt = false}) ==
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<think>x</think>A<|im_end|>\n");
  const std::vector<message> m = {chatml_msg("user", "Q"), {"assistant", "A", "\nR\n"}};
  CHECK(chatml::render(m, {.add_generation_prompt = false}) ==
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n");
}

TEST_CASE("chatml: consecutive tool results share one user turn") {
  const std::vector<message> m = {chatml_msg("user", "Q"), chatml_msg("assistant", "calling"), chatml_msg("tool", "r1"), chatml_msg("tool", "r2"),
                                  chatml_msg("user", "thanks"), chatml_msg("tool", "r3")};
  CHECK(chatml::render(m, {.add_generation_prompt = false}) ==
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\ncalling<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n"
        "<|im_start|>user\nthanks<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nr3\n</tool_response><|im_end|>\n");
}

TEST_CASE("chatml: unknown roles and empty conversations are errors") {
  const std::vector<message> bad = {chatml_msg("system", "s"), chatml_msg("user", "u"), chatml_msg("function", "f")};
  CHECK_THROWS_WITH_AS(chatml::render(bad),
                       "chat: message 2 has role 'function', which the chatml template does not support "
                       "(expected system, user, assistant or tool)",
                       strata::error);
  const std::vector<message> invalid_utf8 = {chatml_msg("\xff", "u")};
  CHECK_THROWS_WITH_AS(chatml::render(invalid_utf8),
                       "chat: message 0 has role '\xEF\xBF\xBD', which the chatml template does not support "
                       "(expected system, user, assistant or tool)",
                       strata::error);
  CHECK_THROWS_WITH_AS(chatml::render(std::vector<message>{}),
                       "chat: nothing to render with the chatml template: no messages", strata::error);
}
