// Test support: the logits a model gives for a fixture run through the engine's session API,
// for the runtime suites that compare layouts and tiers against each other and llama.cpp.
#pragma once
#include <cstddef>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"

namespace strata::test {

// Every prompt position's logits, then those of `decode` greedy continuation tokens.
inline std::vector<float> prompt_and_decode_logits(strata::rt::model& m, const golden_run& run, std::size_t decode) {
  strata::rt::session s(m);
  std::vector<float> all;
  s.prefill(run.ids, &all);
  for (std::size_t k = 0; k < decode && k < run.greedy.size(); ++k) {
    const auto l = s.decode(run.greedy[k]);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

}  // namespace strata::test
