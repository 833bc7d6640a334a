// AVX-512 + VNNI tier: the avx512 kernels instantiated again with vpdpbusd where it helps.
// Built with the avx512 flags plus -mavx512vnni; only select.cpp calls it, after checking
// the CPU.
// GCC 12's own AVX-512 intrinsics (_mm512_undefined_* inside casts and inserts) trip
// -Wuninitialized; GCC PR 105593, fixed in GCC 13.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "strata/kernels/cpu/x86/all.hpp"
#include "tier_tables.hpp"

namespace strata::rt {

const kernels::cpu::kernel_table& avx512_vnni_kernel_table() {
  static constexpr kernels::cpu::kernel_table t = kernels::cpu::x86::tier_table<kernels::cpu::isa::avx512_vnni>();
  return t;
}

}  // namespace strata::rt
