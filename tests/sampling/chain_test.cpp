// The full sampler: chain order on examples derived by hand, greedy ties, seeded determinism,
// chi-square goodness of fit of 20k draws, and no heap allocation per sampled token.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#include "helpers.hpp"
#include "strata/sampling/chain.hpp"

// The counting allocator (one TU per test binary includes it).
#include "support/counting_allocator.hpp"

using namespace sampling_test;

namespace {
// Thresholds for this file in one place.
// chi2_crit_df5 / df3: 0.999 quantiles of chi-square with 5 and 3 degrees of freedom. With a fixed
// seed the test is deterministic; a correct sampler would fail these at 1 seed in 1000.
constexpr double chi2_crit_df5 = 20.515;
constexpr double chi2_crit_df3 = 16.266;
// Probabilities in the candidate set are float softmax values: ~1e-7 relative, 1e-5 is slack
// for exp's few-ulp error on values derived from hand-picked logits.
constexpr double chain_prob_tol = 1e-5;

// Only the filters named by the test are on.
sampler_params plain(float temperature = 1.0f) {
  sampler_params p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1;
  return p;
}

struct kept {
  token_id id;
  double p;
};
// The last sample's candidate set sorted by id, for comparison with a hand-derived table.
void check_last(const sampler& s, std::vector<kept> want) {
  auto got = std::vector<token_data>(s.last_candidates().begin(), s.last_candidates().end());
  std::sort(got.begin(), got.end(), [](auto& a, auto& b) { return a.id < b.id; });
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].id == want[i].id);
    CHECK(got[i].p == doctest::Approx(want[i].p).epsilon(chain_prob_tol));
  }
}

// p = {0.5, 0.25, 0.15, 0.1}
const std::vector<float> quarter = log_probs({0.5, 0.25, 0.15, 0.1});
}  // namespace

TEST_CASE("chain: top_p sees the distribution before temperature") {
  // top_p 0.7 on {0.5, 0.25, 0.15, 0.1}: cumulative 0.5, 0.75 -> keeps {0, 1}. Temperature 0.5
  // then squares the ratios: {0.25, 0.0625} -> {0.8, 0.2}. (Temperature first would give
  // {0.725, 0.181, 0.065, 0.029} and top_p 0.7 would keep only token 0.)
  auto p = plain(0.5f);
  p.top_p = 0.7f;
  sampler s(p, 4);
  s.sample(quarter);
  check_last(s, {{0, 0.8}, {1, 0.2}});
}

TEST_CASE("chain: min_p sees the distribution before temperature") {
  // min_p 0.25: threshold 0.125 keeps {0, 1, 2}. Temperature 0.5: {0.25, 0.0625, 0.0225} / 0.335.
  // (Temperature first: 0.0225 / 0.25 = 0.09 < 0.25 would drop token 2.)
  auto p = plain(0.5f);
  p.min_p = 0.25f;
  sampler s(p, 4);
  s.sample(quarter);
  check_last(s, {{0, 0.25 / 0.335}, {1, 0.0625 / 0.335}, {2, 0.0225 / 0.335}});
}

TEST_CASE("chain: top_k runs before top_p") {
  // top_k 2 -> {0.5, 0.25} renormalized {2/3, 1/3}; top_p 0.6 then keeps token 0 alone.
  // (top_p first on the full set: 0.5, 0.75 >= 0.6 keeps {0, 1}, and top_k 2 keeps both.)
  auto p = plain();
  p.top_k = 2;
  p.top_p = 0.6f;
  sampler s(p, 4);
  CHECK(s.sample(quarter) == 0);
  check_last(s, {{0, 1.0}});
}

TEST_CASE("chain: all defaults on a hand-derived example") {
  // Defaults: top_k 40 (no-op on 6 tokens), top_p 0.95, min_p 0.05, temperature 0.8.
  // p = {0.40, 0.30, 0.16, 0.10, 0.03, 0.01}: top_p cumulative 0.40 0.70 0.86 0.96 keeps 4 (token 4
  // at 0.03 would pass min_p's 0.05 * 0.40 = 0.02, so top_p is what drops it); min_p keeps all 4;
  // temperature 0.8 turns p_i into p_i^1.25 normalized over the four.
  const std::vector<double> p6 = {0.40, 0.30, 0.16, 0.10, 0.03, 0.01};
  sampler_params p;
  p.seed = 3;
  sampler s(p, 6);
  s.sample(log_probs(p6));
  double z = 0;
  for (int i = 0; i < 4; ++i) z += std::pow(p6[i], 1.25);
  check_last(s, {{0, std::pow(0.40, 1.25) / z},
                 {1, std::pow(0.30, 1.25) / z},
                 {2, std::pow(0.16, 1.25) / z},
                 {3, std::pow(0.10, 1.25) / z}});
}

TEST_CASE("chain: logit_bias runs before penalties (llama.cpp's common_sampler_init order)") {
  // Token 0 was seen; bias -2, repeat penalty 2. logit_bias first: 1 - 2 = -1 <= 0 -> -1 * 2 = -2.
  // (Penalties first would give 1 / 2 - 2 = -1.5.) Token 1 keeps 0.5, so p0 / p1 = exp(-2.5).
  auto p = plain();
  p.repeat_penalty = 2.0f;
  p.logit_bias = {{0, -2.0f}};
  sampler s(p, 3);
  s.accept(0);
  s.sample(std::vector<float>{1.0f, 0.5f, -30.0f});
  double p0 = 0, p1 = 0;
  for (const auto& d : s.last_candidates()) {
    if (d.id == 0) p0 = d.p;
    if (d.id == 1) p1 = d.p;
  }
  CHECK(std::log(p0 / p1) == doctest::Approx(-2.5).epsilon(1e-5));
}

TEST_CASE("chain: penalties run before top_k") {
  // Token 0 (logit 5) was seen; repeat penalty 10 -> 0.5, so top_k 2 keeps tokens 1 and 2.
  auto p = plain();
  p.repeat_penalty = 10.0f;
  p.top_k = 2;
  sampler s(p, 4);
  s.accept(0);
  s.sample(std::vector<float>{5.0f, 4.0f, 3.0f, 0.0f});
  const auto c = s.last_candidates();
  REQUIRE(c.size() == 2);
  CHECK(c[0].id == 1);
  CHECK(c[1].id == 2);
  // Without accept() there is nothing to penalize.
  sampler fresh(p, 4);
  fresh.sample(std::vector<float>{5.0f, 4.0f, 3.0f, 0.0f});
  CHECK(fresh.last_candidates()[0].id == 0);
}

TEST_CASE("chain: greedy is argmax after bias and penalties, lowest id on ties, seed-independent") {
  auto p = plain(0.0f);
  p.top_k = 40;
  p.top_p = 0.5f;
  p.min_p = 0.5f;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    p.seed = seed;
    sampler s(p, 4);
    CHECK(s.sample(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}) == 1);
    check_last(s, {{1, 1.0}});
  }
  CHECK_THROWS_WITH_AS(sampler(p, 2).sample(std::vector<float>{-inf, -inf}), doctest::Contains("banned"),
                       strata::error);
  CHECK(sampler(p, 3).sample(std::vector<float>{std::numeric_limits<float>::quiet_NaN(), -1.0f, -2.0f}) == 1);
  // With a bias or penalties the logits are copied and changed first.
  p.logit_bias = {{1, -0.5f}};
  CHECK(sampler(p, 4).sample(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}) == 2);
  p.logit_bias.clear();
  p.repeat_penalty = 2.0f;
  sampler r(p, 4);
  r.accept(1);
  r.accept(2);
  CHECK(r.sample(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}) == 3);  // 1.5, 1.5 < 2
}

TEST_CASE("chain: logits row size is checked, accept() range-checked") {
  sampler s(plain(), 4);
  CHECK_THROWS_WITH_AS(s.sample(std::vector<float>(5, 0.0f)), doctest::Contains("n_vocab"), strata::error);
  CHECK_THROWS_AS(s.accept(4), strata::error);
  CHECK_THROWS_AS(s.accept(-1), strata::error);
}

namespace {
// A 1000-token row with structure: a few strong tokens and a long tail.
std::vector<float> test_row() {
  std::vector<float> l(1000);
  for (std::size_t i = 0; i < l.size(); ++i) l[i] = float((i * 37) % 101) / 10.0f - float(i % 7);
  return l;
}
std::vector<token_id> run(sampler_params p, int n, bool accept = true) {
  sampler s(p, 1000);
  const auto row = test_row();
  std::vector<token_id> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(s.sample(row));
    if (accept) s.accept(out.back());
  }
  return out;
}
}  // namespace

TEST_CASE("chain: same seed gives the same sequence, different seeds differ") {
  sampler_params p;
  p.temperature = 1.5f;  // flat enough that sequences vary
  p.top_k = 0;
  p.top_p = 0.99f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.1f;
  p.seed = 7;
  const auto a = run(p, 400);
  CHECK(a == run(p, 400));
  p.seed = 8;
  CHECK(a != run(p, 400));
  p.seed = 0x1'0000'0007ull;
  CHECK(a != run(p, 400));

  // reset() replays; a copy continues identically.
  p.seed = 7;
  sampler s(p, 1000);
  const auto row = test_row();
  std::vector<token_id> first;
  for (int i = 0; i < 50; ++i) {
    first.push_back(s.sample(row));
    s.accept(first.back());
  }
  sampler fork = s;
  CHECK(fork.last_candidates().data() != s.last_candidates().data());
  CHECK(fork.last_candidates().size() == s.last_candidates().size());
  for (int i = 0; i < 50; ++i) {
    const token_id t = s.sample(row);
    s.accept(t);
    REQUIRE(fork.sample(row) == t);
    fork.accept(t);
  }
  s.reset();
  for (int i = 0; i < 50; ++i) {
    REQUIRE(s.sample(row) == first[i]);
    s.accept(first[i]);
  }
}

TEST_CASE("chain: golden sequence (portable: identical on every platform)") {
  sampler_params p;  // llama.cpp defaults
  p.seed = 1234;
  const std::vector<token_id> golden = {210, 693, 98,  966, 827, 868, 868, 693, 868, 161, 434, 210,
                                        322, 393, 161, 434, 483, 434, 322, 595, 259, 554, 35,  161};
  CHECK(run(p, int(golden.size()), false) == golden);
}

namespace {
// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<long>& observed, const std::vector<double>& prob, long n) {
  double x2 = 0;
  for (std::size_t i = 0; i < prob.size(); ++i) {
    const double e = prob[i] * double(n);
    x2 += (double(observed[i]) - e) * (double(observed[i]) - e) / e;
  }
  return x2;
}
}  // namespace

TEST_CASE("chain: 20k draws match the softmax distribution (chi-square, fixed seed)") {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  std::vector<double> prob;
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  for (float l : logits) prob.push_back(std::exp(double(l)) / z);

  sampler_params p = plain();
  p.seed = 20240601;
  sampler s(p, 6);
  constexpr long n = 20000;
  std::vector<long> count(6, 0);
  for (long i = 0; i < n; ++i) ++count[std::size_t(s.sample(logits))];
  const double x2 = chi_square(count, prob, n);
  CAPTURE(x2);
  CHECK(x2 < chi2_crit_df5);
}

TEST_CASE("chain: 20k draws through top_k, top_p, min_p and temperature (chi-square)") {
  // logits {3, 2.5, 2, 1, 0, -1, -5}, top_k 5, top_p 0.95, min_p 0.1, temperature 0.7.
  // Reference in double: top_k keeps 0..4; top_p over their softmax; min_p relative to the max;
  // then softmax of l / 0.7 over the survivors.
  const std::vector<float> logits = {3.0f, 2.5f, 2.0f, 1.0f, 0.0f, -1.0f, -5.0f};
  std::vector<double> l5(logits.begin(), logits.begin() + 5);
  double z = 0;
  for (double l : l5) z += std::exp(l);
  std::size_t keep = 0;
  for (double cum = 0; keep < 5;) {
    cum += std::exp(l5[keep++]) / z;
    if (cum >= 0.95) break;
  }
  std::vector<double> kept_l;
  for (std::size_t i = 0; i < keep; ++i)
    if (l5[i] >= l5[0] + std::log(0.1)) kept_l.push_back(l5[i]);
  // top_k softmax {0.463, 0.281, 0.170, 0.063, 0.023}: cumulative 0.914 at 3, 0.977 at 4 -> 4 kept;
  // min_p 0.1 * 0.463 = 0.046 keeps all 4.
  REQUIRE(kept_l.size() == 4);
  double zt = 0;
  for (double l : kept_l) zt += std::exp(l / 0.7);
  std::vector<double> prob;
  for (double l : kept_l) prob.push_back(std::exp(l / 0.7) / zt);

  sampler_params p;
  p.top_k = 5;
  p.top_p = 0.95f;
  p.min_p = 0.1f;
  p.temperature = 0.7f;
  p.seed = 99;
  sampler s(p, 7);
  constexpr long n = 20000;
  std::vector<long> count(7, 0);
  for (long i = 0; i < n; ++i) ++count[std::size_t(s.sample(logits))];
  CHECK(count[4] == 0);
  CHECK(count[5] == 0);
  CHECK(count[6] == 0);
  count.resize(4);
  const double x2 = chi_square(count, prob, n);
  CAPTURE(x2);
  CHECK(x2 < chi2_crit_df3);
}

TEST_CASE("chain: no heap allocation per sampled token, buffer reused") {
  constexpr std::int32_t n_vocab = 32000;
  std::vector<float> row(n_vocab);
  rng g(5);
  for (auto& l : row) l = static_cast<float>(10.0 * g.uniform());

  const auto check_no_alloc = [&](sampler_params p) {
    const long at_start = counting_allocator::allocations.load();
    sampler s(p, n_vocab);
    CHECK(counting_allocator::allocations.load() > at_start);  // the counter is live: construction allocates
    s.sample(row);
    const token_data* buffer = s.last_candidates().data();
    const long before = counting_allocator::allocations.load();
    bool same_buffer = true;
    for (int i = 0; i < 300; ++i) {
      const token_id t = s.sample(row);
      s.accept(t);
      same_buffer = same_buffer && s.last_candidates().data() == buffer;
    }
    const long allocs = counting_allocator::allocations.load() - before;
    CHECK(allocs == 0);
    CHECK(same_buffer);
  };
  sampler_params d;  // defaults
  d.seed = 1;
  check_no_alloc(d);
  d.repeat_penalty = 1.1f;
  d.frequency_penalty = 0.2f;
  d.presence_penalty = 0.1f;
  d.logit_bias = {{5, -inf}, {7, 2.0f}};
  check_no_alloc(d);
  d.top_k = 0;  // top_p over the whole vocabulary: the growing-prefix path
  check_no_alloc(d);
  d.temperature = 0.0f;  // greedy over changed logits
  check_no_alloc(d);
  sampler_params plain_greedy;  // greedy straight over the row
  plain_greedy.temperature = 0.0f;
  check_no_alloc(plain_greedy);
}
