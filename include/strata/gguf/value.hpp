// A GGUF metadata value: scalar, string or (nested) array, as defined by the GGUF spec's
// gguf_metadata_value_type. Strings and arrays of numbers are views into the file bytes
// (zero copy); arrays of strings and of arrays hold small vectors of views built at parse time.
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::gguf {

enum class value_type : std::uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};

constexpr std::string_view name_of(value_type t) noexcept {
  constexpr std::string_view names[] = {"u8",  "i8",   "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
  return std::uint32_t(t) < 13 ? names[std::uint32_t(t)] : std::string_view("invalid");
}

// Size in bytes of one scalar of type t; 0 for string and array (variable size).
constexpr std::size_t scalar_size(value_type t) noexcept {
  switch (t) {
    case value_type::u8: case value_type::i8: case value_type::boolean: return 1;
    case value_type::u16: case value_type::i16: return 2;
    case value_type::u32: case value_type::i32: case value_type::f32: return 4;
    case value_type::u64: case value_type::i64: case value_type::f64: return 8;
    default: return 0;
  }
}

// C++ type <-> GGUF scalar type.
template <class T> inline constexpr bool is_gguf_scalar = false;
template <class T> inline constexpr value_type gguf_type_of = value_type::u8;
#define STRATA_GGUF_SCALAR(T, V) \
  template <> inline constexpr bool is_gguf_scalar<T> = true; \
  template <> inline constexpr value_type gguf_type_of<T> = value_type::V;
STRATA_GGUF_SCALAR(std::uint8_t, u8)
STRATA_GGUF_SCALAR(std::int8_t, i8)
STRATA_GGUF_SCALAR(std::uint16_t, u16)
STRATA_GGUF_SCALAR(std::int16_t, i16)
STRATA_GGUF_SCALAR(std::uint32_t, u32)
STRATA_GGUF_SCALAR(std::int32_t, i32)
STRATA_GGUF_SCALAR(float, f32)
STRATA_GGUF_SCALAR(bool, boolean)
STRATA_GGUF_SCALAR(std::uint64_t, u64)
STRATA_GGUF_SCALAR(std::int64_t, i64)
STRATA_GGUF_SCALAR(double, f64)
#undef STRATA_GGUF_SCALAR

class value {
 public:
  value() = default;

  value_type type() const noexcept { return type_; }
  // Element type of an array (meaningless for non-arrays).
  value_type elem_type() const noexcept { return elem_type_; }
  bool is_array() const noexcept { return type_ == value_type::array; }
  bool is_string() const noexcept { return type_ == value_type::string; }
  bool is_integer() const noexcept {
    switch (type_) {
      case value_type::u8: case value_type::i8: case value_type::u16: case value_type::i16:
      case value_type::u32: case value_type::i32: case value_type::u64: case value_type::i64: return true;
      default: return false;
    }
  }

  // Scalars: exact type only (T must be the stored GGUF type).
  template <class T>
  T as() const {
    static_assert(is_gguf_scalar<T>);
    if (type_ != gguf_type_of<T>)
      throw error("expected " + std::string(name_of(gguf_type_of<T>)) + ", found " + describe_type());
    T out{};
    std::memcpy(&out, raw_, sizeof(T));
    return out;
  }
  std::string_view as_string() const {
    if (type_ != value_type::string) throw error("expected string, found " + describe_type());
    return str_;
  }

  // Any integer type as int64 / uint64 with range checks (files differ in widths they use).
  std::int64_t as_int() const {
    check_integer();
    if (type_ == value_type::u64) {
      const auto u = as<std::uint64_t>();
      if (u > std::uint64_t(INT64_MAX)) throw error("value " + std::to_string(u) + " does not fit in int64");
      return std::int64_t(u);
    }
    return signed_raw();
  }
  std::uint64_t as_uint() const {
    check_integer();
    if (type_ == value_type::u64) return as<std::uint64_t>();
    const std::int64_t s = signed_raw();
    if (s < 0) throw error("value " + std::to_string(s) + " is negative, expected unsigned");
    return std::uint64_t(s);
  }
  // Any integer or float type as double.
  double as_number() const {
    if (type_ == value_type::f32) return as<float>();
    if (type_ == value_type::f64) return as<double>();
    if (type_ == value_type::u64) return double(as<std::uint64_t>());
    if (is_integer()) return double(signed_raw());
    throw error("expected a number, found " + describe_type());
  }

  // Arrays.
  std::size_t size() const noexcept { return count_; }
  // Zero-copy view of an array of scalars of exactly type T. Data in GGUF is not aligned to
  // sizeof(T), so elements are read with at<T>() or copied with to_vector<T>().
  template <class T>
  T at(std::size_t i) const {
    static_assert(is_gguf_scalar<T>);
    check_array_of(gguf_type_of<T>);
    if (i >= count_) throw error("array index " + std::to_string(i) + " out of range " + std::to_string(count_));
    T out{};
    std::memcpy(&out, raw_array_.data() + i * sizeof(T), sizeof(T));
    return out;
  }
  template <class T>
  std::vector<T> to_vector() const {
    static_assert(is_gguf_scalar<T>);
    check_array_of(gguf_type_of<T>);
    std::vector<T> out(count_);
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is packed: no data()
      for (std::size_t i = 0; i < count_; ++i) out[i] = raw_array_[i] != std::byte{0};
    } else if (count_) {
      std::memcpy(out.data(), raw_array_.data(), count_ * sizeof(T));
    }
    return out;
  }
  std::span<const std::byte> raw_array_bytes() const noexcept { return raw_array_; }
  const std::vector<std::string_view>& strings() const {
    check_array_of(value_type::string);
    return strings_;
  }
  const std::vector<value>& arrays() const {
    check_array_of(value_type::array);
    return arrays_;
  }

  std::string describe_type() const {
    if (type_ != value_type::array) return std::string(name_of(type_));
    return "array of " + std::string(name_of(elem_type_));
  }

  // Builders used by the reader (views into the file) and by the writer (views into owned storage).
  static value scalar(value_type t, const std::byte* p) {
    value v;
    v.type_ = t;
    std::memcpy(v.raw_, p, scalar_size(t));
    return v;
  }
  static value string(std::string_view s) {
    value v;
    v.type_ = value_type::string;
    v.str_ = s;
    return v;
  }
  static value array_of_scalars(value_type elem, std::size_t n, std::span<const std::byte> bytes) {
    value v;
    v.type_ = value_type::array;
    v.elem_type_ = elem;
    v.count_ = n;
    v.raw_array_ = bytes;
    return v;
  }
  static value array_of_strings(std::vector<std::string_view> s) {
    value v;
    v.type_ = value_type::array;
    v.elem_type_ = value_type::string;
    v.count_ = s.size();
    v.strings_ = std::move(s);
    return v;
  }
  static value array_of_arrays(std::vector<value> a) {
    value v;
    v.type_ = value_type::array;
    v.elem_type_ = value_type::array;
    v.count_ = a.size();
    v.arrays_ = std::move(a);
    return v;
  }

 private:
  void check_integer() const {
    if (!is_integer()) throw error("expected an integer, found " + describe_type());
  }
  void check_array_of(value_type t) const {
    if (type_ != value_type::array || elem_type_ != t)
      throw error("expected array of " + std::string(name_of(t)) + ", found " + describe_type());
  }
  std::int64_t signed_raw() const {
    switch (type_) {
      case value_type::u8: return as<std::uint8_t>();
      case value_type::i8: return as<std::int8_t>();
      case value_type::u16: return as<std::uint16_t>();
      case value_type::i16: return as<std::int16_t>();
      case value_type::u32: return as<std::uint32_t>();
      case value_type::i32: return as<std::int32_t>();
      case value_type::i64: return as<std::int64_t>();
      default: return 0;
    }
  }

  value_type type_ = value_type::u8;
  value_type elem_type_ = value_type::u8;
  alignas(8) std::byte raw_[8]{};      // scalar payload, little-endian as in the file
  std::string_view str_;               // string payload
  std::size_t count_ = 0;              // array length
  std::span<const std::byte> raw_array_;  // array of scalars: count_ * scalar_size bytes
  std::vector<std::string_view> strings_; // array of strings
  std::vector<value> arrays_;             // array of arrays
};

}  // namespace strata::gguf
