// Grammar-constrained decoding cost per token at a real vocabulary size (Qwen3, 151,936 ids):
// trie build, vocabulary mask (cold automaton; warm automaton with the mask cache bypassed, i.e.
// the trie walk alone; cache hit), the one-token check of check_first, accept, and the sampler
// with and without a constraint. Workloads: replaying the tokens of realistic JSON documents
// (typical) and a seeded random walk choosing uniformly among the allowed tokens (states a
// model rarely visits: worst case).
// Usage: grammar_bench [vocab.gguf] [random-walk steps]
//   default: tests/fixtures/tokenizer/ggml-vocab-qwen3.gguf, 3000
#include <algorithm>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "strata/core/mapped_file.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/grammar/all.hpp"
#include "strata/grammar/json_schema.hpp"
#include "strata/sampling/chain.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace {

using namespace strata;
// Thread CPU time, not wall time: the shared development machine preempts often, and a
// preempted walk is not a slower walk.
struct clock_type {
  using time_point = double;  // microseconds
  static time_point now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
  }
};

double us_since(clock_type::time_point t0) { return clock_type::now() - t0; }

struct series {
  std::vector<double> v;
  void add(double x) { v.push_back(x); }
  void print(const char* what, const char* unit = "us") {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    const auto at = [&](double q) { return v[std::min(v.size() - 1, std::size_t(q * double(v.size())))]; };
    std::printf("  %-36s mean %9.1f  p50 %9.1f  p99 %9.1f  max %9.1f %s  (n=%zu)\n", what, sum / double(v.size()),
                at(0.5), at(0.99), v.back(), unit, v.size());
  }
};

const char* json_gbnf = R"g(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ws ":" ws value ws
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
ws     ::= [ \t\n]{0,20}
)g";

// The documents below validate against it (additionalProperties false, declaration order).
const char* schema_json = R"({"type": "object", "properties": {
    "location": {"type": "string", "minLength": 1, "maxLength": 200},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "when": {"type": "string", "format": "date-time"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "notes": {"type": "string"}},
  "required": ["location", "unit", "days"]})";

const char* documents[] = {
    R"({"location": "San Francisco, CA", "unit": "celsius", "days": 7, "when": "2026-11-24T09:30:00Z", "tags": ["weather", "forecast", "bay area"], "notes": "The user asked about the weekend; mention fog in the mornings. \u00e9t\u00e9 — 日本語のテキストも含む 🙂"})",
    R"({"location": "Zürich", "unit": "fahrenheit", "days": 3})",
    R"({"location": "a much longer location string that goes on for a while, with commas, quotes \" and backslashes \\ inside", "unit": "celsius", "days": 14, "tags": [], "notes": "line one\nline two\tand a tab"})",
};

struct workload_result {
  series mask_cold, mask_walk, mask_cached, nodes, check, accept;
};

// Replays the documents twice on one automaton: pass 0 finds it cold, pass 1 warm.
void replay(const tokenizer::tokenizer& tok, const std::shared_ptr<const grammar::rule_set>& rules,
            const std::shared_ptr<const grammar::token_trie>& trie, workload_result& r) {
  auto a = std::make_shared<grammar::automaton>(rules, trie);
  std::vector<std::uint64_t> buf(trie->mask_words());
  for (int pass = 0; pass < 2; ++pass) {
    for (const char* doc : documents) {
      const auto ids = tok.encode(doc, false, false);
      grammar::matcher g(a);
      for (const auto id : ids) {
        if (pass == 1) {
          const auto visited = a->stats().trie_nodes_visited;
          const auto t0 = clock_type::now();
          a->compute_mask(g.state(), buf.data());
          r.mask_walk.add(us_since(t0));
          r.nodes.add(double(a->stats().trie_nodes_visited - visited));
        }
        auto t0 = clock_type::now();
        const auto mask = g.allowed();
        (pass == 0 ? r.mask_cold : r.mask_cached).add(us_since(t0));
        if (!sampling::mask_allows(mask, id)) {
          std::fprintf(stderr, "document token %d rejected by the grammar\n", id);
          std::exit(1);
        }
        t0 = clock_type::now();
        const bool ok = g.allows(id);
        r.check.add(us_since(t0));
        t0 = clock_type::now();
        g.accept(id);
        r.accept.add(us_since(t0));
        if (!ok) std::exit(2);
      }
      if (!g.can_end()) {
        std::fprintf(stderr, "a document does not complete the grammar\n");
        std::exit(1);
      }
    }
  }
}

// Uniform choice among allowed tokens; restarts when only the end is left.
void random_walk(const std::shared_ptr<const grammar::rule_set>& rules,
                 const std::shared_ptr<const grammar::token_trie>& trie, int steps, workload_result& r) {
  auto a = std::make_shared<grammar::automaton>(rules, trie);
  grammar::matcher g(a);
  std::mt19937 rng(42);
  std::vector<std::int32_t> allowed;
  std::vector<std::uint64_t> buf(trie->mask_words());
  for (int i = 0; i < steps; ++i) {
    if (g.finished()) g.reset();
    auto t0 = clock_type::now();
    const auto mask = g.allowed();
    r.mask_cold.add(us_since(t0));
    const auto visited = a->stats().trie_nodes_visited;
    t0 = clock_type::now();
    a->compute_mask(g.state(), buf.data());
    r.mask_walk.add(us_since(t0));
    r.nodes.add(double(a->stats().trie_nodes_visited - visited));
    allowed.clear();
    for (std::int32_t t = 0; t < trie->n_vocab(); ++t)
      if (sampling::mask_allows(mask, t) && trie->kind(t) == grammar::token_kind::text) allowed.push_back(t);
    if (allowed.empty()) {
      g.reset();
      continue;
    }
    const auto t = allowed[rng() % allowed.size()];
    t0 = clock_type::now();
    g.accept(t);
    r.accept.add(us_since(t0));
  }
  std::printf("  automaton: %zu states, %zu stack nodes, %llu flushes\n", a->n_states(), a->n_stack_nodes(),
              static_cast<unsigned long long>(a->stats().flushes));
}

// The sampler on random logits, unconstrained and under the JSON grammar's string-interior
// state (a permissive mask) and its after-'{' state (a restrictive one).
void sampler_cost(const std::shared_ptr<const grammar::rule_set>& rules,
                  const std::shared_ptr<const grammar::token_trie>& trie, const tokenizer::tokenizer& tok) {
  const std::int32_t n = trie->n_vocab();
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(static_cast<std::size_t>(n));
  for (auto& l : logits) l = nd(rng);
  auto a = std::make_shared<grammar::automaton>(rules, trie);
  for (const bool greedy : {true, false}) {
    sampling::sampler_params p;
    p.seed = 1;
    if (greedy) p.temperature = 0.0f;
    std::printf(" sampler (%s):\n", greedy ? "greedy" : "temperature 0.8, top_k 40, top_p 0.95, min_p 0.05");
    for (const char* prefix : {"", "{\"a\": \"", "{"}) {
      grammar::matcher g(a);
      if (!g.accept_bytes(prefix)) std::exit(3);
      for (const auto mode : {0, 1, 2}) {
        sampling::sampler s(p, n);
        series t;
        for (int i = 0; i < 60; ++i) {
          const auto t0 = clock_type::now();
          if (mode == 0)
            (void)s.sample(logits);
          else
            (void)s.sample(logits, g, mode == 1 ? sampling::constraint_mode::mask_first : sampling::constraint_mode::check_first);
          t.add(us_since(t0));
        }
        if (mode == 0 && *prefix) continue;
        const std::string what = mode == 0   ? std::string("unconstrained")
                                 : std::string(mode == 1 ? "mask_first" : "check_first") + " after '" + prefix + "'";
        t.print(what.c_str());
      }
    }
  }
  (void)tok;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "tests/fixtures/tokenizer/ggml-vocab-qwen3.gguf";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 3000;
  const mapped_file file(path);
  const gguf::reader reader(file.bytes(), path);
  const auto tok = tokenizer::tokenizer::from_gguf(reader);

  auto t0 = clock_type::now();
  const auto trie = std::make_shared<const grammar::token_trie>(grammar::token_trie::from_tokenizer(tok));
  std::printf("vocab %s: %d tokens, trie %zu nodes, max depth %zu, built in %.1f ms\n", path.c_str(), trie->n_vocab(),
              trie->nodes().size(), trie->max_depth(), us_since(t0) / 1000.0);

  struct grammar_case {
    const char* name;
    std::string gbnf;
  };
  const grammar_case cases[] = {{"json (generic JSON GBNF)", json_gbnf},
                                {"json_object (json_object_gbnf())", grammar::json_object_gbnf()},
                                {"schema (json_schema_to_gbnf, weather arguments)", grammar::json_schema_to_gbnf(std::string_view(schema_json)).gbnf}};
  for (const auto& c : cases) {
    t0 = clock_type::now();
    const auto rules = std::make_shared<const grammar::rule_set>(grammar::parse_gbnf(c.gbnf));
    std::printf("\n%s: parsed in %.1f us, %zu rules\n", c.name, us_since(t0), rules->rules().size());
    workload_result rep, walk;
    replay(tok, rules, trie, rep);
    std::printf(" replay of %zu documents (typical):\n", std::size(documents));
    rep.mask_cold.print("mask, cold automaton");
    rep.mask_walk.print("mask, warm automaton, trie walk");
    rep.mask_cached.print("mask, warm, cached per state");
    rep.nodes.print("trie nodes visited per walk", "  ");
    rep.check.print("check one token (check_first)");
    rep.accept.print("accept");
    std::printf(" random walk, %d steps (worst case):\n", steps);
    random_walk(rules, trie, steps, walk);
    walk.mask_cold.print("mask, as met (cached or walked)");
    walk.mask_walk.print("mask, trie walk");
    walk.nodes.print("trie nodes visited per walk", "  ");
    walk.accept.print("accept");
    sampler_cost(rules, trie, tok);
  }
  return 0;
}
