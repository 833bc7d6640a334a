// Lloyd-Max codebooks: sorted, symmetric, boundaries at midpoints, and each centroid is the
// conditional mean of its cell under f(x) ∝ (1 − x²)^((d−3)/2) (the Lloyd-Max fixed point),
// integrated here independently of the generator. D_mse matches turboquant.md §3.1.
#include <doctest/doctest.h>

#include <cmath>

#include "strata/turboquant/codebook.hpp"

namespace tq = strata::turboquant;

namespace {

// Density of z = √d·x, x one coordinate of a uniform point on S^{d−1}.
double density(double z, double d) {
  const double u = 1.0 - z * z / d;
  if (u <= 0) return 0;
  const double logk = std::lgamma(d / 2) - 0.5 * std::log(M_PI) - std::lgamma((d - 1) / 2);
  return std::exp(logk + 0.5 * (d - 3) * std::log(u)) / std::sqrt(d);
}

struct moments {
  double p = 0, m1 = 0, m2 = 0;
};

// ∫_a^b {1, z, z²}·g(z) dz by composite Simpson on 4000 panels (cells are at most a few units
// wide; the density is smooth), clipped to the support [−√d, √d].
moments integrate(double a, double b, double d) {
  a = std::max(a, -std::sqrt(d));
  b = std::min(b, std::sqrt(d));
  moments m;
  if (b <= a) return m;
  const int n = 4000;
  const double h = (b - a) / n;
  for (int i = 0; i <= n; ++i) {
    const double z = a + i * h, w = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2), g = density(z, d) * w;
    m.p += g;
    m.m1 += g * z;
    m.m2 += g * z * z;
  }
  m.p *= h / 3;
  m.m1 *= h / 3;
  m.m2 *= h / 3;
  return m;
}

}  // namespace

TEST_CASE("codebooks: sorted, symmetric, midpoint boundaries") {
  for (std::uint32_t d : tq::codebook_dims)
    for (std::uint32_t b = 1; b <= 4; ++b) {
      CAPTURE(d);
      CAPTURE(b);
      const auto cb = tq::codebook_for(d, b);
      REQUIRE(cb.centroids.size() == (1u << b));
      for (std::size_t i = 0; i + 1 < cb.centroids.size(); ++i) {
        CHECK(cb.centroids[i] < cb.centroids[i + 1]);
        CHECK(cb.boundaries[i] == doctest::Approx(0.5 * (cb.centroids[i] + cb.centroids[i + 1])).epsilon(1e-6));
      }
      for (std::size_t i = 0; i < cb.centroids.size(); ++i)
        CHECK(cb.centroids[i] == doctest::Approx(-cb.centroids[cb.centroids.size() - 1 - i]).epsilon(1e-7));
      CHECK(cb.index_of(cb.centroids[0]) == 0);
      CHECK(cb.index_of(cb.centroids.back()) == cb.levels() - 1);
    }
}

TEST_CASE("codebooks: each centroid is the conditional mean of its cell, D_mse is its MSE") {
  for (std::uint32_t d : tq::codebook_dims)
    for (std::uint32_t b = 1; b <= 4; ++b) {
      CAPTURE(d);
      CAPTURE(b);
      const auto cb = tq::codebook_for(d, b);
      double mse = 0, mass = 0;
      for (std::size_t i = 0; i < cb.centroids.size(); ++i) {
        const double lo = i == 0 ? -1e9 : cb.boundaries[i - 1];
        const double hi = i + 1 == cb.centroids.size() ? 1e9 : cb.boundaries[i];
        const auto m = integrate(lo, hi, d);
        // Tables are stored as float (7 significant digits) from a 1e-13-converged solve.
        CHECK(cb.centroids[i] == doctest::Approx(m.m1 / m.p).epsilon(2e-6));
        const double c = cb.centroids[i];
        mse += m.m2 - 2 * c * m.m1 + c * c * m.p;
        mass += m.p;
      }
      CHECK(mass == doctest::Approx(1.0).epsilon(1e-9));
      CHECK(mse == doctest::Approx(cb.d_mse).epsilon(1e-5));
    }
}

TEST_CASE("codebooks: the values of turboquant.md (d = 128) and not the wrong seed table") {
  const double d128[] = {0.360889, 0.116000, 0.033966, 0.009315};
  for (std::uint32_t b = 1; b <= 4; ++b) CHECK(tq::codebook_for(128, b).d_mse == doctest::Approx(d128[b - 1]).epsilon(2e-5));
  const auto c3 = tq::codebook_for(128, 3).centroids;
  const double pos[] = {0.24442, 0.75333, 1.33660, 2.13147};
  for (int i = 0; i < 4; ++i) CHECK(c3[4 + i] == doctest::Approx(pos[i]).epsilon(2e-5));
  CHECK(c3[4] != doctest::Approx(0.0638).epsilon(0.1));  // the circulating wrong 3-bit table
  const auto c4 = tq::codebook_for(64, 4).centroids;
  CHECK(c4[15] == doctest::Approx(2.64637).epsilon(2e-5));
  CHECK(tq::codebook_for(256, 2).centroids[3] == doctest::Approx(1.50780).epsilon(2e-5));
  CHECK_THROWS_WITH(tq::codebook_for(48, 3), doctest::Contains("no codebook for d = 48"));
}
