// The bundled demo model (models/strata-demo.gguf, a small Qwen3 trained by tools/demo_model/):
// what strata-run and strata-serve load when no -m is given. Found next to the executable in an
// install tree (<prefix>/bin -> <prefix>/share/strata/models), in the source tree the build
// directory sits in, or in the source tree this binary was configured from.
#pragma once
#include <filesystem>
#include <string_view>
#include <vector>

namespace strata::rt {

inline constexpr std::string_view default_model_file = "strata-demo.gguf";
inline constexpr std::string_view default_model_id = "strata-demo";

// The places searched, in order, for an executable at `exe` (empty: this process's).
std::vector<std::filesystem::path> default_model_candidates(const std::filesystem::path& exe = {});

// The first candidate that exists; throws strata::error listing every path it tried.
std::filesystem::path find_default_model(const std::filesystem::path& exe = {});

}  // namespace strata::rt
