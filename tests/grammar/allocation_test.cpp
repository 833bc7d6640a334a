// The per-token path of a warm grammar does not allocate: once the states a generation visits
// exist (the first pass), a second pass over the same tokens (mask, check, accept) makes no heap
// allocation. The counting operator new below applies to this whole test binary; it only counts.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "strata/grammar/json_schema.hpp"

// The counting allocator (one TU per test binary includes it).
#include "support/counting_allocator.hpp"

using namespace grammar_test;

TEST_CASE("a warm matcher masks, checks and accepts without allocating") {
  const auto g = json_schema_to_gbnf(std::string_view(
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "n": {"type": "integer"}},
          "required": ["name", "n"]})"));
  // Multi-byte pieces too, so partial characters are part of the walk.
  const auto a = compile_gbnf(g.gbnf, byte_trie({"{\"", "name", "\": \"", "Zo\xC3\xAB", "\xC3", "\xAB\"", ", \"n\": ", "42", "}"}));
  const std::vector<std::string> doc = {"{\"", "name", "\": \"", "Zo\xC3\xAB", " ", "\xC3", "\xAB\"", ", \"n\": ", "42", "}"};
  std::vector<token_id> ids;
  for (const auto& piece : doc)
    for (token_id t = 0; t < a->trie().n_vocab(); ++t)
      if (a->trie().kind(t) == token_kind::text && a->trie().piece(t) == piece) {
        ids.push_back(t);
        break;
      }
  REQUIRE(ids.size() == doc.size());
  for (int pass = 0; pass < 2; ++pass) {
    matcher m(a);
    const long before = counting_allocator::allocations.load();
    for (const token_id t : ids) {
      const auto mask = m.allowed();
      REQUIRE(strata::sampling::mask_allows(mask, t));
      REQUIRE(m.allows(t));
      m.accept(t);
    }
    REQUIRE(m.can_end());
    const long allocations = counting_allocator::allocations.load() - before;
    if (pass == 0) CHECK(allocations > 0);  // building states allocates
    else CHECK(allocations == 0);
  }
}
