// AVX-512 F32 · F32 dot (activations stay F32): 32 elements per step, masked tail.
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/float_dot.hpp"
#include "strata/quant/f32.hpp"

namespace strata::kernels::cpu {

template <isa Isa>
requires x86_avx512::avx512_tier<Isa>
struct dot_kernel<quant::f32, Isa> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx512::dot_float<x86_avx512::f32_loader, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx512::dot_float<x86_avx512::f32_loader, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
