// The x86 tiers' table hooks (kernels/cpu/simd_kernels.hpp) from the per-format kernels
// (x86/hooks.hpp): one adaptor for every format's dot, instantiated by each tier with its ISA
// traits, and the AVX2 activation quantizers and row widening, which the AVX-512 tiers inherit.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86/act_quant.hpp"
#include "strata/kernels/cpu/x86/block32.hpp"
#include "strata/kernels/cpu/x86/float_dot.hpp"
#include "strata/kernels/cpu/x86/k_quants.hpp"

namespace strata::kernels::cpu {

template <class Fmt, isa Isa>
  requires(Isa != isa::scalar && x86::row_dot<Fmt>::available)
struct dot_kernel<Fmt, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86::row_dot<Fmt>::template run<x86::vec_for<Isa>, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86::row_dot<Fmt>::template run<x86::vec_for<Isa>, 4>(w, a, stride, o, n);
  }
};

template <class Act>
  requires(x86::row_act<Act>::available)
struct act_kernel<Act, isa::avx2> {
  static constexpr bool available = true;
  static void quantize_row(const float* x, void* out, std::size_t n) noexcept { x86::row_act<Act>::quantize_row(x, out, n); }
};

template <class Fmt>
  requires(x86::row_dequant<Fmt>::available)
struct dequant_kernel<Fmt, isa::avx2> {
  static constexpr bool available = true;
  static void dequant_row(const void* w, float* y, std::size_t n) noexcept { x86::row_dequant<Fmt>::dequant_row(w, y, n); }
};

}  // namespace strata::kernels::cpu
