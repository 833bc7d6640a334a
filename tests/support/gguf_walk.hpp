// Test support: reads every byte a parsed GGUF exposes (each metadata value, nested arrays,
// the first and last byte of every tensor view) so that ASan sees any view that points outside
// the input. Used by the mutation test and the libFuzzer target.
#pragma once
#include <cstdint>

#include "strata/gguf/reader.hpp"

namespace strata::test {

inline std::uint64_t walk_value(const gguf::value& v) {
  using gguf::value_type;
  std::uint64_t h = std::uint64_t(v.type());
  switch (v.type()) {
    case value_type::string:
      for (const char c : v.as_string()) h = h * 31 + std::uint8_t(c);
      return h;
    case value_type::array:
      h += v.size();
      if (v.elem_type() == value_type::string) {
        for (const auto s : v.strings()) h = h * 31 + s.size() + (s.empty() ? 0 : std::uint8_t(s.back()));
      } else if (v.elem_type() == value_type::array) {
        for (const auto& e : v.arrays()) h = h * 31 + walk_value(e);
      } else {
        for (const auto b : v.raw_array_bytes()) h = h * 31 + std::to_integer<unsigned>(b);
      }
      return h;
    case value_type::f32: return h + std::uint64_t(v.as_number() != 0);
    case value_type::f64: return h + std::uint64_t(v.as_number() != 0);
    case value_type::boolean: return h + v.as<bool>();
    case value_type::u64: return h + v.as<std::uint64_t>();
    default: return h + std::uint64_t(v.as_int());
  }
}

// Returns a hash of everything visited (so the compiler cannot drop the reads).
inline std::uint64_t walk_all(const gguf::reader& r) {
  std::uint64_t h = r.version() + r.alignment() + r.data_offset();
  for (const auto& [k, v] : r.metadata()) {
    h = h * 31 + k.size() + walk_value(v);
  }
  for (const auto& t : r.tensors()) {
    h = h * 31 + t.n_elements() + t.nbytes + t.name.size();
    if (!t.data.empty()) h += std::to_integer<unsigned>(t.data.front()) + std::to_integer<unsigned>(t.data.back());
    h += r.find_tensor(t.name) == &t;
  }
  return h;
}

}  // namespace strata::test
