// AVX-512 tier (F/BW/VL/DQ + FMA + F16C, no VNNI). Built with -mavx512f -mavx512bw
// -mavx512vl -mavx512dq -mfma -mf16c; only select.cpp calls it, after checking the CPU.
// GCC 12's own AVX-512 intrinsics (_mm512_undefined_* inside casts and inserts) trip
// -Wuninitialized; GCC PR 105593, fixed in GCC 13.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "strata/kernels/cpu/x86/all.hpp"
#include "tier_tables.hpp"

namespace strata::rt {

const kernels::cpu::kernel_table& avx512_kernel_table() {
  static constexpr kernels::cpu::kernel_table t = kernels::cpu::x86::tier_table<kernels::cpu::isa::avx512>();
  return t;
}

}  // namespace strata::rt
