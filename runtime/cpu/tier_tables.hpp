// The per-ISA overlay tables, each defined in its own TU built with that tier's flags
// (avx2_table.cpp, avx512_table.cpp, avx512_vnni_table.cpp, amx_table.cpp). An overlay holds only the
// tier's own kernels; select.cpp lays it over the tier below (kernels/cpu/simd_kernels.hpp).
// Private to runtime/: callers use select_kernel_table().
#pragma once
#include "strata/kernels/cpu/format_kernels.hpp"

namespace strata::rt {

const kernels::cpu::kernel_table& avx2_kernel_table();
const kernels::cpu::kernel_table& avx512_kernel_table();
const kernels::cpu::kernel_table& avx512_vnni_kernel_table();
const kernels::cpu::kernel_table& amx_kernel_table();

}  // namespace strata::rt
