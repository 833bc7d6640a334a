// Test support: locating fixtures (tests/fixtures in the checkout, and the optional shared
// set in ../shared/fixtures), reading raw files, and error metrics.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef STRATA_TEST_FIXTURES
#error "STRATA_TEST_FIXTURES must point at tests/fixtures (set by the build)"
#endif
#ifndef STRATA_SHARED_FIXTURES
#define STRATA_SHARED_FIXTURES ""
#endif

namespace strata::test {

inline std::filesystem::path fixture_dir() { return STRATA_TEST_FIXTURES; }

// The full shared fixture set, or an empty path when this clone has none beside it.
inline std::filesystem::path shared_fixture_dir() {
  const std::filesystem::path p = STRATA_SHARED_FIXTURES;
  if (p.empty() || !std::filesystem::exists(p / "manifest.json")) return {};
  return p;
}

inline std::vector<std::byte> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open fixture " + p.string());
  f.seekg(0, std::ios::end);
  std::vector<std::byte> out(std::size_t(f.tellg()));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(out.data()), std::streamsize(out.size()));
  return out;
}

inline std::vector<float> read_f32(const std::filesystem::path& p) {
  const auto b = read_bytes(p);
  std::vector<float> out(b.size() / 4);
  std::memcpy(out.data(), b.data(), out.size() * 4);
  return out;
}

// Normalised mean squared error sum((a-b)^2) / sum(b^2), b the reference.
inline double nmse(std::span<const float> a, std::span<const float> ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den == 0 ? (num == 0 ? 0 : INFINITY) : num / den;
}

inline double rmse(std::span<const float> a, std::span<const float> ref) {
  double num = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(ref[i]);
    num += d * d;
  }
  return a.empty() ? 0 : std::sqrt(num / double(a.size()));
}

}  // namespace strata::test
