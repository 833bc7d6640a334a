// The hooks a SIMD tier specializes per format (kernels/cpu/<isa>/<fmt>.hpp) and the overlay
// table a tier's translation unit builds from them. The primary templates say "not
// accelerated"; runtime/cpu/select.cpp lays each tier's overlay over the tier below it, down
// to reference_table(), so an entry a tier leaves empty keeps the lower tier's function.
//
// Why overlays and not full tables built inside the tier TU: a tier TU is compiled with its
// ISA flags, so any inline function it instantiates (a reference dot, a std algorithm) is
// emitted there as a weak symbol with AVX-512 or FMA code in it, and the linker may keep that
// copy for the whole program: the scalar table would then fault on older CPUs, and the
// reference dequant would silently change through FMA contraction. Tier headers therefore
// call only intrinsics and their own internal-linkage helpers, and never name a reference
// kernel; the merge happens in select.cpp, compiled with baseline flags.
#pragma once
#include <cstddef>

#include "strata/kernels/cpu/format_kernels.hpp"
#include "strata/kernels/cpu/isa.hpp"

namespace strata::kernels::cpu {

// Weight format Fmt against its act format: dot_row, and dot_rows_4 (nullptr if absent).
template <class Fmt, isa Isa>
struct dot_kernel {
  static constexpr bool available = false;
};

// Activation format Act: quantize_row(const float* x, void* blocks, size_t n), byte-identical
// to quant::quantize_row<Act> for finite inputs.
template <class Act, isa Isa>
struct act_kernel {
  static constexpr bool available = false;
};

// Weight format Fmt: dequant_row(const void* blocks, float* y, size_t n), bit-identical to
// quant::dequant_row<Fmt>.
template <class Fmt, isa Isa>
struct dequant_kernel {
  static constexpr bool available = false;
};

// Weight format Fmt with a packed layout (packed/all.hpp): gemm(const gemm_args&), bit-identical
// to gemm_reference of the layout.
template <class Fmt, isa Isa>
struct gemm_kernel {
  static constexpr bool available = false;
};

namespace detail {

template <isa Isa, class Fmt>
constexpr format_kernels overlay_entry() {
  using Act = typename Fmt::act;
  format_kernels k{};
  k.type = Fmt::gguf_type;
  k.act_type = Act::gguf_type;
  k.block_elems = Fmt::block_elems;
  k.block_bytes = sizeof(typename Fmt::block);
  k.act_block_elems = Act::block_elems;
  k.act_block_bytes = sizeof(typename Act::block);
  if constexpr (dequant_kernel<Fmt, Isa>::available) k.dequant_row = &dequant_kernel<Fmt, Isa>::dequant_row;
  if constexpr (act_kernel<Act, Isa>::available) k.quantize_act_row = &act_kernel<Act, Isa>::quantize_row;
  if constexpr (dot_kernel<Fmt, Isa>::available) {
    k.dot_row = &dot_kernel<Fmt, Isa>::dot_row;
    k.dot_rows_4 = dot_kernel<Fmt, Isa>::dot_rows_4;
  }
  if constexpr (gemm_kernel<Fmt, Isa>::available) k.gemm = &gemm_kernel<Fmt, Isa>::gemm;
  return k;
}

}  // namespace detail

// A tier's own kernels for the formats of `list`, indexed by GGUF type id; functions the tier
// does not provide stay null (valid() is false for an entry with no dot_row of its own).
template <isa Isa, class... Fmt>
constexpr kernel_table make_overlay(quant::type_list<Fmt...>) {
  kernel_table t{};
  ((t[std::size_t(Fmt::gguf_type)] = detail::overlay_entry<Isa, Fmt>()), ...);
  return t;
}

}  // namespace strata::kernels::cpu
