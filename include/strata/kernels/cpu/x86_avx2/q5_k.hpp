// AVX2 Q5_K · Q8_K dot: Q4_K's kernel with the fifth code bit (qh bit j for sub-block j)
// or-ed in as 16 (see x86_avx2/q4_k.hpp).
#pragma once
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/q4_k.hpp"
#include "strata/quant/q5_k.hpp"

namespace strata::kernels::cpu {

template <>
struct dot_kernel<quant::q5_k, isa::avx2> {
  static constexpr bool available = true;
  static float dot_row(const void* w, const void* a, std::size_t n) noexcept {
    float o;
    x86_avx2::dot_q45_k<true, 1>(w, a, 0, &o, n);
    return o;
  }
  static void dot_rows_4(const void* w, const void* a, std::size_t stride, float* o, std::size_t n) noexcept {
    x86_avx2::dot_q45_k<true, 4>(w, a, stride, o, n);
  }
};

}  // namespace strata::kernels::cpu
