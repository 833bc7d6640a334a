// Tool definitions, assistant tool calls and tool results against Jinja2 renderings of the real
// templates (tests/fixtures/chat/chat_tools.json, tools/gen_chat_goldens.py), byte for byte, for
// Qwen3, Llama 3.1 and Llama 4; the template's own errors; detection of the 3.1 template.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "strata/chat/template.hpp"
#include "strata/json/parse.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace strata;
using chat::template_kind;

json::value load(const char* name) {
  std::ifstream f(test::fixture_dir() / "chat" / name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str(), name);
}

chat::message to_message(const json::value& m) {
  chat::message msg{.role = m.find("role")->as_string(), .content = m.find("content")->as_string(),
                    .reasoning_content = std::nullopt};
  if (const auto* r = m.find("reasoning_content")) msg.reasoning_content = r->as_string();
  if (const auto* calls = m.find("tool_calls"))
    for (const auto& c : calls->items())
      msg.tool_calls.push_back({c.find("id")->as_string(), c.find("name")->as_string(), c.find("arguments")->as_string()});
  return msg;
}

}  // namespace

TEST_CASE("tool cases render exactly as Jinja2 renders the Qwen3, Llama 3.1 and Llama 4 templates") {
  const json::value doc = load("chat_tools.json");
  std::size_t n = 0, passed = 0;
  for (const auto& [family, entry] : doc.members()) {
    const auto kind = chat::kind_from_name(family == "qwen3" ? "chatml" : family);
    REQUIRE(kind.has_value());
    CHECK(chat::detect(entry.find("template")->as_string()) == *kind);
    for (const auto& [key, c] : entry.find("cases")->members()) {
      INFO(family << " " << key);
      std::vector<chat::message> msgs;
      for (const auto& m : c.find("messages")->items()) msgs.push_back(to_message(m));
      chat::render_options opt;
      opt.add_generation_prompt = c.find("add_generation_prompt")->as_bool();
      if (const auto* t = c.find("enable_thinking")) opt.enable_thinking = t->as_bool();
      if (const auto* t = c.find("tools_in_user_message")) opt.tools_in_user_message = t->as_bool();
      if (const auto* t = c.find("tools")) opt.tools = &t->items();
      const std::string got = chat::render(*kind, msgs, opt);
      CHECK(got == c.find("rendered")->as_string());
      ++n;
      passed += got == c.find("rendered")->as_string();
    }
  }
  CHECK(n == 28);  // a shrunken fixture must not pass silently
  CHECK(passed == n);
}

TEST_CASE("tool templates: the templates' own errors") {
  const std::vector<json::value> tools = {json::parse(R"({"type": "function", "function": {"name": "f"}})")};
  chat::render_options opt;
  opt.tools = &tools;
  const std::vector<chat::message> only_system = {{.role = "system", .content = "s", .reasoning_content = {}}};
  CHECK_THROWS_WITH_AS(chat::render(template_kind::llama31, only_system, opt),
                       "chat: Cannot put tools in the first user message when there's no first user message! (llama31 template)",
                       error);
  CHECK_THROWS_WITH_AS(chat::render(template_kind::llama4, only_system, opt),
                       "chat: Cannot put tools in the first user message when there's no first user message! (llama4 template)",
                       error);
  std::vector<chat::message> two_calls = {{.role = "user", .content = "q", .reasoning_content = {}},
                                          {.role = "assistant", .content = "", .reasoning_content = {},
                                           .tool_calls = {{"a", "f", "{}"}, {"b", "f", "{}"}}}};
  CHECK_THROWS_WITH_AS(chat::render(template_kind::llama31, two_calls),
                       "chat: This model only supports single tool-calls at once! (llama31 template, 2 calls in one message)",
                       error);
  two_calls[1].tool_calls = {{"a", "f", "{\"x\": }"}};
  CHECK_THROWS_WITH_AS(chat::render(template_kind::llama31, two_calls),
                       "chat: the arguments of tool call 'f' are not valid JSON: tool call arguments: line 1, column 7: "
                       "expected a JSON value, found '}'",
                       error);
  // Qwen3 prints the arguments text as given (its template's string branch).
  CHECK(chat::render(template_kind::chatml, two_calls, {.add_generation_prompt = false})
            .ends_with("</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }}\n</tool_call><|im_end|>\n"));
}
