// Generation under a grammar with the random-weight fixture models (CPU): whatever the weights,
// a finished output must be what the grammar describes. JSON Schema outputs parse and obey the
// schema; a forced Qwen3 / Llama 4 tool call parses into a call with valid arguments; outputs of
// the arithmetic grammar pass the independent reference matcher; check_first gives the same
// guarantees as mask_first.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "grammar/reference_matcher.hpp"
#include "strata/chat/template.hpp"
#include "strata/chat/tool_call_parser.hpp"
#include "strata/chat/tool_calls.hpp"
#include "strata/grammar/all.hpp"
#include "strata/grammar/json_schema.hpp"
#include "strata/json/parse.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/sampling/chain.hpp"
#include "strata/tokenizer/tokenizer.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace strata;

struct fixture_model {
  std::unique_ptr<rt::model> model;
  tokenizer::tokenizer tok;
  std::shared_ptr<const grammar::token_trie> trie;

  explicit fixture_model(const char* file) : model(load(file)), tok(tokenizer::tokenizer::from_gguf(model->gguf())) {
    trie = std::make_shared<const grammar::token_trie>(grammar::token_trie::from_tokenizer(tok));
  }
  static std::unique_ptr<rt::model> load(const char* file) {
    rt::engine_options opt;
    opt.backend = rt::backend_kind::cpu;
    opt.threads = 1;  // a tiny model: a second thread only adds hand-offs
    opt.n_ctx = 2048;
    opt.n_batch = 256;
    return rt::model::load(test::fixture_dir() / "models" / file, opt);
  }
};

struct generation {
  std::string text;
  bool finished = false;  // ended with an end-of-generation token the grammar allowed
};

// Samples up to max_tokens under the grammar; the matcher decides when an EOG token is allowed.
generation generate(fixture_model& fm, const std::string& prompt, const std::shared_ptr<grammar::automaton>& a,
                    std::uint64_t seed, sampling::constraint_mode mode, int max_tokens = 300) {
  rt::session s(*fm.model);
  const auto ids = fm.tok.encode(prompt, true, true);
  auto logits = s.prefill(ids);
  sampling::sampler_params p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  sampling::sampler smp(p, fm.tok.n_vocab());
  grammar::matcher m(a);
  generation g;
  for (int i = 0; i < max_tokens; ++i) {
    const std::int32_t t = smp.sample(logits, m, mode);
    REQUIRE(m.allows(t));
    if (fm.tok.is_eog(t)) {
      g.finished = true;
      break;
    }
    m.accept(t);
    g.text += fm.tok.token_to_piece(t, true);
    logits = s.decode(t);
  }
  return g;
}

}  // namespace

TEST_CASE("generation under a JSON Schema grammar (qwen3 and llama fixtures)") {
  const char* schema = R"({"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 10},
      "days": {"type": "integer", "minimum": 1, "maximum": 14},
      "unit": {"enum": ["c", "f"]},
      "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
    "required": ["city", "days"]})";
  const std::string gbnf = grammar::json_schema_to_gbnf(std::string_view(schema)).gbnf;
  for (const char* file : {"qwen3-Q4_K_M.gguf", "llama-Q4_K_M.gguf"}) {
    CAPTURE(std::string(file));
    fixture_model fm(file);
    const auto a = grammar::compile_gbnf(gbnf, fm.trie);
    int finished = 0;
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const auto mode = seed % 2 ? sampling::constraint_mode::mask_first : sampling::constraint_mode::check_first;
      const generation g = generate(fm, "Weather as JSON:", a, seed, mode);
      CAPTURE(g.text);
      if (!g.finished) continue;
      ++finished;
      const json::value v = json::parse(g.text);
      REQUIRE(v.is_object());
      REQUIRE(v.find("city"));
      CHECK(v.find("city")->is_string());
      const long days = std::stol(v.find("days")->number_text());
      CHECK((days >= 1 && days <= 14));
      if (const auto* u = v.find("unit")) CHECK((u->as_string() == "c" || u->as_string() == "f"));
    }
    CHECK(finished >= 2);
  }
}

TEST_CASE("a forced tool call from a random-weight model parses into a valid call") {
  const std::vector<json::value> tools = {json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
        "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}})")};
  const auto specs = chat::tool_specs(tools);
  struct family_case {
    const char* file;
    chat::template_kind kind;
  };
  for (const auto& fc : {family_case{"qwen3-Q4_K_M.gguf", chat::template_kind::chatml},
                         family_case{"llama-Q4_K_M.gguf", chat::template_kind::llama4}}) {
    CAPTURE(std::string(fc.file));
    fixture_model fm(fc.file);
    const auto gbnf = chat::tool_call_grammar(fc.kind, specs, {chat::tool_choice_mode::required, ""}, true).gbnf;
    const auto a = grammar::compile_gbnf(gbnf, fm.trie);
    chat::render_options opt;
    opt.tools = &tools;
    const std::vector<chat::message> msgs = {{.role = "user", .content = "Weather in Paris?", .reasoning_content = {}}};
    const std::string prompt = std::string(chat::prompt_for_tokenizer(chat::render(fc.kind, msgs, opt), fc.kind,
                                                                       fm.tok.add_bos())) +
                               std::string(chat::forced_output_prefix(fc.kind, opt));
    int finished = 0;
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      const generation g = generate(fm, prompt, a, seed, sampling::constraint_mode::mask_first, 400);
      CAPTURE(g.text);
      if (!g.finished) continue;
      ++finished;
      chat::tool_call_parser parser(fc.kind);
      std::vector<chat::parse_event> events;
      parser.feed(g.text, events);
      parser.finish(events);
      CHECK(parser.content().empty());
      REQUIRE_FALSE(parser.calls().empty());
      for (const auto& call : parser.calls()) {
        CHECK(call.name == "get_weather");
        const json::value args = json::parse(call.arguments);
        CHECK(args.find("city")->as_string().size() <= 8 * 6);  // <= 8 characters, JSON-escaped
        const std::string unit = args.find("unit")->as_string();
        CHECK((unit == "celsius" || unit == "fahrenheit"));
      }
    }
    CHECK(finished >= 1);
  }
}

TEST_CASE("generation under an arithmetic GBNF grammar passes the reference matcher") {
  const char* gbnf = R"g(
root    ::= sum "=" int
sum     ::= product ([+-] product){0,3}
product ::= factor ("*" factor){0,2}
factor  ::= int | "(" sum ")"
int     ::= [1-9] [0-9]{0,2}
)g";
  fixture_model fm("qwen3-Q4_K_M.gguf");
  const auto rules = std::make_shared<const grammar::rule_set>(grammar::parse_gbnf(gbnf));
  const auto a = std::make_shared<grammar::automaton>(rules, fm.trie);
  const grammar_test::reference_matcher ref(*rules);
  int finished = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const generation g = generate(fm, "2+2=", a, seed, sampling::constraint_mode::check_first, 120);
    CAPTURE(g.text);
    CHECK(ref.classify(g.text) >= 0);  // every output, finished or not, is a viable prefix
    if (g.finished) {
      ++finished;
      CHECK(ref.classify(g.text) == 1);
    }
  }
  CHECK(finished >= 2);
}
