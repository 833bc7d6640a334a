// CPU kernel tables compiled per ISA in the runtime (runtime/cpu/), chosen once at start-up.
#pragma once
#include "strata/kernels/cpu/format_kernels.hpp"
#include "strata/kernels/cpu/isa.hpp"

namespace strata::rt {

// Best ISA tier this CPU supports and that this build compiled kernels for.
kernels::cpu::isa best_isa();
// The tier the engine runs: best_isa(), or a lower one named by STRATA_CPU_ISA (scalar, avx2,
// avx512, avx512_vnni, amx) to reproduce what a CPU without the upper tiers computes. Naming a tier
// this CPU lacks, or an unknown name, is an error that lists the choices.
kernels::cpu::isa engine_isa();
// Kernel table for a tier (entries without a fast version fall back to the reference).
const kernels::cpu::kernel_table& select_kernel_table(kernels::cpu::isa tier);

}  // namespace strata::rt
