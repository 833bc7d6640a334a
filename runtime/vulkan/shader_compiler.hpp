// GLSL -> SPIR-V with glslang at run time, with an on-disk SPIR-V cache keyed by a hash of
// (full source incl. #defines, glslang version, device). A warm start compiles nothing.
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace strata::gpu {

// $STRATA_CACHE_DIR, else $XDG_CACHE_HOME/strata, else ~/.cache/strata; empty if none usable.
std::filesystem::path default_cache_dir();

// 64-bit FNV-1a: stable across runs and builds (std::hash is not).
std::uint64_t stable_hash(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) noexcept;

class shader_compiler {
 public:
  // device_key is mixed into every cache key (device name + driver version).
  shader_compiler(std::filesystem::path cache_dir, std::string device_key);
  ~shader_compiler();

  // Thread-safe. `name` is used in error messages only.
  std::vector<std::uint32_t> compile(const std::string& name, const std::string& source);

  std::uint32_t compiled() const noexcept { return compiled_; }
  std::uint32_t cache_hits() const noexcept { return hits_; }
  const std::filesystem::path& cache_dir() const noexcept { return dir_; }

 private:
  std::filesystem::path dir_;
  std::string device_key_;
  std::atomic<std::uint32_t> compiled_{0}, hits_{0};
};

}  // namespace strata::gpu
