// top_k / top_p / min_p / temperature / softmax / greedy / dist on hand-made distributions with
// known kept sets, plus the fast top_p (growing sorted prefix) against a full-sort reference.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "helpers.hpp"
#include "strata/sampling/dist.hpp"
#include "strata/sampling/greedy.hpp"
#include "strata/sampling/min_p.hpp"
#include "strata/sampling/softmax.hpp"
#include "strata/sampling/temperature.hpp"
#include "strata/sampling/top_k.hpp"
#include "strata/sampling/top_p.hpp"

using namespace sampling_test;
using ids = std::vector<token_id>;

namespace {
// p = {0.1, 0.4, 0.2, 0.3}: descending order is ids 1, 3, 2, 0 with cumulative 0.4, 0.7, 0.9, 1.0.
const std::vector<float> four = log_probs({0.1, 0.4, 0.2, 0.3});

// Float probabilities are within a few ulp of the exact ones; 1e-6 is ~10 ulp at 0.4.
constexpr double filter_prob_tol = 1e-6;
}  // namespace

TEST_CASE("top_k: keeps the k highest logits, sorted, lower id wins a tie at the boundary") {
  cand_set s({1.0f, 2.0f, 2.0f, 2.0f, 0.0f, 3.0f});
  top_k(s.c, 3);
  REQUIRE(s.c.size == 3);
  CHECK(s.c.data[0].id == 5);
  CHECK(s.c.data[1].id == 1);
  CHECK(s.c.data[2].id == 2);
  CHECK(s.c.n_sorted == 3);

  cand_set t(four);
  top_k(t.c, 2);
  CHECK(t.ids() == ids{1, 3});

  cand_set u(four);
  top_k(u.c, 0);  // disabled
  CHECK(u.c.size == 4);
  top_k(u.c, 4);  // k >= size: unchanged
  CHECK(u.c.size == 4);
  top_k(u.c, 1);
  CHECK(u.ids() == ids{1});
}

TEST_CASE("top_k: selection on a large vocabulary equals a full sort") {
  std::vector<float> logits(50000);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = float((i * 7919) % 1000) / 37.0f;  // many ties
  for (std::int32_t k : {1, 5, 40, 999, 1000, 1001, 25000}) {
    cand_set s(logits);
    top_k(s.c, k);
    cand_set r(logits);
    std::sort(r.c.data, r.c.data + r.c.size, [](const token_data& a, const token_data& b) {
      return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    });
    REQUIRE(s.c.size == std::size_t(k));
    for (std::int32_t i = 0; i < k; ++i) REQUIRE(s.c.data[i].id == r.c.data[i].id);
  }
}

TEST_CASE("top_p: smallest prefix reaching p, the crossing token kept") {
  const auto kept = [](float p) {
    cand_set s(four);
    top_p(s.c, p);
    return s.ids();
  };
  CHECK(kept(0.39f) == ids{1});
  CHECK(kept(0.5f) == ids{1, 3});
  CHECK(kept(0.65f) == ids{1, 3});
  CHECK(kept(0.8f) == ids{1, 2, 3});
  CHECK(kept(0.95f) == ids{0, 1, 2, 3});
  CHECK(kept(1.0f) == ids{0, 1, 2, 3});  // disabled
  CHECK(kept(1e-9f) == ids{1});          // the top token always survives
}

TEST_CASE("top_p: probabilities are over the current set (after top_k)") {
  // top_k 2 leaves {1: 0.4, 3: 0.3}, renormalized {4/7, 3/7}; p = 0.5 then keeps only id 1,
  // while top_p on the full set would keep {1, 3}.
  cand_set s(four);
  top_k(s.c, 2);
  top_p(s.c, 0.5f);
  CHECK(s.ids() == ids{1});
}

namespace {
// Reference top_p: weights summed in id order (as exp_weights does), full sort, linear scan.
std::vector<token_id> top_p_reference(const std::vector<float>& logits, float p) {
  cand_set r(logits);
  const double sum = exp_weights(r.c);
  std::sort(r.c.data, r.c.data + r.c.size, [](const token_data& a, const token_data& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  double cum = 0.0;
  std::vector<token_id> kept;
  for (std::size_t i = 0; i < r.c.size; ++i) {
    kept.push_back(r.c.data[i].id);
    cum += r.c.data[i].p;
    if (cum >= double(p) * sum) break;
  }
  return kept;
}
}  // namespace

TEST_CASE("top_p: the bucketed and growing-prefix paths equal a full-sort reference") {
  // Rows over 4096 entries take the bucketed path (sort_nucleus), smaller ones the growing prefix.
  strata::sampling::rng g(77);
  std::vector<float> flat(50000);
  for (auto& l : flat) l = static_cast<float>(12.0 * g.uniform() - 6.0);
  flat[123] = 9.0f;  // a clear winner, so small p keeps a few tokens and large p thousands
  std::vector<float> peaked(30000);  // a few strong tokens over a wide tail, some banned, many ties
  for (std::size_t i = 0; i < peaked.size(); ++i)
    peaked[i] = i % 97 == 0 ? -inf : float(int(40.0 * g.uniform() * g.uniform())) / 4.0f - 5.0f;
  const std::vector<float> small(flat.begin(), flat.begin() + 3000);

  const std::vector<float>* rows[] = {&flat, &peaked, &small};
  for (const std::vector<float>* logits : rows) {
    for (float p : {0.01f, 0.1f, 0.5f, 0.9f, 0.99f, 0.999f}) {
      cand_set s(*logits);
      top_p(s.c, p);
      const auto want = top_p_reference(*logits, p);
      CAPTURE(p);
      CAPTURE(logits->size());
      REQUIRE(s.c.size == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) REQUIRE(s.c.data[i].id == want[i]);
    }
  }
}

TEST_CASE("top_p: equal logits keep exactly the needed count, lowest ids first") {
  cand_set s(std::vector<float>(5000, 0.0f));
  top_p(s.c, 0.5f);  // every weight is 1: 2500 reach 2500 = 0.5 * 5000 exactly
  REQUIRE(s.c.size == 2500);
  CHECK(s.ids().front() == 0);
  CHECK(s.ids().back() == 2499);
}

TEST_CASE("min_p: keeps p >= min_p * p_max") {
  const auto kept = [](float p) {
    cand_set s(four);
    min_p(s.c, p);
    return s.ids();
  };
  CHECK(kept(0.6f) == ids{1, 3});          // threshold 0.24
  CHECK(kept(0.3f) == ids{1, 2, 3});       // threshold 0.12
  CHECK(kept(0.2f) == ids{0, 1, 2, 3});    // threshold 0.08
  CHECK(kept(1.0f) == ids{1});             // only the maximum
  CHECK(kept(0.0f) == ids{0, 1, 2, 3});    // disabled
}

TEST_CASE("min_p: keeps the order and the sorted prefix of its input") {
  cand_set s({0.0f, 5.0f, 4.0f, 1.0f, 4.5f, -3.0f});
  top_k(s.c, 4);  // sorted: 1 (5), 4 (4.5), 2 (4), 3 (1)
  min_p(s.c, std::exp(-0.75f));  // threshold logit 4.25
  REQUIRE(s.c.size == 2);
  CHECK(s.c.data[0].id == 1);
  CHECK(s.c.data[1].id == 4);
  CHECK(s.c.n_sorted == 2);

  cand_set u({0.0f, 5.0f, 4.0f, 1.0f, 4.5f, -3.0f});  // unsorted input stays in id order
  min_p(u.c, std::exp(-1.5f));  // threshold 3.5
  REQUIRE(u.c.size == 3);
  CHECK(u.c.data[0].id == 1);
  CHECK(u.c.data[1].id == 2);
  CHECK(u.c.data[2].id == 4);
}

TEST_CASE("temperature: divides logits, and t <= 0 keeps the argmax (lowest id on ties)") {
  cand_set s({1.0f, -2.0f, 4.0f});
  temperature(s.c, 0.5f);
  CHECK(s.c.data[0].logit == 2.0f);
  CHECK(s.c.data[1].logit == -4.0f);
  CHECK(s.c.data[2].logit == 8.0f);

  cand_set g({1.0f, 3.0f, 3.0f, 2.0f});
  temperature(g.c, 0.0f);
  CHECK(g.ids() == ids{1});
  cand_set h({1.0f, 3.0f, 3.0f, 2.0f});
  temperature(h.c, -1.0f);
  CHECK(h.ids() == ids{1});
}

TEST_CASE("softmax: normalized probabilities, banned tokens get exactly 0") {
  cand_set s(four);
  softmax(s.c);
  const double want[] = {0.1, 0.4, 0.2, 0.3};
  for (int i = 0; i < 4; ++i) CHECK(s.c.data[i].p == doctest::Approx(want[i]).epsilon(filter_prob_tol));

  cand_set b({0.0f, -inf, 0.0f});
  softmax(b.c);
  CHECK(b.c.data[0].p == 0.5f);
  CHECK(b.c.data[1].p == 0.0f);
  CHECK(b.c.data[2].p == 0.5f);

  cand_set nan_row({std::numeric_limits<float>::quiet_NaN(), 1.0f});
  CHECK(nan_row.c.data[0].logit == -inf);  // fill() turns NaN into a ban
  softmax(nan_row.c);
  CHECK(nan_row.c.data[1].p == 1.0f);
}

TEST_CASE("greedy: argmax with the lowest index on ties") {
  cand_set s({1.0f, 3.0f, 3.0f, 2.0f});
  CHECK(s.c.data[greedy(s.c)].id == 1);
  CHECK(argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}) == 1);
  CHECK(argmax(std::vector<float>{-inf, -inf}) == 0);
  CHECK(argmax(std::vector<float>{std::numeric_limits<float>::quiet_NaN(), -1.0f}) == 1);
  // Ties resolve by id even after the set was reordered.
  cand_set r({2.0f, 0.0f, 2.0f});
  std::swap(r.c.data[0], r.c.data[2]);
  CHECK(r.c.data[greedy(r.c)].id == 0);
}

TEST_CASE("dist: never draws a banned token, and a single candidate still advances the RNG") {
  rng g(3);
  for (int i = 0; i < 2000; ++i) {
    cand_set s({-inf, 0.0f, -inf, 1.0f, -inf});
    const std::size_t k = dist(s.c, g);
    REQUIRE((s.c.data[k].id == 1 || s.c.data[k].id == 3));
  }
  rng a(5), b(5);
  cand_set one({0.0f});
  CHECK(dist(one.c, a) == 0);
  CHECK(one.c.data[0].p == 1.0f);
  b.uniform();
  CHECK(a.uniform() == b.uniform());

  cand_set banned({-inf, -inf});
  CHECK_THROWS_WITH_AS(dist(banned.c, a), doctest::Contains("banned"), strata::error);
}
