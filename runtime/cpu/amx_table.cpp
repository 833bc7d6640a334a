// AMX tier: the packed prefill GEMMs of Q8_0, Q4_K and Q6_K on AMX-INT8 tiles
// (kernels/cpu/x86/amx_gemm.hpp); select.cpp lays this overlay over avx512_vnni, which keeps
// every other kernel. Built with the avx512_vnni flags plus -mamx-tile -mamx-int8; only
// select.cpp calls it, after detect_isa found the CPU's AMX and Linux granted the tile state.
// GCC 12's own AVX-512 intrinsics (_mm512_undefined_* inside casts and inserts) trip
// -Wuninitialized; GCC PR 105593, fixed in GCC 13.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "strata/kernels/cpu/x86/amx_gemm.hpp"
#include "tier_tables.hpp"

namespace strata::rt {

const kernels::cpu::kernel_table& amx_kernel_table() {
  static constexpr kernels::cpu::kernel_table t = kernels::cpu::x86::amx_overlay(quant::all{});
  return t;
}

}  // namespace strata::rt
