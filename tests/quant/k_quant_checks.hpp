// Checks shared by the K-quant tests (q2_k..q6_k, iq4_xs): golden fixture bytes from
// tests/fixtures/quant (README section 4), round-trip error against quant_manifest.json,
// and dot() against the float dot of the dequantized operands. Thresholds live here.
#pragma once
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "strata/quant/q8_k.hpp"
#include "strata/quant/quant_format.hpp"
#include "support/fixtures.hpp"

namespace strata::test::kq {

inline constexpr std::size_t n_rows = 8;
inline constexpr std::size_t row_len = 1024;
inline constexpr const char* row_names[n_rows] = {
    "normal(0,1)",        "normal(0,0.02)",  "uniform(-1,1)",    "heavy-tailed t(2)",
    "all-equal 0.37",     "near-zero 1e-6",  "per-block scales", "normal(3,0.5)",
};

// Thresholds (one table, as test-quantize-fns.cpp keeps them).
// Round trip: our NMSE may not exceed ggml's by more than float-summation noise. The manifest
// computed it in float32 and we in double, so allow 1e-4 relative plus 1e-12 absolute.
inline constexpr double nmse_rel_slack = 1.0001;
inline constexpr double nmse_abs_slack = 1e-12;
// dot(): the integer code sums are exact, so dot() and the double dot of the dequantized
// values differ only by binary32 roundings, each ≤ 2^-24 relative to a quantity bounded by
// B = Σ (|d·sc·q| + |dmin·m|)·|a| (see abs_bound): dequant rounds d·sc, dmin·m, (d·sc)·q and
// the difference; the activation rounds a.d·q; dot() rounds d·a.d, int→float sums above 2^24,
// two products and a difference; dot_row adds up to 3 block results. That is < 16 roundings,
// so |dot − exact| ≤ 2^-20·B in the worst case. Measured worst over 2000 random blocks:
// 0.25·2^-24·B (errors cancel), so the gate catches any real (integer-sum) mistake.
inline constexpr double dot_rel_tol = 1.0 / (1 << 20);

inline std::vector<std::uint32_t> bits_of(std::span<const float> v) {
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

// Reads quant_manifest.json's "per_row_nmse_vs_input" array for `type` (e.g. "Q4_K").
// A tiny scan: the manifest is ours and fixed, so a JSON library would be overkill.
inline std::vector<double> manifest_row_nmse(const std::string& type) {
  const auto raw = read_bytes(fixture_dir() / "quant" / "quant_manifest.json");
  const std::string text(reinterpret_cast<const char*>(raw.data()), raw.size());
  const auto at_type = text.find("\"" + type + "\"");
  REQUIRE(at_type != std::string::npos);
  const auto at_key = text.find("\"per_row_nmse_vs_input\"", at_type);
  REQUIRE(at_key != std::string::npos);
  const char* p = text.c_str() + text.find('[', at_key) + 1;
  std::vector<double> out;
  while (out.size() < n_rows) {
    char* end = nullptr;
    out.push_back(std::strtod(p, &end));
    REQUIRE(end != p);
    p = end + 1;  // skip ',' or ']'
  }
  return out;
}

template <class Fmt>
std::vector<typename Fmt::block> load_blocks(const std::string& file) {
  const auto raw = read_bytes(fixture_dir() / "quant" / file);
  REQUIRE(raw.size() % sizeof(typename Fmt::block) == 0);
  std::vector<typename Fmt::block> blocks(raw.size() / sizeof(typename Fmt::block));
  std::memcpy(blocks.data(), raw.data(), raw.size());
  return blocks;
}

// (1) Dequantizing the golden blocks gives ggml's floats bit for bit.
template <class Fmt>
void check_dequant_bitwise(const std::string& q_file, const std::string& dq_file) {
  const auto blocks = load_blocks<Fmt>(q_file);
  const auto want = read_f32(fixture_dir() / "quant" / dq_file);
  REQUIRE(want.size() == blocks.size() * Fmt::block_elems);
  std::vector<float> got(want.size());
  dequant_row<Fmt>(blocks.data(), got.data(), got.size());
  const auto gb = bits_of(got), wb = bits_of(want);
  std::size_t first_bad = gb.size(), n_bad = 0;
  for (std::size_t i = 0; i < gb.size(); ++i)
    if (gb[i] != wb[i]) {
      if (n_bad++ == 0) first_bad = i;
    }
  INFO(q_file << ": " << n_bad << " values differ, first at " << first_bad);
  CHECK(n_bad == 0);
}

// (2) Quantizing input.f32 reproduces the golden bytes; reports each differing block.
template <class Fmt>
void check_quantize_bytes(const std::string& q_file, const std::string& in_file = "input.f32") {
  using block = typename Fmt::block;
  const auto want = read_bytes(fixture_dir() / "quant" / q_file);
  const auto x = read_f32(fixture_dir() / "quant" / in_file);
  REQUIRE(x.size() == n_rows * row_len);
  REQUIRE(want.size() == x.size() / Fmt::block_elems * sizeof(block));
  std::vector<block> got(x.size() / Fmt::block_elems);
  quantize_row<Fmt>(x.data(), got.data(), x.size());
  const std::size_t per_row = row_len / Fmt::block_elems;
  std::size_t n_bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto* w = reinterpret_cast<const unsigned char*>(want.data()) + i * sizeof(block);
    if (std::memcmp(&got[i], w, sizeof(block)) != 0) {
      ++n_bad;
      const auto* g = reinterpret_cast<const unsigned char*>(&got[i]);
      std::size_t nb = 0, first = sizeof(block);
      for (std::size_t k = 0; k < sizeof(block); ++k)
        if (g[k] != w[k]) {
          if (nb++ == 0) first = k;
        }
      MESSAGE(q_file << " row " << i / per_row << " block " << i % per_row << ": " << nb
                     << " bytes differ, first at offset " << first);
    }
  }
  CHECK(n_bad == 0);
}

// (3) Round-trip RMSE/NMSE per fixture row, printed and held to ggml's per-row NMSE.
// `ref` is ggml's per-row NMSE for the same input (from the manifest unless given).
template <class Fmt>
void check_round_trip(const std::string& type, std::vector<double> ref = {}) {
  if (ref.empty()) ref = manifest_row_nmse(type);
  REQUIRE(ref.size() == n_rows);
  const auto x = read_f32(fixture_dir() / "quant" / "input.f32");
  std::vector<typename Fmt::block> q(x.size() / Fmt::block_elems);
  std::vector<float> y(x.size());
  quantize_row<Fmt>(x.data(), q.data(), x.size());
  dequant_row<Fmt>(q.data(), y.data(), y.size());
  for (std::size_t r = 0; r < n_rows; ++r) {
    const std::span<const float> xr(x.data() + r * row_len, row_len), yr(y.data() + r * row_len, row_len);
    const double e = nmse(yr, xr);
    MESSAGE(type << " row " << r << " " << std::string(row_names[r]) << ": rmse " << rmse(yr, xr) << " nmse " << e
                 << " (ggml " << ref[r] << ")");
    CHECK(std::isfinite(rmse(yr, xr)));
    CHECK(e <= ref[r] * nmse_rel_slack + nmse_abs_slack);
  }
}

// Seeded data: row-scaled normals with a few outliers, like real weights and activations.
inline std::vector<float> random_row(std::size_t n, std::uint32_t seed, float scale, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& f : v) f = offset + scale * nd(rng);
  for (std::size_t i = 0; i < n; i += 97) v[i] *= 8.0f;
  return v;
}

// B = Σ_i (|d·sc·q_i| + |dmin·m|)·|a_i|, from dequantized values only: with y = d·sc·q − dmin·m,
// |dmin·m| is about the largest |y| of the block (the sub-block minimum gets q = 0, where
// y = −dmin·m), so |y| + 2·max|y| ≥ |d·sc·q| + |dmin·m|. Formats without mins only gain slack.
template <class Fmt>
double abs_bound(std::span<const float> wf, std::span<const float> af) {
  double s = 0;
  for (std::size_t b = 0; b < wf.size() / Fmt::block_elems; ++b) {
    double mx = 0;
    for (std::size_t i = 0; i < Fmt::block_elems; ++i) mx = std::fmax(mx, std::fabs(wf[b * Fmt::block_elems + i]));
    for (std::size_t i = 0; i < Fmt::block_elems; ++i) {
      const std::size_t k = b * Fmt::block_elems + i;
      s += (std::fabs(double(wf[k])) + 2 * mx) * std::fabs(double(af[k]));
    }
  }
  return s;
}

// (4) dot() and dot_row against the double dot of dequant(w)·dequant(q8_k(x)).
template <class Fmt>
void check_dot(std::uint32_t seed) {
  using act = typename Fmt::act;
  constexpr std::size_t n = 4 * Fmt::block_elems;
  for (int trial = 0; trial < 16; ++trial) {
    const float wscale = trial % 4 == 0 ? 0.02f : 1.0f;
    const float woffset = trial % 3 == 2 ? 0.5f : 0.0f;  // exercises the mins term
    const auto wv = random_row(n, seed + 2 * trial, wscale, woffset);
    const auto av = random_row(n, seed + 2 * trial + 1, trial % 2 ? 3.0f : 0.1f);
    std::vector<typename Fmt::block> w(n / Fmt::block_elems);
    std::vector<typename act::block> a(n / act::block_elems);
    quantize_row<Fmt>(wv.data(), w.data(), n);
    quantize_row<act>(av.data(), a.data(), n);
    std::vector<float> wf(n), af(n);
    dequant_row<Fmt>(w.data(), wf.data(), n);
    dequant_row<act>(a.data(), af.data(), n);

    double want_row = 0;
    for (std::size_t b = 0; b < w.size(); ++b) {
      double want = 0;
      for (std::size_t i = 0; i < Fmt::block_elems; ++i)
        want += double(wf[b * Fmt::block_elems + i]) * double(af[b * Fmt::block_elems + i]);
      want_row += want;
      const double bound = abs_bound<Fmt>(std::span<const float>(wf).subspan(b * Fmt::block_elems, Fmt::block_elems),
                                          std::span<const float>(af).subspan(b * Fmt::block_elems, Fmt::block_elems));
      const double got = Fmt::dot(w[b], a[b]);
      INFO("trial " << trial << " block " << b << " got " << got << " want " << want << " bound " << bound);
      CHECK(std::fabs(got - want) <= dot_rel_tol * bound);
    }
    // dot_row adds the block results in float: one more rounding each, same bound.
    const double bound_row = abs_bound<Fmt>(wf, af);
    const double got_row = dot_row<Fmt>(w.data(), a.data(), n);
    INFO("trial " << trial << " row got " << got_row << " want " << want_row);
    CHECK(std::fabs(got_row - want_row) <= dot_rel_tol * bound_row);
  }
}

// (5) An all-zero block dequantizes to exact zeros and dots to zero; tiny and huge blocks
// stay finite.
template <class Fmt>
void check_edge_blocks() {
  std::array<float, Fmt::block_elems> x{}, y;
  y.fill(1.0f);
  const auto zero = Fmt::quantize(x);
  Fmt::dequant(zero, y);
  for (float v : y) CHECK(v == 0.0f);
  const auto av = random_row(Fmt::block_elems, 7, 1.0f);
  const auto a = Fmt::act::quantize(std::span<const float, Fmt::block_elems>(av.data(), Fmt::block_elems));
  CHECK(Fmt::dot(zero, a) == 0.0f);
  for (const float scale : {1e-30f, 1e-10f, 1e2f}) {
    const auto v = random_row(Fmt::block_elems, 11, scale);
    Fmt::dequant(Fmt::quantize(std::span<const float, Fmt::block_elems>(v.data(), Fmt::block_elems)), y);
    bool finite = true;
    for (float f : y) finite = finite && std::isfinite(f);
    INFO("scale " << scale);
    CHECK(finite);
  }
}

}  // namespace strata::test::kq
