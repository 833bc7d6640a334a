// Chooses the CPU kernel table once at start-up. Each x86 tier's overlay (its own SIMD
// kernels only) is laid over the tier below it, down to the scalar reference, so an entry a
// tier does not accelerate keeps the best lower-tier function. Built with baseline flags:
// this TU is the only one that names both the reference kernels and the tier tables.
#include <cstdlib>
#include <string>

#include "strata/core/error.hpp"
#include "strata/runtime/cpu_kernels.hpp"
#include "tier_tables.hpp"

namespace strata::rt {
namespace {

using kernels::cpu::isa;
using kernels::cpu::kernel_table;

// base with top's functions where top has them. dot_row and dot_rows_4 travel together,
// since dot_rows_4 must reproduce its own tier's dot_row bit for bit.
kernel_table lay_over(const kernel_table& base, const kernel_table& top) {
  kernel_table t = base;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!base[i].valid()) continue;  // a format without a reference stays unsupported
    const auto& o = top[i];
    if (o.dequant_row) t[i].dequant_row = o.dequant_row;
    if (o.quantize_act_row) t[i].quantize_act_row = o.quantize_act_row;
    if (o.dot_row) {
      t[i].dot_row = o.dot_row;
      t[i].dot_rows_4 = o.dot_rows_4;
    }
  }
  for (std::size_t i = 0; i < t.size(); ++i)
    if (base[i].valid() && top[i].gemm) t[i].gemm = top[i].gemm;  // packing stays the reference's
  if (top.attention) t.attention = top.attention;
  return t;
}

#if defined(STRATA_X86_TIERS)
struct x86_tables {
  kernel_table avx2, avx512, avx512_vnni, amx;
};
// Built on first use; merging only copies pointers, it runs no tier code.
const x86_tables& tables() {
  static const x86_tables t = [] {
    x86_tables x;
    x.avx2 = lay_over(kernels::cpu::reference_table(), avx2_kernel_table());
    x.avx512 = lay_over(x.avx2, avx512_kernel_table());
    x.avx512_vnni = lay_over(x.avx512, avx512_vnni_kernel_table());
    x.amx = lay_over(x.avx512_vnni, amx_kernel_table());
    return x;
  }();
  return t;
}
#endif

}  // namespace

isa best_isa() {
#if defined(STRATA_X86_TIERS)
  static const isa best = kernels::cpu::detect_isa();
  return best;
#else
  return isa::scalar;  // no SIMD tier compiled for this target
#endif
}

isa engine_isa() {
  static const isa tier = [] {
    const char* want = std::getenv("STRATA_CPU_ISA");
    if (!want || !*want) return best_isa();
    for (isa t : {isa::scalar, isa::avx2, isa::avx512, isa::avx512_vnni, isa::amx})
      if (kernels::cpu::name_of(t) == want) {
        if (int(t) > int(best_isa()))
          throw error("STRATA_CPU_ISA=" + std::string(want) + ": this CPU's best tier is " +
                      std::string(kernels::cpu::name_of(best_isa())));
        return t;
      }
    throw error("STRATA_CPU_ISA=" + std::string(want) + " is not a tier (scalar, avx2, avx512, avx512_vnni, amx)");
  }();
  return tier;
}

const kernel_table& select_kernel_table(isa tier) {
  if (tier == isa::scalar) return kernels::cpu::reference_table();
  // Tiers are ordered by CPU requirements, so any tier up to the best one is safe to run.
  if (int(tier) > int(best_isa()))
    throw error("CPU kernel tier " + std::string(kernels::cpu::name_of(tier)) +
                " is not available on this CPU (best: " + std::string(kernels::cpu::name_of(best_isa())) + ")");
#if defined(STRATA_X86_TIERS)
  switch (tier) {
    case isa::avx2:
      return tables().avx2;
    case isa::avx512:
      return tables().avx512;
    case isa::avx512_vnni:
      return tables().avx512_vnni;
    case isa::amx:
      return tables().amx;
    default:
      break;
  }
#endif
  return kernels::cpu::reference_table();
}

}  // namespace strata::rt
