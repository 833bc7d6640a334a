// AVX2 tier (AVX2 + FMA + F16C). Built with -mavx2 -mfma -mf16c; only select.cpp calls it,
// and only after checking the CPU.
#include "strata/kernels/cpu/x86/all.hpp"
#include "tier_tables.hpp"

namespace strata::rt {

const kernels::cpu::kernel_table& avx2_kernel_table() {
  static constexpr kernels::cpu::kernel_table t = kernels::cpu::x86::tier_table<kernels::cpu::isa::avx2>();
  return t;
}

}  // namespace strata::rt
