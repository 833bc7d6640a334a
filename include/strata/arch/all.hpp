// Every supported architecture, and the one place a GGUF architecture string becomes a type.
// Adding an architecture: its trait header, included here, and one entry in `all`; the engine
// instantiates the decoder of every entry for every backend (runtime/engine/<backend>_stage.cpp).
#pragma once
#include <string>
#include <string_view>
#include <utility>

#include "strata/arch/llama.hpp"
#include "strata/arch/llama4.hpp"
#include "strata/arch/qwen3.hpp"
#include "strata/arch/qwen3_moe.hpp"

namespace strata::arch {

template <architecture... A>
struct arch_list {};

using all = arch_list<llama, qwen3, qwen3_moe, llama4>;

namespace detail {
template <class... A>
std::string names_of(arch_list<A...>) {
  std::string s;
  ((s += (s.empty() ? "" : ", ") + std::string(A::gguf_name)), ...);
  return s;
}
template <class A, class... Rest, class F>
decltype(auto) visit_each(std::string_view name, F&& f) {
  if (name == A::gguf_name) return std::forward<F>(f)(A{});
  if constexpr (sizeof...(Rest) > 0) {
    return visit_each<Rest...>(name, std::forward<F>(f));
  } else {
    throw error("unknown architecture '" + std::string(name) + "' (supported: " + names_of(all{}) + ")");
  }
}
template <class... A, class F>
decltype(auto) visit_in(arch_list<A...>, std::string_view name, F&& f) {
  return visit_each<A...>(name, std::forward<F>(f));
}
}  // namespace detail

// "llama, qwen3, qwen3moe, llama4": the GGUF names of `all`.
inline std::string supported_names() { return detail::names_of(all{}); }

// Calls f(Arch{}) for the architecture named `name`; throws naming the supported ones otherwise.
template <class F>
decltype(auto) visit(std::string_view name, F&& f) {
  return detail::visit_in(all{}, name, std::forward<F>(f));
}

}  // namespace strata::arch
