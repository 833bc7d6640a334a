// Placement overrides with llama.cpp's spelling: `-ot REGEX=gpu|cpu|disk` (several rules
// separated by commas, or the option repeated; the first rule whose regex is found in a tensor
// name wins), `--cpu-moe` (every routed-expert tensor on the CPU) and `--n-cpu-moe N` (the
// routed experts of the first N blocks on the CPU).
#pragma once
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::tiers {

// gpu: resident in GPU memory. cpu: lives in RAM, decode computes it on the CPU (prefill may
// still upload it once per batch when that is faster). disk: read from the model file each use.
enum class forced_tier { gpu, cpu, disk };

inline std::string_view forced_name(forced_tier f) {
  return f == forced_tier::gpu ? "gpu" : f == forced_tier::cpu ? "cpu" : "disk";
}

struct override_rule {
  std::string pattern;
  std::regex regex;
  forced_tier where;
};

// "REGEX=TIER[,REGEX=TIER...]" -> rules appended to `out`; errors name the rule and the option.
inline void parse_override_rules(std::string_view text, std::vector<override_rule>& out) {
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view rule = text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    const std::size_t eq = rule.rfind('=');
    if (eq == std::string_view::npos || eq == 0)
      throw error("-ot/--override-tensor: rule '" + std::string(rule) + "' is not REGEX=gpu|cpu|disk");
    std::string tier(rule.substr(eq + 1));
    for (char& c : tier) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    forced_tier where;
    if (tier == "gpu") where = forced_tier::gpu;
    else if (tier == "cpu") where = forced_tier::cpu;
    else if (tier == "disk") where = forced_tier::disk;
    else throw error("-ot/--override-tensor: rule '" + std::string(rule) + "': tier '" + tier +
                     "' is not one of gpu, cpu, disk");
    const std::string pattern(rule.substr(0, eq));
    try {
      out.push_back({pattern, std::regex(pattern, std::regex::ECMAScript | std::regex::optimize), where});
    } catch (const std::regex_error& e) {
      throw error("-ot/--override-tensor: rule '" + std::string(rule) + "': bad regex '" + pattern + "' (" +
                  e.what() + ")");
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
}

// --cpu-moe and --n-cpu-moe as rules after the explicit ones (llama.cpp appends them too).
inline void add_cpu_moe_rules(bool all_layers, std::uint32_t n_first_layers, std::vector<override_rule>& out) {
  const auto add = [&](const std::string& pattern) {
    out.push_back({pattern, std::regex(pattern, std::regex::ECMAScript | std::regex::optimize), forced_tier::cpu});
  };
  if (all_layers) {
    add(R"(\.ffn_(up|down|gate)_exps)");
    return;
  }
  for (std::uint32_t il = 0; il < n_first_layers; ++il) add(R"(^blk\.)" + std::to_string(il) + R"(\.ffn_(up|down|gate)_exps)");
}

inline std::optional<forced_tier> forced_for(std::string_view name, const std::vector<override_rule>& rules) {
  for (const override_rule& r : rules)
    if (std::regex_search(name.begin(), name.end(), r.regex)) return r.where;
  return std::nullopt;
}

}  // namespace strata::tiers
