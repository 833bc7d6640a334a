// Every weight/activation format, as a type list, and run-time dispatch from a GGUF type id to
// the format struct (the one switch in the library that maps ids to formats).
#pragma once
#include <optional>
#include <string>
#include <utility>

#include "strata/core/error.hpp"
#include "strata/quant/bf16.hpp"
#include "strata/quant/f16.hpp"
#include "strata/quant/f32.hpp"
#include "strata/quant/iq4_nl.hpp"
#include "strata/quant/iq4_xs.hpp"
#include "strata/quant/mxfp4.hpp"
#include "strata/quant/q2_k.hpp"
#include "strata/quant/q3_k.hpp"
#include "strata/quant/q4_0.hpp"
#include "strata/quant/q4_1.hpp"
#include "strata/quant/q4_k.hpp"
#include "strata/quant/q5_0.hpp"
#include "strata/quant/q5_1.hpp"
#include "strata/quant/q5_k.hpp"
#include "strata/quant/q6_k.hpp"
#include "strata/quant/q8_0.hpp"
#include "strata/quant/q8_1.hpp"
#include "strata/quant/q8_k.hpp"

namespace strata::quant {

template <class... F>
struct type_list {
  static constexpr std::size_t size = sizeof...(F);
};

using all = type_list<f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q2_k, q3_k, q4_k, q5_k, q6_k, q8_k,
                      iq4_nl, iq4_xs, mxfp4>;

namespace detail {
template <class F, class... Fmt>
constexpr bool visit_impl(gguf::type_id t, F& f, type_list<Fmt...>) {
  return ((t == Fmt::gguf_type ? (f(Fmt{}), true) : false) || ...);
}
}  // namespace detail

// Calls f(Fmt{}) for the format of type id t; false if Strata has no format for t.
template <class F>
constexpr bool try_visit(gguf::type_id t, F&& f) {
  return detail::visit_impl(t, f, all{});
}

// As try_visit, but an unsupported type is an error naming it.
template <class F>
void visit(gguf::type_id t, F&& f) {
  if (!try_visit(t, f))
    throw error("tensor type " + std::string(gguf::name_of(t)) + " is not supported by Strata's quant formats");
}

constexpr bool is_supported(gguf::type_id t) noexcept {
  return try_visit(t, [](auto) {});
}

}  // namespace strata::quant
