// TurboQuant_mse format: quantize/dequantize distortion near the Lloyd-Max theory, the fused
// kernels equal dequantize-then-dot (and dequantize-then-axpy), scale modes, blocked head dims
// and clear errors for unsupported ones.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "strata/turboquant/fused_dot.hpp"

namespace tq = strata::turboquant;

namespace {

std::vector<float> gaussian(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

double dot(const float* a, const float* b, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return s;
}

}  // namespace

TEST_CASE("format: MSE of random vectors is the Lloyd-Max D_mse (plain scale)") {
  std::mt19937 rng(42);
  for (std::uint32_t d : {64u, 128u})
    for (std::uint32_t b = 1; b <= 4; ++b) {
      CAPTURE(d);
      CAPTURE(b);
      const tq::format f(d, b, tq::scale_mode::plain);
      std::vector<std::uint8_t> row(f.row_bytes());
      std::vector<float> scratch(d), back(d);
      double err = 0;
      const int n = 1500;
      for (int t = 0; t < n; ++t) {
        const auto x = gaussian(d, rng);
        f.quantize(x.data(), row.data(), scratch.data());
        f.dequantize(row.data(), back.data());
        double e = 0;
        for (std::uint32_t i = 0; i < d; ++i) e += (double(x[i]) - back[i]) * (double(x[i]) - back[i]);
        err += e / dot(x.data(), x.data(), d);
      }
      // 1500 vectors: relative standard error ≈ 1.2/√(d·1500) < 1%; 5% is a loose smoke gate
      // (strata-quantcheck holds the 1% gate with far more samples).
      CHECK(err / n == doctest::Approx(tq::codebook_for(d, b).d_mse).epsilon(0.05));
    }
}

TEST_CASE("fused dot and accumulate equal dequantize-then-dot for every bit width") {
  std::mt19937 rng(7);
  for (std::uint32_t d : {64u, 96u, 128u, 256u})
    for (std::uint32_t b = 1; b <= 4; ++b) {
      CAPTURE(d);
      CAPTURE(b);
      const tq::format f(d, b);
      const auto k = tq::kernels_for(b);
      std::vector<std::uint8_t> row(f.row_bytes());
      std::vector<float> scratch(d), deq(d), yrot(d);
      const auto x = gaussian(d, rng), q = gaussian(d, rng);
      f.quantize(x.data(), row.data(), scratch.data());
      f.dequantize(row.data(), deq.data());
      auto qr = q;
      f.rotation().forward(qr.data());
      const double ref = dot(q.data(), deq.data(), d);
      // fp32 sums over d terms of size ~1 in two different orders (and one extra rotation).
      CHECK(k.dot_rotated(f, qr.data(), row.data()) == doctest::Approx(ref).epsilon(1e-4).scale(std::sqrt(double(d))));

      std::vector<float> acc(d, 0.0f);
      k.accumulate_rotated(f, 0.75f, row.data(), acc.data());
      f.dequantize_rotated(row.data(), yrot.data());
      for (std::uint32_t i = 0; i < d; ++i) CHECK(acc[i] == doctest::Approx(0.75f * yrot[i]).epsilon(1e-6));
      f.rotation().inverse(acc.data());
      for (std::uint32_t i = 0; i < d; ++i) CHECK(acc[i] == doctest::Approx(0.75f * deq[i]).epsilon(1e-4).scale(1.0));
    }
}

TEST_CASE("scale modes: unbiased divides by 1 − D, norm-corrected keeps the norm") {
  std::mt19937 rng(3);
  const auto x = gaussian(128, rng);
  std::vector<float> scratch(128), a(128), b(128), c(128);
  std::vector<std::uint8_t> row(tq::format(128, 3).row_bytes());
  tq::format(128, 3, tq::scale_mode::plain).quantize(x.data(), row.data(), scratch.data());
  const float s_plain = tq::format::scale_of(row.data());
  CHECK(s_plain == doctest::Approx(std::sqrt(dot(x.data(), x.data(), 128))).epsilon(1e-3));  // fp16 scale
  tq::format(128, 3, tq::scale_mode::unbiased).quantize(x.data(), row.data(), scratch.data());
  CHECK(tq::format::scale_of(row.data()) == doctest::Approx(s_plain / (1 - 0.033966)).epsilon(1e-3));
  const tq::format nc(128, 3, tq::scale_mode::norm_corrected);
  nc.quantize(x.data(), row.data(), scratch.data());
  nc.dequantize(row.data(), c.data());
  CHECK(dot(c.data(), c.data(), 128) == doctest::Approx(dot(x.data(), x.data(), 128)).epsilon(2e-3));
}

TEST_CASE("zero vector quantizes to zero") {
  const tq::format f(128, 3);
  std::vector<float> x(128, 0.0f), scratch(128), back(128, 1.0f);
  std::vector<std::uint8_t> row(f.row_bytes());
  f.quantize(x.data(), row.data(), scratch.data());
  f.dequantize(row.data(), back.data());
  for (float v : back) CHECK(v == 0.0f);
}

TEST_CASE("blocked head dims: 96 = 64 + 32 segments with their own scales, bad dims name themselves") {
  const tq::format f(96, 3);
  REQUIRE(f.segments().size() == 2);
  CHECK(f.row_bytes() == tq::block_bytes(64, 3) + tq::block_bytes(32, 3));
  CHECK(f.segments()[1].byte_offset == 26);
  CHECK_THROWS_WITH(tq::format(100, 3), doctest::Contains("head_dim 100 is not supported"));
  CHECK_THROWS_WITH(tq::format(128, 5), doctest::Contains("5 bits"));
}

TEST_CASE("SIMD fused kernels are bit-identical to the scalar reference") {
  std::mt19937 rng(11);
  for (std::uint32_t d : {64u, 80u, 128u, 256u})
    for (std::uint32_t b = 1; b <= 4; ++b) {
      CAPTURE(d);
      CAPTURE(b);
      const tq::format f(d, b);
      const auto fast = tq::kernels_for(b), ref = tq::reference_kernels_for(b);
      std::vector<std::uint8_t> row(f.row_bytes());
      std::vector<float> scratch(d), a1(d, 0.5f), a2(d, 0.5f);
      for (int t = 0; t < 20; ++t) {
        const auto x = gaussian(d, rng), q = gaussian(d, rng);
        f.quantize(x.data(), row.data(), scratch.data());
        CHECK(fast.dot_rotated(f, q.data(), row.data()) == ref.dot_rotated(f, q.data(), row.data()));
        fast.accumulate_rotated(f, 0.3f, row.data(), a1.data());
        ref.accumulate_rotated(f, 0.3f, row.data(), a2.data());
      }
      CHECK(a1 == a2);
    }
#if defined(STRATA_TURBOQUANT_AVX2)
  MESSAGE("AVX2 TurboQuant kernels " << (tq::avx2::cpu_has_avx2() ? "tested" : "not available on this CPU"));
#endif
}
