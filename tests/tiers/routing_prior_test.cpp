#include "strata/tiers/routing_prior.hpp"

#include <doctest/doctest.h>

#include <numeric>

using namespace strata::tiers;

TEST_CASE("routing prior: Qwen3-30B-A3B's measured shape, 65 of 128 experts hold 90% of the pairs") {
  const auto s = routing_shares(128, 8);
  CHECK(std::accumulate(s.begin(), s.end(), 0.0) == doctest::Approx(1.0));
  CHECK(s[0] == doctest::Approx(0.043));
  CHECK(cache_hit_rate(128, 8, 65) == doctest::Approx(0.9).epsilon(0.002));
  CHECK(cache_hit_rate(16, 1, 8) == doctest::Approx(0.9).epsilon(0.002));  // Llama 4 Scout's 16, top-1
  CHECK_THROWS_AS(routing_shares(8, 9), strata::error);
}

TEST_CASE("routing prior: a cache of the most-routed experts hits more than uniform routing's slots / experts") {
  for (const auto& [n, k] : {std::pair{128u, 8u}, {64u, 4u}, {16u, 1u}, {8u, 2u}}) {
    CAPTURE(n);
    double last = 0;
    for (std::uint32_t slots = 0; slots <= n; ++slots) {
      const double hit = cache_hit_rate(n, k, slots);
      CHECK(hit >= last);  // never fewer hits with more slots
      if (slots > 0 && slots < n) CHECK(hit > double(slots) / n);
      last = hit;
    }
    CHECK(cache_hit_rate(n, k, 0) == 0.0);
    CHECK(last == doctest::Approx(1.0));
  }
}

TEST_CASE("routing prior: a step's misses, k / n x the cold mass for one token, the slots' complement for long prompts") {
  const std::uint32_t n = 128, k = 8;
  for (const std::uint32_t slots : {8u, 72u, 120u}) {
    CAPTURE(slots);
    CHECK(cache_miss_share(n, k, slots, 1) == doctest::Approx(double(k) / n * (1 - cache_hit_rate(n, k, slots))));
    CHECK(cache_miss_share(n, k, slots, 1 << 16) == doctest::Approx(double(n - slots) / n));
    double last = 0;
    for (std::uint32_t batch = 1; batch <= 4096; batch *= 2) {
      const double m = cache_miss_share(n, k, slots, batch);
      CHECK(m > last);  // a longer step touches more cold experts ...
      CHECK(m <= double(n - slots) / n + 1e-12);  // ... each read once at most
      last = m;
    }
  }
  CHECK(cache_miss_share(n, k, n, 512) == 0.0);
}

TEST_CASE("routing prior: a step's hit rate per distinct expert is the token's for one token and falls to slots / n for long prompts") {
  for (const std::uint32_t slots : {8u, 72u, 120u}) {
    CAPTURE(slots);
    CHECK(cache_step_hit_rate(128, 8, slots, 1) == doctest::Approx(cache_hit_rate(128, 8, slots)));
    CHECK(cache_step_hit_rate(128, 8, slots, 1 << 16) == doctest::Approx(slots / 128.0));
    CHECK(cache_step_hit_rate(128, 8, slots, 64) < cache_step_hit_rate(128, 8, slots, 1));
  }
  CHECK(cache_step_hit_rate(128, 8, 128, 512) == 1.0);
}
