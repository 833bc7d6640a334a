// Chooses the CPU kernel table once at start-up. Until ISA tables are compiled in, every tier
// maps to the scalar reference table.
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::rt {

kernels::cpu::isa best_isa() { return kernels::cpu::isa::scalar; }

const kernels::cpu::kernel_table& select_kernel_table(kernels::cpu::isa) { return kernels::cpu::reference_table(); }

}  // namespace strata::rt
