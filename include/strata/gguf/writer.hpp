// GGUF v3 writer: metadata (every value type, nested arrays) and tensors whose bytes are
// produced on demand in chunks, so multi-GB files stream to disk without being held in memory.
// The output is written to "<path>.tmp" and renamed, so a failed write never leaves a
// half-written file under the final name.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "strata/core/checked_math.hpp"
#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/gguf/type_id.hpp"
#include "strata/gguf/value.hpp"

namespace strata::gguf {

// An owned metadata value for writing (the reader's `value` only views file bytes).
struct owned_value {
  struct scalar_t { value_type type; std::uint64_t raw; };           // little-endian payload
  struct scalar_array_t { value_type elem; std::size_t n; std::vector<std::byte> bytes; };
  using storage = std::variant<scalar_t, std::string, scalar_array_t, std::vector<std::string>,
                               std::vector<owned_value>>;
  storage v;

  template <class T>
    requires is_gguf_scalar<T>
  static owned_value scalar(T x) {
    std::uint64_t raw = 0;
    std::memcpy(&raw, &x, sizeof(T));
    return {scalar_t{gguf_type_of<T>, raw}};
  }
  static owned_value string(std::string s) { return {std::move(s)}; }
  template <class T>
    requires is_gguf_scalar<T>
  static owned_value array(std::span<const T> xs) {
    scalar_array_t a{gguf_type_of<T>, xs.size(), std::vector<std::byte>(xs.size() * sizeof(T))};
    if (!xs.empty()) std::memcpy(a.bytes.data(), xs.data(), a.bytes.size());
    return {std::move(a)};
  }
  static owned_value strings(std::vector<std::string> s) { return {std::move(s)}; }
  // Nested arrays: every element must itself be an array (GGUF has no heterogeneous arrays).
  static owned_value arrays(std::vector<owned_value> a) {
    for (const auto& e : a)
      if (e.type() != value_type::array) throw error("gguf writer: nested array element is not an array");
    return {std::move(a)};
  }

  // Deep copy of a value read from a file.
  static owned_value from(const value& in) {
    if (in.type() == value_type::string) return string(std::string(in.as_string()));
    if (in.type() != value_type::array) {
      owned_value o{scalar_t{in.type(), 0}};
      std::visit([&](auto& s) {
        if constexpr (std::is_same_v<std::decay_t<decltype(s)>, scalar_t>) s.raw = raw_of(in);
      }, o.v);
      return o;
    }
    if (in.elem_type() == value_type::string) {
      std::vector<std::string> s;
      s.reserve(in.size());
      for (auto sv : in.strings()) s.emplace_back(sv);
      return strings(std::move(s));
    }
    if (in.elem_type() == value_type::array) {
      std::vector<owned_value> a;
      for (const auto& e : in.arrays()) a.push_back(from(e));
      return {std::move(a)};
    }
    const auto b = in.raw_array_bytes();
    return {scalar_array_t{in.elem_type(), in.size(), std::vector<std::byte>(b.begin(), b.end())}};
  }

  value_type type() const noexcept {
    switch (v.index()) {
      case 0: return std::get<0>(v).type;
      case 1: return value_type::string;
      default: return value_type::array;
    }
  }

 private:
  static std::uint64_t raw_of(const value& in) {
    switch (in.type()) {
      case value_type::u8: return in.as<std::uint8_t>();
      case value_type::i8: return std::uint8_t(in.as<std::int8_t>());
      case value_type::u16: return in.as<std::uint16_t>();
      case value_type::i16: return std::uint16_t(in.as<std::int16_t>());
      case value_type::u32: return in.as<std::uint32_t>();
      case value_type::i32: return std::uint32_t(in.as<std::int32_t>());
      case value_type::boolean: return in.as<bool>() ? 1 : 0;
      case value_type::u64: return in.as<std::uint64_t>();
      case value_type::i64: return std::uint64_t(in.as<std::int64_t>());
      case value_type::f32: { const float f = in.as<float>(); std::uint32_t u; std::memcpy(&u, &f, 4); return u; }
      case value_type::f64: { const double f = in.as<double>(); std::uint64_t u; std::memcpy(&u, &f, 8); return u; }
      default: return 0;
    }
  }
};

// Produces a tensor's bytes: called with consecutive chunks (offset within the tensor, buffer
// to fill completely).
using tensor_fill = std::function<void(std::uint64_t offset, std::span<std::byte> chunk)>;

class writer {
 public:
  explicit writer(std::uint32_t alignment = default_alignment) {
    if (alignment != default_alignment) set(std::string(alignment_key), owned_value::scalar(alignment));
  }

  // Sets (or replaces, keeping its position) a metadata key. Setting general.alignment also
  // sets the alignment the data section is written with, so the file always says what it does.
  void set(std::string key, owned_value v) {
    if (key.empty()) throw error("gguf writer: empty metadata key");
    if (key == alignment_key) alignment_ = checked_alignment(v);
    for (auto& kv : kv_)
      if (kv.first == key) {
        kv.second = std::move(v);
        return;
      }
    kv_.emplace_back(std::move(key), std::move(v));
  }
  template <class T>
    requires is_gguf_scalar<T>
  void set(std::string key, T x) { set(std::move(key), owned_value::scalar(x)); }
  void set(std::string key, std::string_view s) { set(std::move(key), owned_value::string(std::string(s))); }
  void set(std::string key, const char* s) { set(std::move(key), owned_value::string(s)); }
  template <class T>
    requires is_gguf_scalar<T>
  void set_array(std::string key, std::span<const T> xs) { set(std::move(key), owned_value::array(xs)); }
  template <class T>
    requires is_gguf_scalar<T>
  void set_array(std::string key, const std::vector<T>& xs) { set_array(std::move(key), std::span<const T>(xs)); }
  void set_strings(std::string key, std::vector<std::string> s) { set(std::move(key), owned_value::strings(std::move(s))); }
  void remove(std::string_view key) {
    if (key == alignment_key) alignment_ = default_alignment;
    std::erase_if(kv_, [&](const auto& kv) { return kv.first == key; });
  }
  std::uint32_t alignment() const noexcept { return alignment_; }

  // Adds a tensor; ne is in ggml order (ne[0] contiguous). Validates like the reader does.
  void add_tensor(std::string name, type_id type, std::vector<std::uint64_t> ne, tensor_fill fill) {
    const std::uint64_t nbytes = checked_nbytes(name, type, ne);
    for (const auto& t : tensors_)
      if (t.name == name) throw error("gguf writer: duplicate tensor '" + name + "'");
    tensors_.push_back({std::move(name), type, std::move(ne), nbytes, std::move(fill)});
  }
  // Convenience: tensor bytes given in full; the span must stay valid until write().
  void add_tensor(std::string name, type_id type, std::vector<std::uint64_t> ne, std::span<const std::byte> bytes) {
    // Checked before adding: a tensor whose fill reads past `bytes` must never be queued.
    if (const auto nbytes = checked_nbytes(name, type, ne); nbytes != bytes.size())
      throw error("gguf writer: tensor '" + name + "' (" + std::string(name_of(type)) + ") expects " +
                  std::to_string(nbytes) + " bytes, got " + std::to_string(bytes.size()));
    add_tensor(std::move(name), type, std::move(ne), [bytes](std::uint64_t off, std::span<std::byte> chunk) {
      std::memcpy(chunk.data(), bytes.data() + off, chunk.size());
    });
  }

  std::size_t tensor_count() const noexcept { return tensors_.size(); }

  // Total file size this writer will produce.
  std::uint64_t file_size() const {
    std::uint64_t n = header_size();
    n = align(n);
    for (const auto& t : tensors_) n = align(n + t.nbytes);
    return tensors_.empty() ? header_size() : n;
  }

  // Streams the file to `out` (header, infos, padded tensor data).
  void write(std::ostream& out) const {
    std::vector<std::byte> head;
    put<std::uint32_t>(head, magic);
    put<std::uint32_t>(head, 3);
    put<std::uint64_t>(head, tensors_.size());
    put<std::uint64_t>(head, kv_.size());
    for (const auto& [k, v] : kv_) {
      put_string(head, k);
      put<std::uint32_t>(head, std::uint32_t(v.type()));
      put_value(head, v, false);
    }
    std::uint64_t off = 0;
    for (const auto& t : tensors_) {
      put_string(head, t.name);
      put<std::uint32_t>(head, std::uint32_t(t.ne.size()));
      for (auto d : t.ne) put<std::uint64_t>(head, d);
      put<std::uint32_t>(head, std::uint32_t(t.type));
      put<std::uint64_t>(head, off);
      off = align(off + t.nbytes);
    }
    if (!tensors_.empty()) head.resize(std::size_t(align(head.size())));
    write_bytes(out, head);

    constexpr std::uint64_t chunk_size = 16u << 20;
    std::vector<std::byte> buf;
    for (const auto& t : tensors_) {
      for (std::uint64_t pos = 0; pos < t.nbytes; pos += chunk_size) {
        const auto n = std::size_t(std::min(chunk_size, t.nbytes - pos));
        buf.assign(n, std::byte{0});
        t.fill(pos, std::span<std::byte>(buf.data(), n));
        write_bytes(out, buf);
      }
      const std::uint64_t pad = align(t.nbytes) - t.nbytes;
      if (pad) write_bytes(out, std::vector<std::byte>(std::size_t(pad)));
    }
  }

  void write(const std::filesystem::path& path) const {
    const auto tmp = std::filesystem::path(path.string() + ".tmp");
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) throw error(tmp.string() + ": cannot open for writing");
      try {
        write(f);
        f.flush();
        if (!f) throw error(tmp.string() + ": write failed (disk full?)");
      } catch (...) {
        f.close();
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);
        throw;
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw error(path.string() + ": cannot rename from " + tmp.string() + ": " + ec.message());
  }

  std::vector<std::byte> to_bytes() const {
    std::ostringstream s(std::ios::binary);
    write(s);
    const std::string str = std::move(s).str();
    std::vector<std::byte> out(str.size());
    std::memcpy(out.data(), str.data(), str.size());
    return out;
  }

 private:
  struct pending_tensor {
    std::string name;
    type_id type;
    std::vector<std::uint64_t> ne;
    std::uint64_t nbytes;
    tensor_fill fill;
  };

  // The reader's rules: n_dims <= 4, element count < 2^63, rows whole blocks.
  static std::uint64_t checked_nbytes(const std::string& name, type_id type, const std::vector<std::uint64_t>& ne) {
    if (name.empty() || name.size() > max_tensor_name)
      throw error("gguf writer: tensor name '" + name + "' must be 1.." + std::to_string(max_tensor_name) + " bytes");
    if (ne.size() > max_dims) throw error("gguf writer: tensor '" + name + "' has more than 4 dimensions");
    std::uint64_t n = 1;
    for (auto d : ne)
      if (!checked_mul(n, d, n) || n > std::uint64_t(INT64_MAX))
        throw error("gguf writer: tensor '" + name + "' element count overflows");
    const auto known = traits_of(std::uint32_t(type));
    if (!known)
      throw error("gguf writer: tensor '" + name + "' has invalid ggml type id " + std::to_string(std::uint32_t(type)));
    const type_traits tr = *known;
    if (ne.empty() ? tr.block_elems != 1 : ne[0] % tr.block_elems != 0)
      throw error("gguf writer: tensor '" + name + "' row length is not a multiple of the " +
                  std::string(tr.name) + " block size " + std::to_string(tr.block_elems));
    std::uint64_t nbytes = 0;
    if (!checked_mul(n / tr.block_elems, tr.block_bytes, nbytes))
      throw error("gguf writer: tensor '" + name + "' byte size overflows");
    return nbytes;
  }
  static std::uint32_t checked_alignment(const owned_value& v) {
    const auto* s = std::get_if<owned_value::scalar_t>(&v.v);
    if (!s || s->type != value_type::u32)
      throw error("gguf writer: " + std::string(alignment_key) + " must be a u32, got " + std::string(name_of(v.type())));
    const auto a = std::uint32_t(s->raw);
    if (a == 0 || (a & (a - 1)) != 0)
      throw error("gguf writer: " + std::string(alignment_key) + " = " + std::to_string(a) + " is not a power of two");
    return a;
  }

  std::uint64_t align(std::uint64_t x) const noexcept { return (x + alignment_ - 1) / alignment_ * alignment_; }

  std::uint64_t header_size() const {
    std::vector<std::byte> probe;  // sizes only; metadata is small next to tensor data
    std::uint64_t n = 24;
    for (const auto& [k, v] : kv_) {
      probe.clear();
      put_value(probe, v, false);
      n += 8 + k.size() + 4 + probe.size();
    }
    for (const auto& t : tensors_) n += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
    return n;
  }

  template <class T>
  static void put(std::vector<std::byte>& b, T x) {
    const auto at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &x, sizeof(T));
  }
  static void put_string(std::vector<std::byte>& b, std::string_view s) {
    put<std::uint64_t>(b, s.size());
    const auto at = b.size();
    b.resize(at + s.size());
    if (!s.empty()) std::memcpy(b.data() + at, s.data(), s.size());
  }
  // `nested`: an array inside an array omits nothing extra; GGUF encodes it as (elem type, n, data).
  static void put_value(std::vector<std::byte>& b, const owned_value& v, bool /*nested*/) {
    switch (v.v.index()) {
      case 0: {
        const auto& s = std::get<0>(v.v);
        const auto at = b.size();
        b.resize(at + scalar_size(s.type));
        std::memcpy(b.data() + at, &s.raw, scalar_size(s.type));
        break;
      }
      case 1: put_string(b, std::get<1>(v.v)); break;
      case 2: {
        const auto& a = std::get<2>(v.v);
        put<std::uint32_t>(b, std::uint32_t(a.elem));
        put<std::uint64_t>(b, a.n);
        b.insert(b.end(), a.bytes.begin(), a.bytes.end());
        break;
      }
      case 3: {
        const auto& a = std::get<3>(v.v);
        put<std::uint32_t>(b, std::uint32_t(value_type::string));
        put<std::uint64_t>(b, a.size());
        for (const auto& s : a) put_string(b, s);
        break;
      }
      default: {
        const auto& a = std::get<4>(v.v);
        put<std::uint32_t>(b, std::uint32_t(value_type::array));
        put<std::uint64_t>(b, a.size());
        for (const auto& e : a) put_value(b, e, true);
        break;
      }
    }
  }
  static void write_bytes(std::ostream& out, std::span<const std::byte> b) {
    out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    if (!out) throw error("gguf writer: write failed");
  }

  std::uint32_t alignment_ = default_alignment;
  std::vector<std::pair<std::string, owned_value>> kv_;
  std::vector<pending_tensor> tensors_;
};

}  // namespace strata::gguf
