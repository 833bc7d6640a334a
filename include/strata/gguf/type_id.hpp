// ggml tensor type ids as stored in GGUF tensor infos, with block size and bytes per block
// for every id ggml has assigned (ggml.h enum ggml_type, ggml.c type_traits). Ids that ggml
// removed (4, 5, 31-33, 36-38) are not valid in a file.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata::gguf {

enum class type_id : std::uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
  iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22,
  iq4_xs = 23, i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
  tq1_0 = 34, tq2_0 = 35, mxfp4 = 39,
};

struct type_traits {
  std::string_view name;    // ggml's name, upper case as llama.cpp prints it
  std::uint32_t block_elems; // elements per block (1 for plain scalar types)
  std::uint32_t block_bytes; // bytes per block
};

namespace detail {
inline constexpr std::uint32_t type_id_count = 40;
inline constexpr std::array<type_traits, type_id_count> type_table = [] {
  std::array<type_traits, type_id_count> t{};
  t[0] = {"F32", 1, 4};       t[1] = {"F16", 1, 2};        t[2] = {"Q4_0", 32, 18};
  t[3] = {"Q4_1", 32, 20};    t[6] = {"Q5_0", 32, 22};     t[7] = {"Q5_1", 32, 24};
  t[8] = {"Q8_0", 32, 34};    t[9] = {"Q8_1", 32, 36};     t[10] = {"Q2_K", 256, 84};
  t[11] = {"Q3_K", 256, 110}; t[12] = {"Q4_K", 256, 144};  t[13] = {"Q5_K", 256, 176};
  t[14] = {"Q6_K", 256, 210}; t[15] = {"Q8_K", 256, 292};  t[16] = {"IQ2_XXS", 256, 66};
  t[17] = {"IQ2_XS", 256, 74}; t[18] = {"IQ3_XXS", 256, 98}; t[19] = {"IQ1_S", 256, 50};
  t[20] = {"IQ4_NL", 32, 18}; t[21] = {"IQ3_S", 256, 110}; t[22] = {"IQ2_S", 256, 82};
  t[23] = {"IQ4_XS", 256, 136}; t[24] = {"I8", 1, 1};      t[25] = {"I16", 1, 2};
  t[26] = {"I32", 1, 4};      t[27] = {"I64", 1, 8};       t[28] = {"F64", 1, 8};
  t[29] = {"IQ1_M", 256, 56}; t[30] = {"BF16", 1, 2};      t[34] = {"TQ1_0", 256, 54};
  t[35] = {"TQ2_0", 256, 66}; t[39] = {"MXFP4", 32, 17};
  return t;
}();
}  // namespace detail

// Traits of a raw id read from a file; nullopt for ids ggml never had or removed.
constexpr std::optional<type_traits> traits_of(std::uint32_t raw) noexcept {
  if (raw >= detail::type_id_count || detail::type_table[raw].block_elems == 0) return std::nullopt;
  return detail::type_table[raw];
}

// ggml's name for an id it once had and removed (ggml.h keeps them as comments); empty otherwise.
constexpr std::string_view removed_type_name(std::uint32_t raw) noexcept {
  switch (raw) {
    case 4: return "Q4_2";         case 5: return "Q4_3";
    case 31: return "Q4_0_4_4";    case 32: return "Q4_0_4_8";    case 33: return "Q4_0_8_8";
    case 36: return "IQ4_NL_4_4";  case 37: return "IQ4_NL_4_8";  case 38: return "IQ4_NL_8_8";
    default: return {};
  }
}

constexpr type_traits traits_of(type_id t) noexcept { return detail::type_table[std::uint32_t(t)]; }
constexpr std::string_view name_of(type_id t) noexcept { return traits_of(t).name; }
constexpr std::uint32_t block_elems(type_id t) noexcept { return traits_of(t).block_elems; }
constexpr std::uint32_t block_bytes(type_id t) noexcept { return traits_of(t).block_bytes; }

// Case-insensitive lookup by ggml name ("q4_k", "Q4_K"); nullopt if unknown.
constexpr std::optional<type_id> type_from_name(std::string_view s) noexcept {
  const auto up = [](char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; };
  for (std::uint32_t i = 0; i < detail::type_id_count; ++i) {
    const auto& t = detail::type_table[i];
    if (t.block_elems == 0 || t.name.size() != s.size()) continue;
    bool eq = true;
    for (std::size_t k = 0; k < s.size() && eq; ++k) eq = up(s[k]) == t.name[k];
    if (eq) return type_id(i);
  }
  return std::nullopt;
}

}  // namespace strata::gguf
