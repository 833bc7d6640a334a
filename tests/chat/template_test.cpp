// chat::render against Jinja2 renderings of the real templates, byte for byte: every case of
// tests/fixtures/chat/chat_templates.json (the shared Llama 3 / Qwen3 fixture) and of
// chat_extra.json (tools/gen_chat_goldens.py: reasoning, tools, trimming, Llama 4). Also the
// facade: detection from template text and from the fixture GGUFs, CLI names, BOS handling.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "strata/chat/template.hpp"
#include "strata/gguf/keys.hpp"
#include "strata/gguf/reader.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace strata;
using chat::template_kind;

struct golden_case {
  std::string family;  // "llama3", "qwen3", "llama4"
  std::string key;     // "<name>/agp=<0|1>[/enable_thinking=0]"
  std::vector<chat::message> messages;
  chat::render_options options;
  std::string rendered;
};

struct golden_file {
  std::map<std::string, std::string> templates;  // family -> template text
  std::vector<golden_case> cases;
};

golden_file load_goldens(const std::filesystem::path& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (const auto err = parser.load(path.string()).get(doc))
    FAIL(path.string() << ": " << simdjson::error_message(err));
  golden_file out;
  const simdjson::dom::object families = doc.get_object();
  for (const auto [family, entry] : families) {
    out.templates[std::string(family)] = std::string(entry["template"].get_string().value());
    const simdjson::dom::object cases = entry["cases"].get_object();
    for (const auto [key, c] : cases) {
      golden_case g;
      g.family = std::string(family);
      g.key = std::string(key);
      g.options.add_generation_prompt = c["add_generation_prompt"].get_bool().value();
      bool thinking = true;
      if (c["enable_thinking"].get(thinking) == simdjson::SUCCESS) g.options.enable_thinking = thinking;
      g.rendered = std::string(c["rendered"].get_string().value());
      const simdjson::dom::array msgs = c["messages"].get_array();
      for (const simdjson::dom::element m : msgs) {
        chat::message msg{.role = std::string(m["role"].get_string().value()),
                          .content = std::string(m["content"].get_string().value()),
                          .reasoning_content = std::nullopt};
        std::string_view reasoning;
        if (m["reasoning_content"].get(reasoning) == simdjson::SUCCESS)
          msg.reasoning_content = std::string(reasoning);
        g.messages.push_back(std::move(msg));
      }
      out.cases.push_back(std::move(g));
    }
  }
  return out;
}

// Renders every case with the family's kind; returns how many matched.
std::size_t check_all(const golden_file& f) {
  std::size_t passed = 0;
  for (const auto& g : f.cases) {
    INFO(g.family << " " << g.key);
    const auto kind = chat::kind_from_name(g.family);
    REQUIRE(kind.has_value());
    const std::string got = chat::render(*kind, g.messages, g.options);
    CHECK(got == g.rendered);
    passed += got == g.rendered;
  }
  return passed;
}

std::filesystem::path chat_fixtures() { return test::fixture_dir() / "chat"; }

}  // namespace

TEST_CASE("every shared fixture case renders exactly as Jinja2 renders the real template") {
  const auto f = load_goldens(chat_fixtures() / "chat_templates.json");
  CHECK(f.templates.size() == 2);
  CHECK(f.cases.size() == 20);  // 8 llama3 + 12 qwen3; a shrunken fixture must not pass silently
  CHECK(check_all(f) == f.cases.size());
}

TEST_CASE("every generated extra case (reasoning, tools, trim, Llama 4) renders exactly") {
  const auto f = load_goldens(chat_fixtures() / "chat_extra.json");
  CHECK(f.templates.size() == 3);
  CHECK(f.cases.size() == 46);
  CHECK(check_all(f) == f.cases.size());
}

TEST_CASE("detect recognises each fixture template's family") {
  for (const auto* file : {"chat_templates.json", "chat_extra.json"}) {
    const auto f = load_goldens(chat_fixtures() / file);
    for (const auto& entry : f.templates) {  // no structured binding: INFO captures it in a lambda
      INFO(file << " " << entry.first);
      CHECK(chat::detect(entry.second) == chat::kind_from_name(entry.first));
    }
  }
}

TEST_CASE("detect on the fixture models' tokenizer.chat_template") {
  // The tiny llama4 fixture was converted with a Llama 3 tokenizer: it carries the Llama 3.0
  // template, and detection follows the template, not general.architecture.
  const std::map<std::string, template_kind> expected = {
      {"llama-Q4_K_M.gguf", template_kind::llama3},
      {"llama-F32.gguf", template_kind::llama3},
      {"llama4-Q4_K_M.gguf", template_kind::llama3},
      {"qwen3-Q4_K_M.gguf", template_kind::chatml},
      {"qwen3moe-Q4_K_M.gguf", template_kind::chatml},
  };
  std::size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::fixture_dir() / "models")) {
    if (e.path().extension() != ".gguf") continue;
    const std::string fname = e.path().filename().string();
    INFO(fname);
    const auto it = expected.find(fname);
    REQUIRE(it != expected.end());
    const gguf::file model(e.path());
    REQUIRE(model->contains(gguf::keys::chat_template));
    const template_kind kind = chat::detect(model.gguf());
    CHECK(kind == it->second);
    ++seen;

    // The template's BOS text is the vocabulary's BOS token, and the vocabulary asks the
    // tokenizer to add BOS exactly when the template writes one.
    const auto bos_id = model->get_uint(gguf::keys::tok_bos_id);
    const auto& tokens = model->at(gguf::keys::tok_tokens).strings();
    REQUIRE(bos_id < tokens.size());
    const bool add_bos = model->find_bool(gguf::keys::tok_add_bos).value_or(false);
    if (!chat::bos_text(kind).empty()) CHECK(tokens[bos_id] == chat::bos_text(kind));
    CHECK(add_bos == !chat::bos_text(kind).empty());
  }
  CHECK(seen == expected.size());
}

TEST_CASE("detect by markers, anything else is generic") {
  CHECK(chat::detect("{{ '<|im_start|>' + role }}") == template_kind::chatml);
  CHECK(chat::detect("<|start_header_id|>x<|end_header_id|>") == template_kind::llama3);
  CHECK(chat::detect("<|header_start|>x<|header_end|>") == template_kind::llama4);
  CHECK(chat::detect("<|start_header_id|>x<|end_header_id|>Cutting Knowledge Date") == template_kind::llama31);
  CHECK(chat::detect("<|start_header_id|> alone") == template_kind::generic);
  CHECK(chat::detect("{{ bos_token }}[INST] {{ content }} [/INST]") == template_kind::generic);
  CHECK(chat::detect("") == template_kind::generic);
}

TEST_CASE("kind_from_name accepts the CLI names and round-trips name()") {
  CHECK(chat::kind_from_name("chatml") == template_kind::chatml);
  CHECK(chat::kind_from_name("qwen3") == template_kind::chatml);
  CHECK(chat::kind_from_name("llama3") == template_kind::llama3);
  CHECK(chat::kind_from_name("llama4") == template_kind::llama4);
  CHECK(chat::kind_from_name("llama31") == template_kind::llama31);
  CHECK(chat::kind_from_name("generic") == template_kind::generic);
  CHECK_FALSE(chat::kind_from_name("Llama3").has_value());
  CHECK_FALSE(chat::kind_from_name("").has_value());
  CHECK_FALSE(chat::kind_from_name("llama2").has_value());
  for (const auto n : chat::template_names) CHECK(chat::kind_from_name(n).has_value());
  for (const auto k : {template_kind::chatml, template_kind::llama3, template_kind::llama31, template_kind::llama4,
                       template_kind::generic})
    CHECK(chat::kind_from_name(chat::name(k)) == k);
}

TEST_CASE("prompt_for_tokenizer leaves exactly one BOS") {
  const std::vector<chat::message> msgs = {{.role = "user", .content = "Hi", .reasoning_content = {}}};
  const std::string l3 = chat::render(template_kind::llama3, msgs);
  REQUIRE(l3.starts_with("<|begin_of_text|><|start_header_id|>"));
  // Tokenizer adds BOS: the text must not carry one too.
  CHECK(chat::prompt_for_tokenizer(l3, template_kind::llama3, true) == std::string_view(l3).substr(17));
  // Tokenizer adds none: the BOS text is the one BOS.
  CHECK(chat::prompt_for_tokenizer(l3, template_kind::llama3, false) == l3);
  const std::string l4 = chat::render(template_kind::llama4, msgs);
  CHECK(chat::prompt_for_tokenizer(l4, template_kind::llama4, true).starts_with("<|header_start|>user"));
  // ChatML writes no BOS; nothing to strip whatever the tokenizer does.
  const std::string q = chat::render(template_kind::chatml, msgs);
  CHECK(chat::prompt_for_tokenizer(q, template_kind::chatml, true) == q);
  CHECK(chat::bos_text(template_kind::chatml).empty());
  CHECK(chat::bos_text(template_kind::generic).empty());
}
