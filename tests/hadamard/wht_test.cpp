// Walsh–Hadamard transform: the fast path equals the scalar reference bit for bit and the dense
// Sylvester matrix H·x/√n; it preserves norms and is its own inverse. Blocked sizes transform
// each power-of-two segment; the randomized rotation is orthogonal and its inverse undoes it.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "strata/hadamard/blocked.hpp"
#include "strata/hadamard/randomized.hpp"
#include "strata/hadamard/wht.hpp"

namespace hd = strata::hadamard;

namespace {

std::vector<float> random_vector(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

double norm2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return s;
}

}  // namespace

TEST_CASE("fwht equals the dense Sylvester Hadamard matrix, normalized") {
  for (std::size_t n = 1; n <= 512; n *= 2) {
    CAPTURE(n);
    const auto x = random_vector(n, std::uint32_t(n));
    auto y = x;
    hd::fwht(y);
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::size_t j = 0; j < n; ++j) s += (std::popcount(i & j) & 1 ? -1.0 : 1.0) * x[j];
      s /= std::sqrt(double(n));
      // fp32 butterflies vs a double dense sum: log2(n) roundings of values of size ~‖x‖.
      CHECK(std::abs(y[i] - s) <= 1e-5 * std::sqrt(norm2(x)));
    }
  }
}

TEST_CASE("fwht fast path is bit-identical to the reference") {
  for (std::size_t n = hd::min_fast_size; n <= hd::max_fast_size; n *= 2) {
    CAPTURE(n);
    auto a = random_vector(n, 7);
    auto b = a;
    hd::fwht(a);
    hd::fwht_reference(b);
    CHECK(a == b);
  }
}

TEST_CASE("fwht preserves the norm and is self-inverse") {
  for (std::size_t n : {16u, 64u, 128u, 256u}) {
    CAPTURE(n);
    const auto x = random_vector(n, 11);
    auto y = x;
    hd::fwht(y);
    CHECK(norm2(y) == doctest::Approx(norm2(x)).epsilon(1e-5));  // fp32 rounding
    hd::fwht(y);
    for (std::size_t i = 0; i < n; ++i) CHECK(y[i] == doctest::Approx(x[i]).epsilon(1e-5).scale(1.0));
  }
}

TEST_CASE("fwht rejects sizes that are not powers of two") {
  std::vector<float> v(96);
  CHECK_THROWS_WITH(hd::fwht_reference(v), doctest::Contains("96 is not a power of two"));
}

TEST_CASE("blocked transform: power-of-two segments, largest first") {
  CHECK(hd::split_into_segments(128).count == 1);
  const auto s96 = hd::split_into_segments(96);
  REQUIRE(s96.count == 2);
  CHECK(s96.size[0] == 64);
  CHECK(s96.size[1] == 32);
  const auto s80 = hd::split_into_segments(80);
  CHECK((s80.count == 2 && s80.size[0] == 64 && s80.size[1] == 16));
  const auto s512 = hd::split_into_segments(512);
  CHECK((s512.count == 2 && s512.size[0] == 256 && s512.size[1] == 256));
  CHECK_THROWS_WITH(hd::split_into_segments(100), doctest::Contains("100 is not a positive multiple of 16"));

  auto x = random_vector(96, 3);
  auto a = x;
  hd::fwht_blocked(a, s96);
  std::vector<float> lo(x.begin(), x.begin() + 64), hi(x.begin() + 64, x.end());
  hd::fwht(lo);
  hd::fwht(hi);
  for (std::size_t i = 0; i < 64; ++i) CHECK(a[i] == lo[i]);
  for (std::size_t i = 0; i < 32; ++i) CHECK(a[64 + i] == hi[i]);
}

TEST_CASE("randomized Hadamard: orthogonal, inverse undoes forward, signs pinned") {
  for (std::size_t n : {64u, 96u, 128u, 256u}) {
    for (std::uint32_t rounds = 1; rounds <= 3; ++rounds) {
      CAPTURE(n);
      CAPTURE(rounds);
      const hd::randomized_hadamard r(n, rounds);
      const auto x = random_vector(n, 5);
      auto y = x;
      r.forward(y.data());
      CHECK(norm2(y) == doctest::Approx(norm2(x)).epsilon(1e-5));
      r.inverse(y.data());
      for (std::size_t i = 0; i < n; ++i) CHECK(y[i] == doctest::Approx(x[i]).epsilon(1e-5).scale(1.0));
    }
  }
  // The sign pattern is part of the KV format (shaders compute the same one): pin it.
  std::uint32_t bits = 0;
  for (std::uint32_t i = 0; i < 32; ++i) bits |= std::uint32_t(hd::sign_of(hd::default_seed, 0, i) < 0) << i;
  std::uint32_t neg = 0;
  for (std::uint32_t i = 0; i < 4096; ++i) neg += hd::sign_of(hd::default_seed, 1, i) < 0;
  CHECK(neg > 1900);  // about half negative
  CHECK(neg < 2200);
  MESSAGE("round-0 sign bits of coordinates 0..31: " << bits);
  CHECK(bits == 2028495683u);
}

TEST_CASE("one H·D round spreads a one-hot vector evenly, all coordinates ±1/√n") {
  const hd::randomized_hadamard r(128, 1);
  std::vector<float> e(128, 0.0f);
  e[5] = 1.0f;
  r.forward(e.data());
  for (float v : e) CHECK(std::abs(v) == doctest::Approx(1.0 / std::sqrt(128.0)));
}
