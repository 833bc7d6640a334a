#include "quant_layout.hpp"

#include <cstddef>
#include <cstring>
#include <string_view>

#include "shader_sources.hpp"
#include "strata/core/error.hpp"
#include "strata/quant/all.hpp"

namespace strata::gpu {
namespace {

template <class Fmt>
struct layout_writer {
  std::string out;
  std::string prefix;
  layout_writer() {
    for (char c : Fmt::name) prefix += char(c >= 'a' && c <= 'z' ? c - 32 : c);
    const std::size_t qk = Fmt::block_elems == 1 ? 16 : Fmt::block_elems;
    const std::size_t bytes = Fmt::block_elems == 1 ? 16 * sizeof(typename Fmt::block) : sizeof(typename Fmt::block);
    out += "#define QK " + std::to_string(qk) + "u\n#define BLOCK_BYTES " + std::to_string(bytes) + "u\n";
  }
  layout_writer& field(std::string_view name, std::size_t offset, std::size_t size) {
    out += "#define " + prefix + "_OFF_" + std::string(name) + " " + std::to_string(offset) + "u\n";
    out += "#define " + prefix + "_SIZE_" + std::string(name) + " " + std::to_string(size) + "u\n";
    return *this;
  }
  layout_writer& grouped() {
    out += "#define GROUPED_ROWS " + std::to_string(row_group_blocks) + "u\n";
    return *this;
  }
  template <class T, std::size_t N>
  layout_writer& table(std::string_view name, const std::array<T, N>& v) {
    out += "const float " + prefix + "_" + std::string(name) + "[" + std::to_string(N) + "] = float[](";
    for (std::size_t i = 0; i < N; ++i) out += (i ? ", " : "") + std::to_string(float(v[i]));
    out += ");\n";
    return *this;
  }
};

#define STRATA_FIELD(F, member, NAME) field(NAME, offsetof(quant::F::block, member), sizeof(quant::F::block::member))

std::string layout_of(gguf::type_id t) {
  using gguf::type_id;
  switch (t) {
    case type_id::f32: return layout_writer<quant::f32>().out;
    case type_id::f16: return layout_writer<quant::f16>().out;
    case type_id::bf16: return layout_writer<quant::bf16>().out;
    case type_id::q4_0: return layout_writer<quant::q4_0>().STRATA_FIELD(q4_0, d, "D").STRATA_FIELD(q4_0, qs, "QS").out;
    case type_id::q4_1:
      return layout_writer<quant::q4_1>().STRATA_FIELD(q4_1, d, "D").STRATA_FIELD(q4_1, m, "M").STRATA_FIELD(q4_1, qs, "QS").out;
    case type_id::q5_0:
      return layout_writer<quant::q5_0>().STRATA_FIELD(q5_0, d, "D").STRATA_FIELD(q5_0, qh, "QH").STRATA_FIELD(q5_0, qs, "QS").out;
    case type_id::q5_1:
      return layout_writer<quant::q5_1>()
          .STRATA_FIELD(q5_1, d, "D").STRATA_FIELD(q5_1, m, "M").STRATA_FIELD(q5_1, qh, "QH").STRATA_FIELD(q5_1, qs, "QS").out;
    case type_id::q8_0:
      return layout_writer<quant::q8_0>().STRATA_FIELD(q8_0, d, "D").STRATA_FIELD(q8_0, qs, "QS").grouped().out;
    case type_id::q2_k:
      return layout_writer<quant::q2_k>()
          .STRATA_FIELD(q2_k, scales, "SCALES").STRATA_FIELD(q2_k, qs, "QS").STRATA_FIELD(q2_k, d, "D").STRATA_FIELD(q2_k, dmin, "DMIN").out;
    case type_id::q3_k:
      return layout_writer<quant::q3_k>()
          .STRATA_FIELD(q3_k, hmask, "HMASK").STRATA_FIELD(q3_k, qs, "QS").STRATA_FIELD(q3_k, scales, "SCALES").STRATA_FIELD(q3_k, d, "D").out;
    case type_id::q4_k:
      return layout_writer<quant::q4_k>()
          .STRATA_FIELD(q4_k, d, "D").STRATA_FIELD(q4_k, dmin, "DMIN").STRATA_FIELD(q4_k, scales, "SCALES").STRATA_FIELD(q4_k, qs, "QS").out;
    case type_id::q5_k:
      return layout_writer<quant::q5_k>()
          .STRATA_FIELD(q5_k, d, "D").STRATA_FIELD(q5_k, dmin, "DMIN").STRATA_FIELD(q5_k, scales, "SCALES")
          .STRATA_FIELD(q5_k, qh, "QH").STRATA_FIELD(q5_k, qs, "QS").out;
    case type_id::q6_k:
      return layout_writer<quant::q6_k>()
          .STRATA_FIELD(q6_k, ql, "QL").STRATA_FIELD(q6_k, qh, "QH").STRATA_FIELD(q6_k, scales, "SCALES").STRATA_FIELD(q6_k, d, "D")
          .grouped()
          .out;
    case type_id::iq4_nl:
      return layout_writer<quant::iq4_nl>()
          .STRATA_FIELD(iq4_nl, d, "D").STRATA_FIELD(iq4_nl, qs, "QS").table("VALUES", quant::iq4_nl::values).out;
    case type_id::iq4_xs:
      return layout_writer<quant::iq4_xs>()
          .STRATA_FIELD(iq4_xs, d, "D").STRATA_FIELD(iq4_xs, scales_h, "SCALES_H").STRATA_FIELD(iq4_xs, scales_l, "SCALES_L")
          .STRATA_FIELD(iq4_xs, qs, "QS").table("VALUES", quant::iq4_xs::values).out;
    case type_id::mxfp4:
      return layout_writer<quant::mxfp4>()
          .STRATA_FIELD(mxfp4, e, "E").STRATA_FIELD(mxfp4, qs, "QS").table("VALUES", quant::mxfp4::values).out;
    default: return {};
  }
}
#undef STRATA_FIELD

// The fields of the formats stored in row groups, in block order (they tile the block).
struct block_field {
  std::size_t offset, size;
};
#define STRATA_BLOCK_FIELD(F, member) block_field{offsetof(quant::F::block, member), sizeof(quant::F::block::member)}
constexpr block_field q6_k_fields[] = {STRATA_BLOCK_FIELD(q6_k, ql), STRATA_BLOCK_FIELD(q6_k, qh),
                                       STRATA_BLOCK_FIELD(q6_k, scales), STRATA_BLOCK_FIELD(q6_k, d)};
constexpr block_field q8_0_fields[] = {STRATA_BLOCK_FIELD(q8_0, d), STRATA_BLOCK_FIELD(q8_0, qs)};
#undef STRATA_BLOCK_FIELD
template <std::size_t N>
constexpr bool tiles(const block_field (&f)[N], std::size_t block) {
  std::size_t at = 0;
  for (const auto& x : f) {
    if (x.offset != at) return false;
    at += x.size;
  }
  return at == block;
}
static_assert(tiles(q6_k_fields, sizeof(quant::q6_k::block)) && tiles(q8_0_fields, sizeof(quant::q8_0::block)));

std::span<const block_field> group_fields(gguf::type_id t) noexcept {
  switch (t) {
    case gguf::type_id::q6_k: return q6_k_fields;
    case gguf::type_id::q8_0: return q8_0_fields;
    default: return {};
  }
}

// A field's bytes with a constant-size copy for the sizes the grouped formats have: the generic
// call per field moved Q8_0 (a 2-byte and a 32-byte field a block) at 3.6 GB/s, 2.2 s of an
// 8 GB model's load.
void copy_field(std::byte* dst, const std::byte* src, std::size_t size) {
  switch (size) {
    case 2: std::memcpy(dst, src, 2); break;
    case 16: std::memcpy(dst, src, 16); break;
    case 32: std::memcpy(dst, src, 32); break;
    case 64: std::memcpy(dst, src, 64); break;
    case 128: std::memcpy(dst, src, 128); break;
    default: std::memcpy(dst, src, size);
  }
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(c >= 'A' && c <= 'Z' ? c + 32 : c);
  return r;
}

}  // namespace

// A layout without its shaders/quant/<fmt>.glsl would only fail later, at pipeline build.
bool gpu_supports(gguf::type_id t) noexcept {
  if (layout_of(t).empty()) return false;
  const std::string src = glsl_dequant_source(t);
  for (const auto& e : embedded_shaders())
    if (e.name == src) return true;
  return false;
}

std::string glsl_layout(gguf::type_id t) {
  std::string s = layout_of(t);
  if (s.empty()) throw error("the Vulkan backend has no kernels for tensor type " + std::string(gguf::name_of(t)));
  return s;
}

std::string glsl_dequant_source(gguf::type_id t) { return "quant/" + lower(gguf::name_of(t)); }

bool has_row_groups(gguf::type_id t) noexcept { return !group_fields(t).empty(); }

bool grouped_rows(gguf::type_id t, std::uint64_t ne0) noexcept {
  if (!has_row_groups(t)) return false;
  const std::uint64_t qk = gguf::block_elems(t);
  return ne0 % qk == 0 && (ne0 / qk) % row_group_blocks == 0;
}

void copy_gpu_rows(gguf::type_id t, std::uint64_t ne0, std::span<const std::byte> src, std::byte* dst) {
  if (!grouped_rows(t, ne0)) {
    std::memcpy(dst, src.data(), src.size());
    return;
  }
  const std::size_t block = gguf::block_bytes(t), group = row_group_blocks * block;
  if (src.size() % group != 0)
    throw error("GPU row layout: " + std::to_string(src.size()) + " bytes of " + std::string(gguf::name_of(t)) +
                " are not whole rows of " + std::to_string(ne0) + " elements");
  const auto fields = group_fields(t);
  for (std::size_t g = 0; g < src.size(); g += group)
    for (const block_field& f : fields)
      for (std::size_t i = 0; i < row_group_blocks; ++i)
        copy_field(dst + g + row_group_blocks * f.offset + i * f.size, src.data() + g + i * block + f.offset, f.size);
}

}  // namespace strata::gpu
