// chat::generic: the documented plain-text fallback ("role: content\n" turns, "assistant:" prompt).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "strata/chat/generic.hpp"
#include "strata/chat/template.hpp"
#include "strata/core/error.hpp"

namespace {

using strata::chat::generic;
using strata::chat::message;

message generic_msg(std::string role, std::string content) { return {std::move(role), std::move(content), {}}; }

}  // namespace

TEST_CASE("generic: one line per turn, then the assistant prompt") {
  const std::vector<message> m = {generic_msg("system", "Be kind."), generic_msg("user", "Hi!"), generic_msg("assistant", "Hello."),
                                  generic_msg("tool", "42"), generic_msg("user", " two\nlines ")};
  CHECK(generic::render(m) ==
        "system: Be kind.\nuser: Hi!\nassistant: Hello.\ntool: 42\nuser:  two\nlines \nassistant:");
  CHECK(generic::render(m, {.add_generation_prompt = false}) ==
        "system: Be kind.\nuser: Hi!\nassistant: Hello.\ntool: 42\nuser:  two\nlines \n");
}

TEST_CASE("generic: no special tokens, no BOS, thinking options ignored") {
  const std::vector<message> m = {{"user", "Hi", "ignored"}};
  CHECK(generic::render(m, {.add_generation_prompt = true, .enable_thinking = false}) == "user: Hi\nassistant:");
  CHECK(strata::chat::render(strata::chat::template_kind::generic, m) == "user: Hi\nassistant:");
}

TEST_CASE("generic: unknown roles are errors") {
  const std::vector<message> bad = {generic_msg("user", "a"), generic_msg("narrator", "b")};
  CHECK_THROWS_WITH_AS(generic::render(bad),
                       "chat: message 1 has role 'narrator', which the generic template does not support "
                       "(expected system, user, assistant or tool)",
                       strata::error);
}
