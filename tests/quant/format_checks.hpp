// Shared checks for the per-format quant tests: golden fixture comparisons (tests/fixtures/quant,
// see shared/fixtures/README.md §4), round-trip error against ggml's own error from
// quant_manifest.json, dot() against dequant·dequant, and the row helpers of quant_format.hpp.
#pragma once
#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/quant/quant_format.hpp"
#include "support/fixtures.hpp"

namespace strata::test::quant_checks {

inline constexpr std::size_t fixture_rows = 8;
inline constexpr std::size_t fixture_cols = 1024;
inline const std::array<std::string, fixture_rows> row_names = {
    "normal(0,1)", "normal(0,0.02)", "uniform(-1,1)", "heavy-tailed", "all-equal 0.37",
    "near-zero",   "per-block scales", "normal(3,0.5)"};

// Fixed-width scientific text for the error tables printed with MESSAGE.
inline std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4e", v);
  return buf;
}

// Unit roundoff of binary32 (half an ulp of 1).
inline constexpr double unit_roundoff = 0x1p-24;

// Thresholds, in one place. ggml's NMSE comes from the manifest; ours may exceed it only by
// the noise of recomputing the same sums (we aim for identical bytes, hence identical error).
inline constexpr double nmse_rel_slack = 1.0001;
inline constexpr double nmse_abs_slack = 1e-12;

inline std::filesystem::path quant_dir() { return fixture_dir() / "quant"; }

// --- manifest ------------------------------------------------------------------------------

// Numbers of the first `[...]` array after `key` inside the object for `type` in the manifest.
// A plain text scan is enough for this generated, fixed-shape file.
inline std::vector<double> manifest_array(std::string_view type, std::string_view key) {
  const auto bytes = read_bytes(quant_dir() / "quant_manifest.json");
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto types = text.find("\"types\"");
  const auto at = text.find("\"" + std::string(type) + "\": {", types);
  REQUIRE(at != std::string::npos);
  const auto k = text.find("\"" + std::string(key) + "\"", at);
  REQUIRE(k != std::string::npos);
  auto p = text.find('[', k);
  const auto end = text.find(']', p);
  std::vector<double> out;
  while (++p < end) {
    const char* s = text.c_str() + p;
    char* e = nullptr;
    const double v = std::strtod(s, &e);
    if (e == s) continue;
    out.push_back(v);
    p += std::size_t(e - s) - 1;
  }
  return out;
}

inline double manifest_number(std::string_view type, std::string_view key) {
  const auto bytes = read_bytes(quant_dir() / "quant_manifest.json");
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto at = text.find("\"" + std::string(type) + "\": {", text.find("\"types\""));
  REQUIRE(at != std::string::npos);
  const auto k = text.find("\"" + std::string(key) + "\"", at);
  REQUIRE(k != std::string::npos);
  return std::strtod(text.c_str() + text.find(':', k) + 1, nullptr);
}

// --- raw blocks ----------------------------------------------------------------------------

template <class Fmt>
std::vector<typename Fmt::block> load_blocks(const std::filesystem::path& p) {
  const auto bytes = read_bytes(p);
  REQUIRE(bytes.size() % sizeof(typename Fmt::block) == 0);
  std::vector<typename Fmt::block> out(bytes.size() / sizeof(typename Fmt::block));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

template <class Fmt>
std::vector<typename Fmt::block> quantize_all(std::span<const float> x) {
  std::vector<typename Fmt::block> out(x.size() / Fmt::block_elems);
  quant::quantize_row<Fmt>(x.data(), out.data(), x.size());
  return out;
}

template <class Fmt>
std::vector<float> dequant_all(std::span<const typename Fmt::block> b) {
  std::vector<float> out(b.size() * Fmt::block_elems);
  quant::dequant_row<Fmt>(b.data(), out.data(), out.size());
  return out;
}

inline bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// FNV-1a 64 of raw bytes: a compact golden for outputs with no fixture file (IQ4_NL, MXFP4).
template <class T>
std::uint64_t fnv1a64(std::span<const T> v) {
  std::uint64_t h = 0xcbf29ce484222325u;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ p[i]) * 0x100000001b3u;
  return h;
}

// A block's bytes as lowercase hex, for readable golden comparisons.
template <class Block>
std::string hex(const Block& b) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(&b);
  for (std::size_t i = 0; i < sizeof(Block); ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

// Round-trip NMSE of every fixture row, printed, for formats with no ggml figure of their own.
template <class Fmt>
std::vector<double> roundtrip_nmse(const std::string& label) {
  const auto x = read_f32(quant_dir() / "input.f32");
  const auto y = dequant_all<Fmt>(quantize_all<Fmt>(x));
  std::vector<double> out;
  for (std::size_t r = 0; r < fixture_rows; ++r) {
    const std::span<const float> xr(x.data() + r * fixture_cols, fixture_cols);
    const std::span<const float> yr(y.data() + r * fixture_cols, fixture_cols);
    out.push_back(nmse(yr, xr));
    MESSAGE(label << " row " << r << " " << row_names[r] << ": rmse=" << sci(rmse(yr, xr)) << " nmse=" << sci(out.back()));
  }
  return out;
}

// --- (1) dequant is bitwise equal to the fixture ---------------------------------------------

// `stem` is "Q4_0" or "Q4_0.from_model"; rows are checked separately so a failure names one.
template <class Fmt>
void check_dequant_fixture(const std::string& stem) {
  const auto blocks = load_blocks<Fmt>(quant_dir() / (stem + ".q.bin"));
  const auto want = read_f32(quant_dir() / (stem + ".dequant.f32"));
  REQUIRE(want.size() == fixture_rows * fixture_cols);
  REQUIRE(blocks.size() * Fmt::block_elems == want.size());
  const auto got = dequant_all<Fmt>(blocks);
  for (std::size_t r = 0; r < fixture_rows; ++r) {
    std::size_t bad = 0, first = 0;
    for (std::size_t c = 0; c < fixture_cols; ++c) {
      const std::size_t i = r * fixture_cols + c;
      if (!same_bits(got[i], want[i]) && bad++ == 0) first = i;
    }
    INFO(stem << " row " << r << ": " << bad << " values differ, first at " << first << " (got "
              << got[first] << ", want " << want[first] << ")");
    CHECK(bad == 0);
  }
}

// --- (2) quantize reproduces the fixture bytes -----------------------------------------------

// Returns the number of differing blocks per row (also asserted zero when `require_exact`).
template <class Fmt>
std::vector<std::size_t> compare_quantized(const std::string& stem, const std::string& input,
                                           bool require_exact) {
  const auto x = read_f32(quant_dir() / input);
  const auto want = load_blocks<Fmt>(quant_dir() / (stem + ".q.bin"));
  const auto got = quantize_all<Fmt>(x);
  REQUIRE(got.size() == want.size());
  const std::size_t per_row = got.size() / fixture_rows;
  std::vector<std::size_t> bad_blocks(fixture_rows, 0);
  for (std::size_t r = 0; r < fixture_rows; ++r) {
    for (std::size_t b = r * per_row; b < (r + 1) * per_row; ++b)
      if (std::memcmp(&got[b], &want[b], sizeof(got[b])) != 0) ++bad_blocks[r];
    if (require_exact) {
      INFO(stem << " row " << r << " (" << row_names[r] << "): " << bad_blocks[r] << " of " << per_row
                << " blocks differ");
      CHECK(bad_blocks[r] == 0);
    }
  }
  return bad_blocks;
}

// --- (3) round-trip error vs ggml's ---------------------------------------------------------

template <class Fmt>
void check_roundtrip_error(const std::string& type) {
  const auto x = read_f32(quant_dir() / "input.f32");
  const auto y = dequant_all<Fmt>(quantize_all<Fmt>(x));
  const auto ggml = manifest_array(type, "per_row_nmse_vs_input");
  REQUIRE(ggml.size() == fixture_rows);
  for (std::size_t r = 0; r < fixture_rows; ++r) {
    const std::span<const float> xr(x.data() + r * fixture_cols, fixture_cols);
    const std::span<const float> yr(y.data() + r * fixture_cols, fixture_cols);
    const double e = nmse(yr, xr);
    MESSAGE(type << " row " << r << " " << row_names[r] << ": rmse=" << sci(rmse(yr, xr)) << " nmse=" << sci(e)
                 << " (ggml nmse=" << sci(ggml[r]) << ")");
    CHECK(e <= ggml[r] * nmse_rel_slack + nmse_abs_slack);
  }
}

// Round-trip NMSE of the real-tensor slice, checked against the manifest's ggml figure.
template <class Fmt>
void check_from_model_error(const std::string& type) {
  const auto x = read_f32(quant_dir() / (type + ".from_model.input.f32"));
  const auto y = dequant_all<Fmt>(quantize_all<Fmt>(x));
  const double ggml = manifest_number(type, "nmse_vs_input");
  const double e = nmse(y, x);
  MESSAGE(type << " from_model: rmse=" << sci(rmse(y, x)) << " nmse=" << sci(e) << " (ggml file nmse=" << sci(ggml)
                << ")");
  CHECK(e <= ggml * nmse_rel_slack + nmse_abs_slack);
}

// --- (4) dot() vs dequant·dequant, and the row helpers ----------------------------------------

// Deterministic data: mt19937 is fully specified, and Box-Muller keeps the normal draws
// independent of the standard library's distribution implementations.
struct rng {
  std::mt19937 gen;
  explicit rng(std::uint32_t seed) : gen(seed) {}
  double uniform() { return (double(gen() >> 8) + 0.5) * 0x1p-24; }  // (0, 1)
  float normal(double mean, double sd) {
    const double u = uniform(), v = uniform();
    return float(mean + sd * std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v));
  }
};

// How far a format's dot() may legitimately stray from Σ dequant(w)·dequant(a) for one block:
// `mag` is the size of the quantities it rounds (rounding error ≤ a few u of it) and `dev` an
// exact, known model difference (the fp16 rounding of Q8_1's s for the min formats).
struct dot_slack {
  double mag = 0;
  double dev = 0;
};

template <class Fmt>
struct no_extra_slack {
  dot_slack operator()(const typename Fmt::block&, const typename Fmt::act::block&) const { return {}; }
};

// For formats with a min (Q4_1, Q5_1): dot() = d_w·d_a·Σq_w·q_a + m·s uses the activation's
// fp16-rounded s where dequant·dequant has d_a·Σq_a, an exact model difference of
// |m|·|s − d_a·Σq_a| (≤ 2^-11 relative to |m·s|). Its rounded terms are |d_w·d_a·Σq_w·q_a| and |m·s|.
template <class Fmt>
struct min_term_slack {
  dot_slack operator()(const typename Fmt::block& w, const typename Fmt::act::block& a) const {
    std::array<float, Fmt::block_elems> wd{}, ad{};
    Fmt::dequant(w, wd);
    Fmt::act::dequant(a, ad);
    const double m = to_float(w.m), s = to_float(a.s), da = to_float(a.d);
    double scaled = 0, sum_qa = 0;
    for (std::size_t j = 0; j < Fmt::block_elems; ++j) {
      scaled += (double(wd[j]) - m) * double(ad[j]);
      sum_qa += a.qs[j];
    }
    return {std::fabs(scaled) + std::fabs(m * s), std::fabs(m) * std::fabs(s - da * sum_qa)};
  }
};

// Checks every block's dot() and the whole row's dot_row() against a double-precision sum of the
// dequantized products, which is (all but) exact: each product of two dequantized values needs
// at most 40 significant bits, and 1024 of them lose < 1e-13 relative in double.
// Per block, dot() rounds at most 3 float operations on values bounded by Σ|w·a| (plus `mag`), so
// 4u·(Σ|w·a| + mag) + dev bounds it; the row adds dot_row's float summation, ≤ n_blocks·u·Σ|dot_b|.
template <class Fmt, class Slack = no_extra_slack<Fmt>>
void check_dot(std::span<const float> w_src, std::span<const float> a_src, Slack slack = {}) {
  using Act = typename Fmt::act;
  const std::size_t n = w_src.size();
  const auto w = quantize_all<Fmt>(w_src);
  const auto a = quantize_all<Act>(a_src);
  const auto wd = dequant_all<Fmt>(w);
  const auto ad = dequant_all<Act>(a);
  const std::size_t nb = n / Fmt::block_elems;

  double row_ref = 0, row_tol = 0, sum_abs_blocks = 0;
  float row_seq = 0.0f;
  std::size_t bad = 0;
  for (std::size_t b = 0; b < nb; ++b) {
    double ref = 0, mag = 0;
    for (std::size_t j = b * Fmt::block_elems; j < (b + 1) * Fmt::block_elems; ++j) {
      ref += double(wd[j]) * double(ad[j]);
      mag += std::fabs(double(wd[j]) * double(ad[j]));
    }
    const dot_slack s = slack(w[b], a[b]);
    const double tol = 4 * unit_roundoff * (mag + s.mag) + s.dev;
    const float got = Fmt::dot(w[b], a[b]);
    if (!(std::fabs(double(got) - ref) <= tol) && bad++ == 0) {
      INFO("block " << b << ": dot " << got << " vs dequant·dequant " << ref << " (tol " << tol << ")");
      CHECK(std::fabs(double(got) - ref) <= tol);
    }
    row_ref += ref;
    row_tol += tol;
    sum_abs_blocks += std::fabs(double(got));
    row_seq += got;
  }
  CHECK(bad == 0);
  row_tol += double(nb) * unit_roundoff * sum_abs_blocks;
  const float row = quant::dot_row<Fmt>(w.data(), a.data(), n);
  INFO("dot_row " << row << " vs " << row_ref << " (tol " << row_tol << ")");
  CHECK(std::fabs(double(row) - row_ref) <= row_tol);
  CHECK(same_bits(row, row_seq));  // dot_row is exactly the in-order float sum of dot()
}

// dequant_row / quantize_row are the per-block functions applied block by block.
template <class Fmt>
void check_row_helpers(std::span<const float> x) {
  const auto blocks = quantize_all<Fmt>(x);
  const auto y = dequant_all<Fmt>(blocks);
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const auto q = Fmt::quantize(std::span<const float, Fmt::block_elems>(x.data() + b * Fmt::block_elems,
                                                                         Fmt::block_elems));
    CHECK(std::memcmp(&q, &blocks[b], sizeof(q)) == 0);
    float one[Fmt::block_elems];
    Fmt::dequant(blocks[b], std::span<float, Fmt::block_elems>(one));
    for (std::size_t j = 0; j < Fmt::block_elems; ++j) CHECK(same_bits(one[j], y[b * Fmt::block_elems + j]));
  }
}

// Several seeded rows: weights centred and offset (the min formats' m term), activations normal,
// uniform and heavy-tailed, all quantized by the format's own act::quantize.
template <class Fmt, class Slack = no_extra_slack<Fmt>>
void check_dot_random(Slack slack = {}) {
  constexpr std::size_t n = 1024;
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    rng g(seed);
    std::vector<float> w(n), a(n);
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = seed % 3 == 0 ? g.normal(3.0, 0.5) : g.normal(0.0, seed % 2 ? 1.0 : 0.02);
      const double u = g.uniform();
      a[i] = seed % 2 ? g.normal(0.0, 1.0) : float(seed == 4 ? (2 * u - 1) : std::tan(3.1 * (u - 0.5)));
    }
    INFO(std::string(Fmt::name) << " seed " << seed);
    check_dot<Fmt>(w, a, slack);
    check_row_helpers<Fmt>(w);
  }
}

// --- (5) all-zero block -----------------------------------------------------------------------

template <class Fmt>
typename Fmt::block check_zero_block() {
  const std::array<float, Fmt::block_elems> zeros{};
  const auto b = Fmt::quantize(zeros);
  std::array<float, Fmt::block_elems> y{};
  y.fill(1.0f);
  Fmt::dequant(b, y);
  for (const float v : y) {
    CHECK_FALSE(std::isnan(v));
    CHECK(v == 0.0f);
  }
  return b;
}

}  // namespace strata::test::quant_checks
