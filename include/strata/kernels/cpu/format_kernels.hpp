// Type-erased per-format CPU kernels (dequantize a row, quantize an activation row into the
// format's `act`, dot a weight row with an activation row) and the table that maps GGUF type ids
// to them. The reference table is built from each format's scalar functions; ISA tables
// (runtime/cpu/) override entries with SIMD versions and are tested against this one.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "strata/gguf/type_id.hpp"
#include "strata/kernels/cpu/attention_tile.hpp"
#include "strata/kernels/cpu/isa.hpp"
#include "strata/kernels/cpu/packed/all.hpp"
#include "strata/kernels/cpu/packed_gemm.hpp"
#include "strata/quant/all.hpp"

namespace strata::kernels::cpu {

struct format_kernels {
  gguf::type_id type = gguf::type_id::f32;       // weight format
  gguf::type_id act_type = gguf::type_id::f32;   // format activations are converted to
  std::size_t block_elems = 0;                   // weight elements per block
  std::size_t block_bytes = 0;
  std::size_t act_block_elems = 0;
  std::size_t act_block_bytes = 0;
  void (*dequant_row)(const void* w, float* y, std::size_t n) = nullptr;
  void (*quantize_act_row)(const float* x, void* a, std::size_t n) = nullptr;
  float (*dot_row)(const void* w, const void* a, std::size_t n) = nullptr;
  // Optional (null: callers use dot_row): one weight row against 4 activation rows at
  // a, a + a_stride, a + 2·a_stride, a + 3·a_stride (bytes), so prefill unpacks each weight
  // block once for 4 tokens. out[r] must equal dot_row(w, a + r·a_stride, n) bit for bit.
  void (*dot_rows_4)(const void* w, const void* a, std::size_t a_stride, float* out, std::size_t n) = nullptr;
  // Optional packed layout for matmul (kernels/cpu/packed_gemm.hpp; null: rows as stored).
  // pack_group writes rows [16g, 16g + 16) of a `rows` × k matrix (16 row sizes of bytes);
  // gemm computes a range of groups for a batch. Activation rows for gemm carry act_extra
  // bytes per act block after the row, written by prepare_act (when act_extra > 0).
  void (*pack_group)(const void* w, std::size_t rows, std::size_t k, std::size_t g, void* dst) = nullptr;
  void (*gemm)(const gemm_args& args) = nullptr;
  void (*prepare_act)(void* act_row, std::size_t k) = nullptr;
  std::size_t act_extra = 0;

  bool valid() const noexcept { return dot_row != nullptr; }
  std::size_t row_bytes(std::size_t n) const noexcept { return n / block_elems * block_bytes; }
  std::size_t act_row_bytes(std::size_t n) const noexcept { return n / act_block_elems * act_block_bytes; }
  // Bytes of an activation row for gemm: the row, then its extras.
  std::size_t gemm_act_bytes(std::size_t n) const noexcept { return act_row_bytes(n) + n / act_block_elems * act_extra; }
};

// One activation row in the layout a packed gemm reads (gemm_act_bytes(k) bytes at dst).
inline void quantize_for_gemm(const format_kernels& k, const float* x, std::byte* dst, std::size_t n) {
  k.quantize_act_row(x, dst, n);
  if (k.prepare_act) k.prepare_act(dst, n);
}

inline constexpr std::size_t max_type_id = 40;

// An ISA tier's kernels: one entry per GGUF type id, plus the ops that do not depend on a
// weight format. attention may return false for a tile it cannot handle (head_dim not a
// multiple of its vector width); the caller then runs attention_tile_reference.
struct kernel_table {
  std::array<format_kernels, max_type_id> formats{};
  bool (*attention)(attention_tile&) noexcept = nullptr;

  constexpr format_kernels& operator[](std::size_t i) noexcept { return formats[i]; }
  constexpr const format_kernels& operator[](std::size_t i) const noexcept { return formats[i]; }
  static constexpr std::size_t size() noexcept { return max_type_id; }
};

namespace detail {

template <class Fmt>
void ref_dequant_row(const void* w, float* y, std::size_t n) {
  quant::dequant_row<Fmt>(static_cast<const typename Fmt::block*>(w), y, n);
}
template <class Fmt>
void ref_quantize_act_row(const float* x, void* a, std::size_t n) {
  quant::quantize_row<typename Fmt::act>(x, static_cast<typename Fmt::act::block*>(a), n);
}
template <class Fmt>
float ref_dot_row(const void* w, const void* a, std::size_t n) {
  return quant::dot_row<Fmt>(static_cast<const typename Fmt::block*>(w),
                             static_cast<const typename Fmt::act::block*>(a), n);
}

template <class Fmt>
constexpr format_kernels reference_kernels() {
  using Act = typename Fmt::act;
  format_kernels k{Fmt::gguf_type,
                   Act::gguf_type,
                   Fmt::block_elems,
                   sizeof(typename Fmt::block),
                   Act::block_elems,
                   sizeof(typename Act::block),
                   &ref_dequant_row<Fmt>,
                   &ref_quantize_act_row<Fmt>,
                   &ref_dot_row<Fmt>};
  // The packed layout and its scalar gemm: the scalar tier packs too, and every tier's gemm
  // must equal this one bit for bit.
  using P = typename packed_layout<Fmt>::type;
  if constexpr (!std::is_void_v<P>) {
    k.pack_group = &P::pack_group;
    k.gemm = &gemm_reference<P>;
    if constexpr (P::act_extra > 0) k.prepare_act = &P::prepare_act;
    k.act_extra = P::act_extra;
  }
  return k;
}

inline bool reference_attention(attention_tile& t) noexcept {
  attention_tile_reference(t);
  return true;
}

template <class... Fmt>
kernel_table make_reference_table(quant::type_list<Fmt...>) {
  kernel_table t{};
  ((t[std::size_t(Fmt::gguf_type)] = reference_kernels<Fmt>()), ...);
  t.attention = &reference_attention;
  return t;
}

}  // namespace detail

// Scalar reference kernels for every format in quant::all.
inline const kernel_table& reference_table() {
  static const kernel_table t = detail::make_reference_table(quant::all{});
  return t;
}

}  // namespace strata::kernels::cpu
