// Every x86 kernel, for the tier translation units (runtime/cpu/*_table.cpp, each built with its
// tier's flags): the row dots and converters (dot.hpp), the packed GEMM and the attention tile.
// Each tier instantiates them with its traits (vec.hpp: v256, v512<false>, v512<true>).
#pragma once
#include "strata/kernels/cpu/x86/attention.hpp"
#include "strata/kernels/cpu/x86/dot.hpp"
#include "strata/kernels/cpu/x86/packed_gemm.hpp"

namespace strata::kernels::cpu::x86 {
namespace {

// A tier's overlay table: its own kernels for every format, and its attention.
template <isa Isa>
constexpr kernel_table tier_table() {
  auto k = make_overlay<Isa>(quant::all{});
  k.attention = &attention_tile_simd<vec_for<Isa>>;
  return k;
}

}  // namespace
}  // namespace strata::kernels::cpu::x86
