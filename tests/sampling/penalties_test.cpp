// Repetition / frequency / presence penalties: numeric examples derived by hand, the window
// sliding, and each distinct token penalized once.
#include <doctest/doctest.h>

#include <vector>

#include "helpers.hpp"
#include "strata/sampling/penalties.hpp"

using namespace sampling_test;

TEST_CASE("penalties: llama.cpp formula on a hand-made example") {
  // History 0, 1, 0: counts {0: 2, 1: 1}. repeat 2, frequency 0.5, presence 0.25.
  //   token 0: 2.0 > 0 -> 2.0 / 2 = 1.0, then - (2 * 0.5 + 0.25) = -0.25
  //   token 1: -1.0 <= 0 -> -1.0 * 2 = -2.0, then - (1 * 0.5 + 0.25) = -2.75
  //   token 2 (0.0, never seen) and token 3 unchanged.
  penalty_window w(4, 64);
  for (token_id t : {0, 1, 0}) w.accept(t);
  cand_set s({2.0f, -1.0f, 0.0f, 3.0f});
  w.apply(s.c, 2.0f, 0.5f, 0.25f);
  CHECK(s.c.data[0].logit == -0.25f);
  CHECK(s.c.data[1].logit == -2.75f);
  CHECK(s.c.data[2].logit == 0.0f);
  CHECK(s.c.data[3].logit == 3.0f);
  CHECK(w.count(0) == 2);
  CHECK(w.count(1) == 1);
  CHECK(w.distinct().size() == 2);
}

TEST_CASE("penalties: repetition penalty applies once per distinct token, zero logits multiply") {
  penalty_window w(3, 64);
  for (int i = 0; i < 10; ++i) w.accept(0);  // ten occurrences: still one division
  w.accept(2);
  cand_set s({3.0f, 1.0f, 0.0f});
  w.apply(s.c, 1.5f, 0.0f, 0.0f);
  CHECK(s.c.data[0].logit == 2.0f);
  CHECK(s.c.data[1].logit == 1.0f);
  CHECK(s.c.data[2].logit == 0.0f);  // 0 * 1.5
}

TEST_CASE("penalties: only the last repeat_last_n tokens count") {
  penalty_window w(4, 2);
  for (token_id t : {0, 1, 2}) w.accept(t);  // window {1, 2}
  CHECK(w.size() == 2);
  CHECK(w.count(0) == 0);
  cand_set s({1.0f, 1.0f, 1.0f, 1.0f});
  w.apply(s.c, 2.0f, 0.0f, 1.0f);
  CHECK(s.c.data[0].logit == 1.0f);
  CHECK(s.c.data[1].logit == -0.5f);  // 1 / 2 - 1
  CHECK(s.c.data[2].logit == -0.5f);
  CHECK(s.c.data[3].logit == 1.0f);

  // Counts follow the window: 2, 2, 2 then 3 evicts two of them.
  penalty_window c(4, 3);
  for (token_id t : {2, 2, 2}) c.accept(t);
  CHECK(c.count(2) == 3);
  c.accept(3);
  CHECK(c.count(2) == 2);
  c.accept(3);
  c.accept(3);
  CHECK(c.count(2) == 0);
  CHECK(c.count(3) == 3);
  CHECK(c.distinct().size() == 1);
}

TEST_CASE("penalties: frequency and presence alone (OpenAI), negative values allowed") {
  penalty_window w(3, 16);
  for (token_id t : {1, 1, 1, 2}) w.accept(t);
  cand_set s({0.0f, 0.0f, 0.0f});
  w.apply(s.c, 1.0f, 0.5f, 1.0f);
  CHECK(s.c.data[0].logit == 0.0f);
  CHECK(s.c.data[1].logit == -2.5f);  // 3 * 0.5 + 1
  CHECK(s.c.data[2].logit == -1.5f);  // 1 * 0.5 + 1
  cand_set n({0.0f, 0.0f, 0.0f});
  w.apply(n.c, 1.0f, -1.0f, 0.0f);
  CHECK(n.c.data[1].logit == 3.0f);
}

TEST_CASE("penalties: reset, range checks, inactive window") {
  penalty_window w(4, 8);
  w.accept(3);
  w.reset();
  CHECK(w.count(3) == 0);
  CHECK(w.distinct().empty());
  CHECK_THROWS_AS(w.accept(4), strata::error);
  CHECK_THROWS_AS(w.accept(-1), strata::error);

  w.accept(1);
  cand_set partial({1.0f, 1.0f});  // not the full vocabulary
  CHECK_THROWS_WITH_AS(w.apply(partial.c, 2.0f, 0.0f, 0.0f), doctest::Contains("full vocabulary"), strata::error);

  penalty_window off;
  off.accept(12345);  // inactive: nothing recorded, nothing checked
  cand_set s({1.0f});
  off.apply(s.c, 2.0f, 1.0f, 1.0f);
  CHECK(s.c.data[0].logit == 1.0f);
}
