// CPU kernel tables compiled per ISA in the runtime (runtime/cpu/), chosen once at start-up.
#pragma once
#include "strata/kernels/cpu/format_kernels.hpp"
#include "strata/kernels/cpu/isa.hpp"

namespace strata::rt {

// Best ISA tier this CPU supports and that this build compiled kernels for.
kernels::cpu::isa best_isa();
// Kernel table for a tier (entries without a fast version fall back to the reference).
const kernels::cpu::kernel_table& select_kernel_table(kernels::cpu::isa tier);

}  // namespace strata::rt
