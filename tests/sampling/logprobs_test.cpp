// Log-probabilities and top-k (logprobs.hpp) against a naive reference (sort the whole row,
// softmax in double).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "strata/sampling/logprobs.hpp"

using namespace strata::sampling;

namespace {
constexpr float ninf = -std::numeric_limits<float>::infinity();

std::vector<float> random_row(std::size_t n, std::uint32_t seed, bool with_ties) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = with_ties ? std::round(d(g)) : d(g);  // rounding makes many ties
  return v;
}
}  // namespace

TEST_CASE("logprobs: chosen token and top k equal a full sort of log_softmax") {
  for (const bool ties : {false, true}) {
    for (std::uint32_t seed = 1; seed <= 20; ++seed) {
      const std::size_t n = 1 + seed * 97;
      auto row = random_row(n, seed, ties);
      if (seed % 5 == 0) row[seed % n] = ninf;  // a banned token
      double sum = 0;
      float m = ninf;
      for (float l : row) m = std::max(m, l);
      for (float l : row) sum += std::exp(double(l) - m);
      const double lse = m + std::log(sum);
      std::vector<token_id> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](token_id a, token_id b) { return row[a] > row[b]; });

      std::vector<token_logprob> top(20);
      const token_id chosen = token_id(seed * 31 % n);
      const double lse2 = log_sum_exp(row);
      const std::size_t n_top = top_logprobs(row, lse2, top);
      const float lp = logprob_of(row[chosen], lse2);
      // 1e-5: the reference and the header both sum in double; float rounding of l - lse remains.
      if (row[chosen] == ninf) CHECK(lp == ninf);
      else CHECK(lp == doctest::Approx(row[chosen] - lse).epsilon(1e-5));
      REQUIRE(n_top == std::min<std::size_t>(20, n));
      for (std::size_t i = 0; i < n_top; ++i) {
        CHECK(top[i].id == order[i]);
        CHECK(top[i].logprob == doctest::Approx(row[order[i]] - lse).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("logprobs: k = 0, k larger than the row, degenerate rows") {
  const std::vector<float> row = {0.0f, 1.0f};
  std::vector<token_logprob> none, many(5);
  const double lse = log_sum_exp(row);
  CHECK(logprob_of(row[1], lse) == doctest::Approx(std::log(std::exp(1.0) / (1 + std::exp(1.0)))));
  CHECK(top_logprobs(row, lse, none) == 0);
  CHECK(top_logprobs(row, lse, many) == 2);
  CHECK(many[0].id == 1);
  const std::vector<float> banned = {ninf, ninf};
  CHECK(log_sum_exp(banned) == ninf);
  const std::vector<float> nan_row = {std::nanf(""), 0.0f};
  CHECK(log_sum_exp(nan_row) == doctest::Approx(0.0));
  CHECK(logprob_of(nan_row[0], 0.0) == ninf);
}
