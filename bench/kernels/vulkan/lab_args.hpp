// Command-line helpers shared by the Vulkan kernel labs (bench/kernels/vulkan/*_bench.cpp).
#pragma once
#include <string>
#include <vector>

namespace strata::bench {

// "a,b,c" -> {"a", "b", "c"} (empty fields kept).
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t e = s.find(sep, at);
    out.push_back(s.substr(at, e == std::string::npos ? std::string::npos : e - at));
    if (e == std::string::npos) break;
    at = e + 1;
  }
  return out;
}

}  // namespace strata::bench
