// AVX2 tier (AVX2 + FMA + F16C). Built with -mavx2 -mfma -mf16c; only select.cpp calls it,
// and only after checking the CPU.
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx2/all.hpp"
#include "tier_tables.hpp"

namespace strata::rt {

const kernels::cpu::kernel_table& avx2_kernel_table() {
  static constexpr kernels::cpu::kernel_table t = kernels::cpu::make_overlay<kernels::cpu::isa::avx2>(quant::all{});
  return t;
}

}  // namespace strata::rt
