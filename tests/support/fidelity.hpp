// Test support: llama.cpp golden runs from a fixture manifest (prompt ids, logits files, greedy
// continuations and the per-model tolerance_nmse), for the fidelity suites of every backend.
#pragma once
#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/fixtures.hpp"

namespace strata::test {

struct golden_run {
  std::string prompt;                         // short / medium / long
  std::vector<std::int32_t> ids;              // prompt ids (BOS included where the arch adds it)
  std::filesystem::path logits;               // [n_prompt][n_vocab] float32
  std::filesystem::path gen_logits;           // [32][n_vocab] or empty
  std::vector<std::int32_t> greedy;           // g0..g31
};

struct golden_model {
  std::string name;
  std::filesystem::path path;
  std::string arch;
  double tolerance_nmse = 0;
  std::vector<golden_run> runs;
};

inline std::vector<golden_model> load_golden(const std::filesystem::path& manifest, const std::filesystem::path& root,
                                             bool only_present_logits) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (const auto err = parser.load(manifest.string()).get(doc))
    throw std::runtime_error(manifest.string() + ": " + simdjson::error_message(err));
  std::vector<golden_model> out;
  const simdjson::dom::object prompts = doc["prompts"].get_object();
  const simdjson::dom::object models = doc["models"].get_object();
  for (const auto [name, m] : models) {
    bool stored = true;
    if (m["stored"].get(stored) == simdjson::SUCCESS && !stored) continue;
    golden_model g;
    g.name = std::string(name);
    g.path = root / std::string(m["file"].get_string().value());
    g.arch = std::string(m["arch"].get_string().value());
    if (m["tolerance_nmse"].get(g.tolerance_nmse) != simdjson::SUCCESS) continue;
    const simdjson::dom::object runs = m["runs"].get_object();
    for (const auto [pname, r] : runs) {
      golden_run run;
      run.prompt = std::string(pname);
      const simdjson::dom::array ids = prompts[pname]["ids"][g.arch].get_array();
      for (const auto id : ids) run.ids.push_back(std::int32_t(id.get_int64().value()));
      run.logits = root / std::string(r["logits_file"].get_string().value());
      std::string_view gen;
      if (r["gen_logits_file"].get(gen) == simdjson::SUCCESS) run.gen_logits = root / std::string(gen);
      const simdjson::dom::array greedy = r["greedy_tokens"].get_array();
      for (const auto id : greedy) run.greedy.push_back(std::int32_t(id.get_int64().value()));
      if (only_present_logits && !std::filesystem::exists(run.logits)) continue;
      if (!run.gen_logits.empty() && !std::filesystem::exists(run.gen_logits)) run.gen_logits.clear();
      g.runs.push_back(std::move(run));
    }
    if (!g.runs.empty() && std::filesystem::exists(g.path)) out.push_back(std::move(g));
  }
  return out;
}

// Golden models shipped in tests/fixtures (always) or the full shared set (when present).
inline std::vector<golden_model> local_golden() {
  return load_golden(fixture_dir() / "models" / "manifest.json", fixture_dir(), true);
}
inline std::vector<golden_model> shared_golden() {
  const auto dir = shared_fixture_dir();
  if (dir.empty()) return {};
  return load_golden(dir / "manifest.json", dir, true);
}

struct logit_stats {
  double nmse = 0;
  double max_abs = 0;
  std::size_t top1_agree = 0;
  std::size_t rows = 0;
};

// NMSE over all rows (sum of squared differences / sum of squared reference), max-abs, top-1.
inline logit_stats compare_logits(std::span<const float> got, std::span<const float> ref, std::size_t n_vocab) {
  logit_stats s;
  s.rows = ref.size() / n_vocab;
  double num = 0, den = 0;
  for (std::size_t r = 0; r < s.rows; ++r) {
    std::size_t a = 0, b = 0;
    for (std::size_t c = 0; c < n_vocab; ++c) {
      const std::size_t i = r * n_vocab + c;
      const double d = double(got[i]) - double(ref[i]);
      num += d * d;
      den += double(ref[i]) * double(ref[i]);
      s.max_abs = std::max(s.max_abs, std::abs(d));
      if (got[i] > got[r * n_vocab + a]) a = c;
      if (ref[i] > ref[r * n_vocab + b]) b = c;
    }
    s.top1_agree += a == b;
  }
  s.nmse = den > 0 ? num / den : 0;
  return s;
}

}  // namespace strata::test
