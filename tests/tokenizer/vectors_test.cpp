// tokenizer::tokenizer against token ids produced by llama.cpp (d32676d77): its own test vectors
// (test-tokenizer-0 format, add_special = parse_special = false), the harder extra cases with
// llama-tokenize's defaults (BOS per vocabulary, special tokens parsed) and without, and the
// prompt ids of the fixture models.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer_support.hpp"

namespace {

using namespace strata;
using strata::test::vocab_tokenizer;

// Returns how many cases matched; every mismatch is reported with its text.
std::size_t check_cases(const tokenizer::tokenizer& tok, const std::vector<test::vector_case>& cases, bool add_special,
                        bool parse_special) {
  std::size_t ok = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto got = tok.encode(cases[i].text, add_special, parse_special);
    INFO("case " << i << ": \"" << test::escaped(cases[i].text) << "\"");
    CHECK(test::ids_string(got) == test::ids_string(cases[i].ids));
    ok += got == cases[i].ids;
  }
  return ok;
}

std::vector<std::vector<std::int32_t>> json_id_lists(simdjson::dom::element e) {
  std::vector<std::vector<std::int32_t>> out;
  for (const auto list : e.get_array()) {
    out.emplace_back();
    for (const auto id : list.get_array()) out.back().push_back(std::int32_t(id.get_int64().value()));
  }
  return out;
}

}  // namespace

TEST_CASE("llama.cpp test vectors: ggml-vocab-<name>.gguf.inp / .extra.inp") {
  for (const auto& name : test::vocab_names()) {
    const auto& tok = vocab_tokenizer(name);
    for (const std::string kind : {".gguf", ".extra"}) {
      const auto base = test::tokenizer_fixture_dir() / ("ggml-vocab-" + name + kind);
      const auto cases = test::read_vectors(base.string() + ".inp", base.string() + ".out");
      CAPTURE(base.string());
      REQUIRE(cases.size() >= 19);
      const std::size_t ok = check_cases(tok, cases, false, false);
      MESSAGE(name << kind << ": " << ok << "/" << cases.size() << " cases match llama.cpp");
    }
  }
}

TEST_CASE("llama.cpp extra cases: llama-tokenize defaults and --no-bos --no-parse-special") {
  simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.load((test::tokenizer_fixture_dir() / "extra_cases.json").string());
  std::vector<std::string> texts;
  for (const auto c : doc["cases"].get_array()) texts.emplace_back(std::string_view(c["text"].get_string()));
  REQUIRE(texts.size() == 19);

  for (const auto& name : test::vocab_names()) {
    const auto& tok = vocab_tokenizer(name);
    const auto v = doc["vocabs"][("ggml-vocab-" + name + ".gguf")];
    const auto with_special = json_id_lists(v["default_ids"]);
    const auto without = json_id_lists(v["no_special_ids"]);
    REQUIRE(with_special.size() == texts.size());
    REQUIRE(without.size() == texts.size());
    std::vector<test::vector_case> a, b;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      a.push_back({texts[i], with_special[i]});
      b.push_back({texts[i], without[i]});
    }
    const std::size_t ok_a = check_cases(tok, a, true, true);
    const std::size_t ok_b = check_cases(tok, b, false, false);
    MESSAGE(name << ": default_ids " << ok_a << "/" << a.size() << ", no_special_ids " << ok_b << "/" << b.size());
  }
}

TEST_CASE("the BOS text at the start of a text gives two BOS with add_special + parse_special") {
  const auto& tok = vocab_tokenizer("llama-bpe");
  const auto ids = tok.encode("<|begin_of_text|>Hi", true, true);
  REQUIRE(ids.size() >= 2);
  CHECK(ids[0] == tok.bos());
  CHECK(ids[1] == tok.bos());
  // Without parse_special the text is just text.
  const auto plain = tok.encode("<|begin_of_text|>Hi", true, false);
  CHECK(plain[0] == tok.bos());
  CHECK(plain[1] != tok.bos());
}

TEST_CASE("fixture models: prompt ids from the manifest (add_special, no parse_special)") {
  simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.load((test::fixture_dir() / "models" / "manifest.json").string());
  const auto shared = test::shared_fixture_dir();
  std::size_t checked = 0;
  for (const std::string arch : {"llama", "qwen3", "qwen3moe", "llama4"}) {
    gguf::file f(test::fixture_dir() / "models" / (arch + "-Q4_K_M.gguf"));
    const auto tok = tokenizer::tokenizer::from_gguf(f.gguf());
    for (const auto [prompt, p] : doc["prompts"].get_object()) {
      const std::string text(std::string_view(p["text"].get_string()));
      if (!shared.empty())  // the manifest's text is the prompt file, byte for byte (no final newline)
        CHECK(test::read_text(shared / std::string(std::string_view(p["file"].get_string()))) == text);
      std::vector<std::int32_t> expect;
      for (const auto id : p["ids"][arch].get_array()) expect.push_back(std::int32_t(id.get_int64().value()));
      CAPTURE(arch);
      CAPTURE(std::string(prompt));
      CHECK(test::ids_string(tok.encode(text, true, false)) == test::ids_string(expect));
      ++checked;
    }
  }
  CHECK(checked == 12);
}
