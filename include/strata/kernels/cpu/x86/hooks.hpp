// What the x86 kernel headers provide per format, as specializations of these hooks (the
// primary templates say "nothing"); x86/dot.hpp turns them into the tier tables' entries:
//   row_dot<Fmt>      template <class V, int R> static void run(w, a, a_stride, out, n):
//                     out[r] = dot of weight row w with activation row r (R ≤ 4 rows, the same
//                     bits for every R)
//   row_act<Act>      static void quantize_row(const float*, void*, size_t): byte-identical
//                     to quant::quantize_row<Act> (AVX2 code, inherited by the AVX-512 tiers)
//   row_dequant<Fmt>  static void dequant_row(const void*, float*, size_t): bit-identical
#pragma once

namespace strata::kernels::cpu::x86 {
namespace {

struct none {
  static constexpr bool available = false;
};
struct provided {
  static constexpr bool available = true;
};

template <class Fmt>
struct row_dot : none {};
template <class Act>
struct row_act : none {};
template <class Fmt>
struct row_dequant : none {};

}  // namespace
}  // namespace strata::kernels::cpu::x86
