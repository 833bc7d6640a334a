// Every supported architecture, and the one place a GGUF architecture string becomes a type.
#pragma once
#include <string>
#include <string_view>
#include <utility>

#include "strata/arch/llama.hpp"
#include "strata/arch/llama4.hpp"
#include "strata/arch/qwen3.hpp"
#include "strata/arch/qwen3_moe.hpp"

namespace strata::arch {

inline constexpr std::string_view supported_names = "llama, qwen3, qwen3moe, llama4";

// Calls f(Arch{}) for the architecture named `name`; throws naming the supported ones otherwise.
template <class F>
decltype(auto) visit(std::string_view name, F&& f) {
  if (name == llama::gguf_name) return std::forward<F>(f)(llama{});
  if (name == qwen3::gguf_name) return std::forward<F>(f)(qwen3{});
  if (name == qwen3_moe::gguf_name) return std::forward<F>(f)(qwen3_moe{});
  if (name == llama4::gguf_name) return std::forward<F>(f)(llama4{});
  throw error("unknown architecture '" + std::string(name) + "' (supported: " + std::string(supported_names) + ")");
}

}  // namespace strata::arch
