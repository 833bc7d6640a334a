// rng: the standard mt19937 stream, a portable [0, 1) draw, and equality with libstdc++'s
// uniform_real_distribution<double> (what llama.cpp's dist sampler uses on Linux).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "strata/sampling/rng.hpp"

using strata::sampling::rng;

TEST_CASE("rng: mt19937 stream is the standard one") {
  // [rand.predef]: the 10000th output of a default-constructed mt19937 (seed 5489) is 4123659995.
  rng g(5489);
  std::uint32_t v = 0;
  for (int i = 0; i < 10000; ++i) v = g.next_u32();
  CHECK(v == 4123659995u);
}

TEST_CASE("rng: same seed gives the same draws, different seeds differ") {
  const auto draws = [](std::uint64_t seed) {
    rng g(seed);
    std::vector<double> v;
    for (int i = 0; i < 64; ++i) v.push_back(g.uniform());
    return v;
  };
  CHECK(draws(1) == draws(1));
  CHECK(draws(1) != draws(2));
  // A wide seed is not its low 32 bits.
  CHECK(draws(0x1'0000'0001ull) != draws(1));
  CHECK(draws(0x1'0000'0001ull) == draws(0x1'0000'0001ull));

  rng g(99);
  const double first = g.uniform();
  g.uniform();
  g.reseed(99);
  CHECK(g.uniform() == first);
}

TEST_CASE("rng: uniform() lies in 0 <= u < 1 with the right mean and golden values") {
  rng g(2024);
  double sum = 0.0;
  constexpr int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = g.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
  }
  // Standard error of the mean of U(0,1) over 2e5 draws is 0.29/sqrt(2e5) = 6.5e-4; allow 5 sigma.
  CHECK(sum / n == doctest::Approx(0.5).epsilon(0.0033));

  // Golden draws: these must be bit-identical on every platform and standard library.
  rng h(42);
  const double golden[] = {0x1.97d47b66bfc3cp-1, 0x1.77aca8779b102p-3, 0x1.8f33a88f76c7fp-1, 0x1.3196582932836p-1};
  for (double want : golden) CHECK(h.uniform() == want);
}

#if defined(__GLIBCXX__)
TEST_CASE("rng: matches libstdc++ uniform_real_distribution<double>(0, 1) on mt19937") {
  for (std::uint32_t seed : {0u, 1u, 42u, 1234u, 0xFFFFFFFEu}) {
    rng g(seed);
    std::mt19937 mt(seed);
    std::uniform_real_distribution<double> d(0.0, 1.0);
    for (int i = 0; i < 100000; ++i) REQUIRE(g.uniform() == d(mt));
  }
}
#endif
