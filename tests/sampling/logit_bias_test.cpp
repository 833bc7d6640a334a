// Logit bias: additive, repeated entries add up, -inf bans a token outright.
#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include "helpers.hpp"
#include "strata/sampling/chain.hpp"
#include "strata/sampling/logit_bias.hpp"

using namespace sampling_test;

TEST_CASE("logit_bias: adds to the logit, entries for one token add up") {
  cand_set s({1.0f, 2.0f, 3.0f});
  const std::vector<logit_bias_entry> b = {{0, 0.5f}, {2, -1.0f}, {0, 0.25f}};
  apply_logit_bias(s.c, b);
  CHECK(s.c.data[0].logit == 1.75f);
  CHECK(s.c.data[1].logit == 2.0f);
  CHECK(s.c.data[2].logit == 2.0f);
  const std::vector<logit_bias_entry> bad = {{3, 1.0f}};
  CHECK_THROWS_WITH_AS(apply_logit_bias(s.c, bad), doctest::Contains("outside the vocabulary"), strata::error);
}

TEST_CASE("logit_bias: -inf bans a token in sampling and greedy") {
  // Token 0 dominates (p ~ 1 - 3e-9) unless banned.
  const std::vector<float> logits = {20.0f, 0.0f, 0.0f, 0.0f};
  sampler_params p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  p.seed = 11;
  p.logit_bias = {{0, -inf}};
  sampler s(p, 4);
  for (int i = 0; i < 3000; ++i) REQUIRE(s.sample(logits) != 0);

  p.temperature = 0.0f;
  sampler g(p, 4);
  CHECK(g.sample(logits) == 1);  // argmax of the rest, lowest id

  // Banning everything is an error, not a silent pick.
  p.logit_bias = {{0, -inf}, {1, -inf}, {2, -inf}, {3, -inf}};
  CHECK_THROWS_WITH_AS(sampler(p, 4).sample(logits), doctest::Contains("banned"), strata::error);
  p.temperature = 0.8f;
  CHECK_THROWS_WITH_AS(sampler(p, 4).sample(logits), doctest::Contains("banned"), strata::error);
}
