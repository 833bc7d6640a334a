// Where the bundled demo model is looked for (include/strata/runtime/default_model.hpp).
// STRATA_DATADIR (<prefix>/share/strata) and STRATA_SOURCE_DIR come from the build system.
#include "strata/runtime/default_model.hpp"

#include <system_error>

#include "strata/core/error.hpp"

namespace strata::rt {

namespace fs = std::filesystem;

std::vector<fs::path> default_model_candidates(const fs::path& exe) {
  std::error_code ec;
  fs::path self = exe.empty() ? fs::read_symlink("/proc/self/exe", ec) : fs::absolute(exe, ec);
  std::vector<fs::path> out;
  const auto add = [&](const fs::path& p) {
    const fs::path n = p.lexically_normal();
    for (const auto& o : out)
      if (o == n) return;
    out.push_back(n);
  };
  if (!ec && !self.empty()) {
    const fs::path dir = self.parent_path();
    add(dir / "../share/strata/models" / default_model_file);  // installed: <prefix>/bin/strata-serve
    // A build directory inside the source tree: build/release/apps/strata-serve -> ./models.
    fs::path up = dir;
    for (int i = 0; i < 4 && up.has_relative_path(); ++i, up = up.parent_path()) add(up / "models" / default_model_file);
  }
#ifdef STRATA_DATADIR
  add(fs::path(STRATA_DATADIR) / "models" / default_model_file);
#endif
#ifdef STRATA_SOURCE_DIR
  add(fs::path(STRATA_SOURCE_DIR) / "models" / default_model_file);
#endif
  return out;
}

fs::path find_default_model(const fs::path& exe) {
  const auto candidates = default_model_candidates(exe);
  std::string tried;
  for (const auto& p : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
    tried += "\n  " + p.string();
  }
  throw error("no model given (-m FILE) and the bundled demo model " + std::string(default_model_file) +
              " was not found; looked in:" + tried);
}

}  // namespace strata::rt
