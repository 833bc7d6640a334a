// The formats with a packed layout (kernels/cpu/packed_gemm.hpp): packed_layout<Fmt>::type is
// the layout of quant format Fmt, or void when matmul keeps Fmt's row layout.
#pragma once
#include "strata/kernels/cpu/packed/q4_k.hpp"
#include "strata/kernels/cpu/packed/q6_k.hpp"
#include "strata/kernels/cpu/packed/q8_0.hpp"

namespace strata::kernels::cpu {

template <class Fmt>
struct packed_layout {
  using type = void;
};
template <>
struct packed_layout<quant::q8_0> {
  using type = packed::q8_0;
};
template <>
struct packed_layout<quant::q4_k> {
  using type = packed::q4_k;
};
template <>
struct packed_layout<quant::q6_k> {
  using type = packed::q6_k;
};

}  // namespace strata::kernels::cpu
