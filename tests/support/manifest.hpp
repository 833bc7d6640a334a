// Test support: the fixture manifests (tests/fixtures/models/manifest.json, written by
// tools/trim_manifest.py, and the full ../shared/fixtures/manifest.json) parsed with simdjson
// into plain structs: every model file with its architecture and per-tensor type and shape.
// Suites that include this link simdjson (-lsimdjson / simdjson::simdjson).
#pragma once
#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/fixtures.hpp"

namespace strata::test {

struct manifest_tensor {
  std::string name;
  std::string type;              // ggml type name as llama.cpp prints it ("Q4_K", "F32")
  std::vector<std::uint64_t> ne; // ggml order, ne[0] contiguous
};

struct manifest_model {
  std::string name;               // "llama-Q4_K_M"
  std::filesystem::path path;     // absolute path of the .gguf
  std::string arch;               // general.architecture
  std::string variant;            // "Q4_K_M"
  bool stored = true;             // false: measured but not shipped in the shared set
  std::uint64_t size_bytes = 0;
  std::vector<manifest_tensor> tensors;  // in file order
};

// Models of a manifest; `root` is the fixture root that the entries' `file` is relative to.
inline std::vector<manifest_model> load_manifest(const std::filesystem::path& manifest,
                                                 const std::filesystem::path& root) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (const auto err = parser.load(manifest.string()).get(doc))
    throw std::runtime_error(manifest.string() + ": " + simdjson::error_message(err));
  std::vector<manifest_model> out;
  try {
    // Named locals: range-for over simdjson_result<...>::value() of a temporary would dangle.
    const simdjson::dom::object models = doc["models"].get_object();
    for (const auto [name, m] : models) {
      manifest_model mm;
      mm.name = std::string(name);
      mm.path = root / std::string(m["file"].get_string().value());
      mm.arch = std::string(m["arch"].get_string().value());
      mm.variant = std::string(m["variant"].get_string().value());
      bool stored = true;
      if (m["stored"].get(stored) == simdjson::SUCCESS) mm.stored = stored;
      mm.size_bytes = m["size_bytes"].get_uint64().value();
      // `tensors` is an object in file order: name -> {type, ne}.
      const simdjson::dom::object tensors = m["tensors"].get_object();
      for (const auto [tname, t] : tensors) {
        manifest_tensor mt;
        mt.name = std::string(tname);
        mt.type = std::string(t["type"].get_string().value());
        const simdjson::dom::array ne = t["ne"].get_array();
        for (const auto d : ne) mt.ne.push_back(d.get_uint64().value());
        mm.tensors.push_back(std::move(mt));
      }
      out.push_back(std::move(mm));
    }
  } catch (const simdjson::simdjson_error& e) {
    throw std::runtime_error(manifest.string() + ": unexpected layout: " + e.what());
  }
  return out;
}

// The four small models shipped in tests/fixtures/models.
inline std::vector<manifest_model> local_models() {
  return load_manifest(fixture_dir() / "models" / "manifest.json", fixture_dir());
}

// Every model of the shared set that is actually shipped ("stored": true); empty without it.
inline std::vector<manifest_model> shared_models() {
  const auto dir = shared_fixture_dir();
  if (dir.empty()) return {};
  std::vector<manifest_model> out;
  for (auto& m : load_manifest(dir / "manifest.json", dir))
    if (m.stored) out.push_back(std::move(m));
  return out;
}

// The vocab-only GGUFs of the shared set (no tensors); empty without it.
inline std::vector<std::filesystem::path> shared_tokenizer_ggufs() {
  const auto dir = shared_fixture_dir();
  if (dir.empty()) return {};
  return {dir / "tokenizer" / "ggml-vocab-llama-bpe.gguf", dir / "tokenizer" / "ggml-vocab-llama-spm.gguf",
          dir / "tokenizer" / "ggml-vocab-qwen3.gguf"};
}

}  // namespace strata::test
