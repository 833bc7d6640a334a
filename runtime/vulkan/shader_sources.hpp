// The GLSL sources of shaders/, embedded at build time by tools/embed_shaders.py.
#pragma once
#include <span>
#include <string>
#include <string_view>

#include "strata/core/error.hpp"

namespace strata::gpu {

struct shader_source_entry {
  std::string_view name;  // path under shaders/ without .glsl, e.g. "quant/q4_k"
  std::string_view text;
};

const std::span<const shader_source_entry> embedded_shaders() noexcept;

inline std::string_view shader_source(std::string_view name) {
  for (const auto& e : embedded_shaders())
    if (e.name == name) return e.text;
  throw error("no embedded shader named '" + std::string(name) + "'");
}

}  // namespace strata::gpu
