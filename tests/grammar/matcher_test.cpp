// The automaton against the independent reference matcher on random texts, the trie-walk mask
// against per-token checks (random vocabularies with partial UTF-8 pieces, and the real Qwen3
// vocabulary), flush transparency, the matcher API and the sampler's constraint modes.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "reference_matcher.hpp"
#include "strata/core/mapped_file.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/sampling/chain.hpp"
#include "support/fixtures.hpp"

using namespace grammar_test;
using strata::test::fixture_dir;

namespace {

constexpr const char* grammars[] = {
    R"g(root ::= ("a" | "bc"){0,3} [x-z]+ "!"?)g",
    R"g(root ::= item ("," item)*
item ::= "[" root? "]" | [a-c]+ | "\"" [^"]* "\"")g",
    "root ::= ([\xC3\xA0-\xC3\xBF] | [\xE3\x81\x81-\xE3\x82\x9F] | [a-b] | \"\xF0\x9F\x99\x82\")* \".\"",
    "root ::= [^a]* \"a\" .",
    R"g(root ::= [^a-z\n]{2,4} ("\n" root)?)g",
    R"g(root ::= x y
x ::= "p"? "q"*
y ::= x "r" | "s")g",
};

// Bytes that exercise every grammar above, including multi-byte characters cut anywhere.
const std::string alphabet[] = {"a", "b", "c", "x", "y", "z", "!", ",", "[", "]", "\"", "p", "q", "r", "s",
                                "\n", ".", "A", "\xC3", "\xA9", "\xE3", "\x81", "\x82", "\xF0", "\x9F", "\x99",
                                "\xC3\xA9", "\xE3\x81\x82", "\xF0\x9F\x99\x82", "\xFF", "\x80",
                                // lead bytes that restrict the next byte (overlong, surrogate, > U+10FFFF)
                                "\xE0", "\xED", "\xA0", "\x9F", "\xBF", "\xF4\x8F", "\xF4\x90", "\xF0\x90"};

std::string random_text(std::mt19937& rng, std::size_t max_len) {
  std::string s;
  const std::size_t n = rng() % (max_len + 1);
  for (std::size_t i = 0; i < n; ++i) s += alphabet[rng() % std::size(alphabet)];
  return s;
}

int classify(automaton& a, std::string_view text) {
  const auto s = a.advance(a.intern(a.initial_configs()), text);
  return s == 0 ? -1 : a.accepting(s) ? 1 : 0;
}

}  // namespace

TEST_CASE("automaton: same answers as the reference matcher on random texts") {
  std::mt19937 rng(1234);
  for (const char* g : grammars) {
    CAPTURE(std::string(g));
    const auto rules = std::make_shared<const rule_set>(parse_gbnf(g));
    automaton a(rules, byte_trie());
    const reference_matcher ref(*rules);
    int agree = 0, viable_seen = 0;
    for (int i = 0; i < 400; ++i) {
      // Half the texts are grown along viable bytes, so deep states are covered too.
      std::string text = random_text(rng, 6);
      if (i % 2 == 0) {
        text.clear();
        for (int k = 0; k < 12; ++k) {
          const std::string next = text + alphabet[rng() % std::size(alphabet)];
          if (classify(a, next) >= 0) text = next;
        }
      }
      for (std::size_t len = 0; len <= text.size(); ++len) {
        const std::string_view prefix(text.data(), len);
        const int want = ref.classify(prefix);
        CAPTURE(std::string(prefix));
        CHECK(classify(a, prefix) == want);
        agree += 1;
        viable_seen += want >= 0;
      }
    }
    CHECK(viable_seen > agree / 4);  // the texts reach into the language, not just rejections
  }
}

namespace {

// Pieces of 1-4 alphabet strings: multi-byte characters split across pieces, duplicates.
std::vector<std::string> random_pieces(std::mt19937& rng, std::size_t n) {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < n; ++i) {
    std::string p;
    for (std::size_t k = 0, len = 1 + rng() % 4; k < len; ++k) p += alphabet[rng() % std::size(alphabet)];
    v.push_back(p);
  }
  return v;
}

void check_mask_matches_allows(automaton& a, automaton::state_id s) {
  std::vector<std::uint64_t> words(a.mask_words());
  a.compute_mask(s, words.data());
  for (token_id t = 0; t < a.trie().n_vocab(); ++t) {
    CAPTURE(t);
    REQUIRE(strata::sampling::mask_allows(words, t) == a.allows(s, t));
  }
}

}  // namespace

TEST_CASE("automaton: the trie-walk mask equals per-token checks") {
  std::mt19937 rng(99);
  const auto trie = byte_trie(random_pieces(rng, 600));
  for (const char* g : grammars) {
    CAPTURE(std::string(g));
    const auto rules = std::make_shared<const rule_set>(parse_gbnf(g));
    automaton a(rules, trie);
    const reference_matcher ref(*rules);
    auto s = a.intern(a.initial_configs());
    std::string text;
    for (int step = 0; step < 25 && s != 0; ++step) {
      check_mask_matches_allows(a, s);
      // Every allowed text token's bytes keep the text viable for the reference too.
      std::vector<std::uint64_t> words(a.mask_words());
      a.compute_mask(s, words.data());
      std::vector<token_id> allowed;
      for (token_id t = 0; t < trie->n_vocab(); ++t)
        if (strata::sampling::mask_allows(words, t) && trie->kind(t) == token_kind::text) allowed.push_back(t);
      for (std::size_t k = 0; k < allowed.size(); k += 7) CHECK(ref.classify(text + std::string(trie->piece(allowed[k]))) >= 0);
      if (allowed.empty()) break;
      const token_id t = allowed[rng() % allowed.size()];
      text += trie->piece(t);
      s = a.advance(s, trie->piece(t));
    }
  }
}

TEST_CASE("automaton: end-of-generation only when the grammar may end, a flush changes no answer") {
  const auto trie = byte_trie({"ab", "abc", "c!"});
  const token_id eog = trie->n_vocab() - 1;
  const auto rules = std::make_shared<const rule_set>(parse_gbnf(R"g(root ::= "ab" "c"? ("!" | "?")*)g"));
  automaton big(rules, trie);
  automaton tiny(rules, trie, {.max_states = 2, .mask_slots = 1});
  matcher m1(std::make_shared<automaton>(rules, trie));
  matcher m2(std::make_shared<automaton>(rules, trie, automaton_options{.max_states = 2, .mask_slots = 1}));
  for (const std::string piece : {"ab", "c!", "!", "?"}) {
    for (token_id t = 0; t < trie->n_vocab(); ++t) REQUIRE(m1.allows(t) == m2.allows(t));
    const auto w1 = m1.allowed();
    const std::vector<std::uint64_t> copy(w1.begin(), w1.end());
    const auto w2 = m2.allowed();
    CHECK(std::vector<std::uint64_t>(w2.begin(), w2.end()) == copy);
    CHECK(m1.allows(eog) == (piece != "ab"));
    for (token_id t = 0; t < trie->n_vocab(); ++t)
      if (trie->piece(t) == piece) {
        m1.accept(t);
        m2.accept(t);
        break;
      }
  }
  CHECK(m2.automaton_ref().stats().flushes > 0);
  CHECK(m1.can_end());
  m1.accept(eog);
  CHECK(m1.ended());
  CHECK_FALSE(m1.allows('!'));
  CHECK_THROWS_WITH_AS(m1.accept('!'), "grammar: token 33 '!' after the end of the grammar", grammar_error);
}

TEST_CASE("matcher: rejected tokens, accept_bytes, finished, copies") {
  const auto a = compile(R"g(root ::= "{" [0-9]{1,2} "}")g");
  matcher m(a);
  CHECK_THROWS_WITH_AS(m.accept('x'), "grammar: token 120 'x' is not allowed by the grammar here", grammar_error);
  CHECK_FALSE(m.accept_bytes("{x"));
  CHECK(m.accept_bytes("{4"));
  matcher fork = m;  // n > 1 choices: independent positions on one automaton
  m.accept('2');
  CHECK_FALSE(m.allows('3'));
  CHECK(fork.allows('3'));
  CHECK_FALSE(m.finished());
  m.accept('}');
  CHECK(m.finished());
  CHECK(m.can_end());
  m.reset();
  CHECK(m.allows('{'));
  CHECK_FALSE(m.can_end());
}

TEST_CASE("sampler: constraint modes") {
  using namespace strata::sampling;
  const auto a = compile(R"g(root ::= [a-c] [x-y])g");
  const auto n = a->trie().n_vocab();
  std::vector<float> logits(static_cast<std::size_t>(n), 0.0f);
  logits['z'] = 9.0f;  // best overall, never allowed
  logits['b'] = 5.0f;
  logits['y'] = 4.0f;
  logits['c'] = 3.0f;
  sampler_params greedy;
  greedy.temperature = 0.0f;
  for (const auto mode : {constraint_mode::mask_first, constraint_mode::check_first}) {
    sampler s(greedy, n);
    matcher m(a);
    const token_id t = s.sample(logits, m, mode);
    CHECK(t == 'b');
    m.accept(t);
    CHECK(s.sample(logits, m, mode) == 'y');
  }
  // With a logit bias the greedy path goes through the candidate list; the mask still holds.
  greedy.logit_bias = {{'c', 10.0f}};
  sampler biased(greedy, n);
  matcher m(a);
  CHECK(biased.sample(logits, m) == 'c');

  sampler_params hot;
  hot.temperature = 1.5f;
  hot.top_k = 0;
  hot.top_p = 1.0f;
  hot.min_p = 0.0f;
  hot.seed = 3;
  sampler s(hot, n);
  for (int i = 0; i < 200; ++i) {
    matcher mm(a);
    const token_id t = s.sample(logits, mm, i % 2 ? constraint_mode::check_first : constraint_mode::mask_first);
    CHECK((t >= 'a' && t <= 'c'));
    // mask_first draws from the constrained set; check_first's first draw from the whole one.
    if (i % 2 == 0)
      for (const auto& c : s.last_candidates()) CHECK(mm.allows(c.id));
  }
  CHECK(s.constraint_stats().masked > 0);

  matcher done(a);
  done.accept('a');
  done.accept('x');
  done.accept(n - 1);
  CHECK_THROWS_WITH_AS(s.sample(logits, done), "sampling: the constraint allows no token", strata::error);
}

TEST_CASE("automaton: Qwen3 vocabulary, JSON grammar: masks match per-token checks, document tokens pass") {
  const auto path = fixture_dir() / "tokenizer" / "ggml-vocab-qwen3.gguf";
  const strata::mapped_file file(path.string());
  const strata::gguf::reader reader(file.bytes(), path.string());
  const auto tok = strata::tokenizer::tokenizer::from_gguf(reader);
  const auto trie = std::make_shared<const token_trie>(token_trie::from_tokenizer(tok));
  CHECK(trie->n_vocab() == tok.n_vocab());
  CHECK(trie->kind(tok.eos()) == token_kind::end_of_generation);
  const auto im_start = tok.encode("<|im_start|>", false, true);
  REQUIRE(im_start.size() == 1);
  CHECK(trie->kind(im_start[0]) == token_kind::excluded);

  const auto a = compile_gbnf(R"g(
root   ::= object
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ws ":" ws value ws
value  ::= object | string | [0-9]+ | "true"
string ::= "\"" [^"\\]* "\""
ws     ::= [ \n]{0,4}
)g", trie);
  const std::string doc = R"({"name": "Zoë", "n": 12, "nested": {"ok": true, "日本": "語"}})";
  const auto ids = tok.encode(doc, false, false);
  matcher m(a);
  int checked = 0;
  for (const auto id : ids) {
    if (checked++ < 4) check_mask_matches_allows(*a, m.state());
    REQUIRE(m.allows(id));
    m.accept(id);
  }
  CHECK(m.can_end());
  CHECK(m.allows(tok.eos()));
  CHECK_FALSE(m.allows(im_start[0]));
}
