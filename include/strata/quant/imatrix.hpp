// Importance matrices as llama-imatrix writes them, read into the per-column weights the
// quantizers take (llama.cpp common/imatrix-loader.cpp and tools/quantize/quantize.cpp).
//  - GGUF (the default): per weight "<tensor>.in_sum2" (F32, ne0 x n_mat: sums of squared
//    activations per column, one row per expert) and "<tensor>.counts" (F32, n_mat: tokens seen),
//    metadata imatrix.datasets / imatrix.chunk_count / imatrix.chunk_size. Weight = sum / count,
//    with count rounded to an integer first; an expert never routed to gets weight 1.
//  - Legacy .dat: int32 entry count; per entry int32 name length, name, int32 ncall, int32 nval,
//    float[nval] (already averaged, times ncall); then optionally int32 chunk count, int32
//    length and the dataset name. Weight = value / ncall.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/core/mapped_file.hpp"
#include "strata/gguf/reader.hpp"

namespace strata::quant {

struct imatrix {
  // Tensor name -> ne0 * n_mat weights (expert e's columns at [e * ne0, (e + 1) * ne0)).
  std::map<std::string, std::vector<float>> weights;
  std::vector<std::string> datasets;  // what it was computed on (imatrix.datasets)
  std::uint32_t chunk_count = 0;      // chunks of text evaluated (0: unknown)
  std::uint32_t chunk_size = 0;       // tokens per chunk (0: unknown or legacy)
  bool legacy = false;                // read from the pre-GGUF .dat format
};

namespace detail {

inline imatrix load_imatrix_gguf(const gguf::reader& r) {
  const std::string& src = r.source();
  if (r.tensors().empty()) throw format_error(src + ": imatrix has no tensors");
  imatrix m;
  const auto* ds = r.find("imatrix.datasets");
  const auto cc = r.find_uint("imatrix.chunk_count");
  const auto cs = r.find_uint("imatrix.chunk_size");
  // llama-quantize refuses a GGUF imatrix without its metadata (it may not be an imatrix at all).
  if (!ds || !cc || !cs)
    throw format_error(src + ": not an imatrix GGUF: missing imatrix.datasets, imatrix.chunk_count or imatrix.chunk_size");
  if (ds->type() == gguf::value_type::array && ds->elem_type() == gguf::value_type::string)
    for (const auto s : ds->strings()) m.datasets.emplace_back(s);
  m.chunk_count = std::uint32_t(*cc);
  m.chunk_size = std::uint32_t(*cs);

  std::map<std::string, std::pair<const gguf::tensor_info*, const gguf::tensor_info*>> parts;
  for (const auto& t : r.tensors()) {
    const std::string_view n = t.name;
    if (n.ends_with(".in_sum2")) parts[std::string(n.substr(0, n.size() - 8))].first = &t;
    else if (n.ends_with(".counts")) parts[std::string(n.substr(0, n.size() - 7))].second = &t;
  }
  const auto floats = [&](const gguf::tensor_info& t) {
    if (t.type != gguf::type_id::f32)
      throw format_error(src + ": imatrix tensor '" + std::string(t.name) + "' is " +
                         std::string(gguf::name_of(t.type)) + ", expected F32");
    std::vector<float> v(std::size_t(t.n_elements()));
    std::memcpy(v.data(), t.data.data(), v.size() * sizeof(float));
    return v;
  };
  for (const auto& [name, p] : parts) {
    if (!p.first || !p.second)
      throw format_error(src + ": imatrix entry '" + name + "' has " + (p.first ? "no .counts" : "no .in_sum2") + " tensor");
    const auto sums = floats(*p.first);
    const auto counts = floats(*p.second);
    if (counts.empty() || sums.size() % counts.size() != 0)
      throw format_error(src + ": imatrix entry '" + name + "': " + std::to_string(sums.size()) +
                         " sums do not split into " + std::to_string(counts.size()) + " experts");
    const std::size_t ne0 = sums.size() / counts.size();
    auto& w = m.weights[name];
    w.resize(sums.size());
    for (std::size_t j = 0; j < counts.size(); ++j) {
      const auto count = float(std::lround(counts[j]));
      for (std::size_t i = 0; i < ne0; ++i) w[j * ne0 + i] = count > 0.0f ? sums[j * ne0 + i] / count : 1.0f;
    }
  }
  return m;
}

inline imatrix load_imatrix_legacy(std::span<const std::byte> b, const std::string& src) {
  std::size_t pos = 0;
  const auto take = [&](std::size_t n, const char* what) {
    if (n > b.size() - pos)
      throw format_error(src + ": truncated legacy imatrix: " + what + " at byte " + std::to_string(pos));
    const std::byte* p = b.data() + pos;
    pos += n;
    return p;
  };
  const auto i32 = [&](const char* what) {
    std::int32_t v;
    std::memcpy(&v, take(4, what), 4);
    return v;
  };
  imatrix m;
  m.legacy = true;
  const std::int32_t n_entries = i32("entry count");
  if (n_entries < 1) throw format_error(src + ": legacy imatrix has no entries");
  for (std::int32_t e = 0; e < n_entries; ++e) {
    const std::int32_t len = i32("name length");
    if (len < 1 || len > 4096) throw format_error(src + ": legacy imatrix entry " + std::to_string(e) + " has a bad name length");
    const auto* name_bytes = take(std::size_t(len), "name");
    std::string name(reinterpret_cast<const char*>(name_bytes), std::size_t(len));
    const std::int32_t ncall = i32("call count");
    const std::int32_t nval = i32("value count");
    if (nval < 1) throw format_error(src + ": legacy imatrix entry '" + name + "' has no values");
    auto& w = m.weights[name];
    w.resize(std::size_t(nval));
    std::memcpy(w.data(), take(std::size_t(nval) * 4, "values"), w.size() * 4);
    if (ncall > 0)
      for (auto& x : w) x /= float(ncall);
  }
  if (pos + 4 <= b.size()) {
    m.chunk_count = std::uint32_t(i32("chunk count"));
    if (pos + 4 <= b.size()) {
      const std::int32_t len = i32("dataset length");
      if (len > 0 && std::size_t(len) <= b.size() - pos)
        m.datasets.emplace_back(reinterpret_cast<const char*>(take(std::size_t(len), "dataset")), std::size_t(len));
    }
  }
  return m;
}

}  // namespace detail

// Reads an importance matrix (GGUF or legacy); every value must be finite.
inline imatrix load_imatrix(const std::filesystem::path& path) {
  const mapped_file f(path);
  const auto b = f.bytes();
  const bool is_gguf = b.size() >= 4 && std::memcmp(b.data(), "GGUF", 4) == 0;
  imatrix m = is_gguf ? detail::load_imatrix_gguf(gguf::reader(b, path.string()))
                      : detail::load_imatrix_legacy(b, path.string());
  for (const auto& [name, w] : m.weights)
    for (std::size_t i = 0; i < w.size(); ++i)
      if (!std::isfinite(w[i]))
        throw format_error(path.string() + ": imatrix entry '" + name + "' value " + std::to_string(i) + " is not finite");
  return m;
}

}  // namespace strata::quant
