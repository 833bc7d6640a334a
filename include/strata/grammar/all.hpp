// Grammar-constrained decoding: GBNF grammars (gbnf.hpp) compiled to a byte-level automaton over
// a vocabulary (automaton.hpp, token_trie.hpp), matched per generation (matcher.hpp, the
// sampler's token_constraint). JSON Schema -> GBNF is json_schema.hpp.
#pragma once
#include "strata/grammar/automaton.hpp"
#include "strata/grammar/char_class.hpp"
#include "strata/grammar/gbnf.hpp"
#include "strata/grammar/matcher.hpp"
#include "strata/grammar/rule_set.hpp"
#include "strata/grammar/token_trie.hpp"
#include "strata/grammar/lazy_matcher.hpp"
