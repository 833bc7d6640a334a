// AVX2 tier (AVX2 + FMA + F16C). Built with -mavx2 -mfma -mf16c; only select.cpp calls it,
// and only after checking the CPU.
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/all.hpp"
#include "strata/kernels/cpu/x86/attention.hpp"
#include "strata/kernels/cpu/x86/packed_gemm.hpp"
#include "tier_tables.hpp"

namespace strata::rt {

const kernels::cpu::kernel_table& avx2_kernel_table() {
  static constexpr kernels::cpu::kernel_table t = [] {
    auto k = kernels::cpu::make_overlay<kernels::cpu::isa::avx2>(quant::all{});
    k.attention = &kernels::cpu::x86::attention_tile_simd<kernels::cpu::x86::v256>;
    return k;
  }();
  return t;
}

}  // namespace strata::rt
