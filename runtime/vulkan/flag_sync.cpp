#include "flag_sync.hpp"

#include <regex>

#include "shader_sources.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {

std::string with_flag_sync(const std::string& src, const std::string& label, std::uint32_t binding,
                           const flag_sync_options& o) {
  static const std::regex main_re(R"(void\s+main\s*\(\s*\))");
  // Every main() (kernels choose one of several by #if) becomes the wrapped function.
  if (!std::regex_search(src, main_re)) throw error("kernel '" + label + "': no main() for the flag-sync wrapper");
  std::string s = std::regex_replace(src, main_re, "void strata_kernel_main()");

  // The wait's word in the kernel's push constants (every kernel names its block `p`), or a block
  // of its own.
  const std::string word = "  layout(offset = " + std::to_string(flag_sync_push_offset) + ") uint strata_sync_wait;\n";
  if (const auto pc = s.find("layout(push_constant)"); pc != std::string::npos) {
    const auto close = s.find("} p;", pc);
    if (close == std::string::npos) throw error("kernel '" + label + "': push constants not closed by '} p;'");
    s.insert(close, word);
  } else {
    const auto at = s.find("void strata_kernel_main()");  // before the first of them
    s.insert(at, "layout(push_constant) uniform StrataSyncParams {\n" + word + "} p;\n");
  }

  // Coherent buffers (weights excepted: nothing in a step writes them through a shader).
  static const std::regex buffer_re(R"((layout\s*\([^)]*binding[^)]*\)\s*)([A-Za-z_ \t]*?)\bbuffer\s+(\w+))");
  std::string out;
  auto begin = s.cbegin();
  for (std::sregex_iterator it(s.begin(), s.end(), buffer_re), end; it != end; ++it) {
    const auto& mm = *it;
    out.append(begin, mm[0].first);
    const std::string quals = mm[2].str(), name = mm[3].str();
    const bool weights = std::regex_match(name, std::regex(R"(W\d+)"));
    const bool already = !o.coherent || quals.find("coherent") != std::string::npos || quals.find("COHERENT") != std::string::npos;
    out += mm[1].str() + quals + (weights || already ? "" : "coherent ") + "buffer " + name;
    begin = mm[0].second;
  }
  out.append(begin, s.cend());

  const auto version_end = out.find('\n') + 1;
  out.insert(version_end, "#define FLAG_SYNC 1\n#define FLAG_SYNC_BINDING " + std::to_string(binding) +
                              "\n#define FLAG_SYNC_BACKOFF " + std::to_string(o.backoff) +
                              (o.coherent ? "\n#define TAIL_COHERENT coherent\n" : "\n"));
  out += shader_source("flag_sync");
  return out;
}

}  // namespace strata::gpu
