// Where Strata keeps per-machine caches (SPIR-V, pipeline cache, link probe results).
#pragma once
#include <cstdlib>
#include <filesystem>

namespace strata::rt {

// $STRATA_CACHE_DIR, else $XDG_CACHE_HOME/strata, else ~/.cache/strata; empty if none is set.
inline std::filesystem::path default_cache_dir() {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("STRATA_CACHE_DIR"); d && *d) return fs::path(d);
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "strata";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "strata";
  return {};
}

}  // namespace strata::rt
