// AVX-512 tier (F/BW/VL/DQ + FMA + F16C, no VNNI). Built with -mavx512f -mavx512bw
// -mavx512vl -mavx512dq -mfma -mf16c; only select.cpp calls it, after checking the CPU.
// GCC 12's own AVX-512 intrinsics (_mm512_undefined_* inside casts and inserts) trip
// -Wuninitialized; GCC PR 105593, fixed in GCC 13.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "strata/kernels/cpu/simd_kernels.hpp"
#include "strata/kernels/cpu/x86_avx512/all.hpp"
#include "strata/kernels/cpu/x86/attention.hpp"
#include "strata/kernels/cpu/x86/packed_gemm.hpp"
#include "tier_tables.hpp"

namespace strata::rt {

const kernels::cpu::kernel_table& avx512_kernel_table() {
  static constexpr kernels::cpu::kernel_table t = [] {
    auto k = kernels::cpu::make_overlay<kernels::cpu::isa::avx512>(quant::all{});
    k.attention = &kernels::cpu::x86::attention_tile_simd<kernels::cpu::x86::v512<false>>;
    return k;
  }();
  return t;
}

}  // namespace strata::rt
