// GGUF v2/v3 reader over a byte span (typically a memory-mapped file): parses and validates
// the header, every metadata key/value (nested arrays included) and every tensor-info record
// against the span's size before anything is used. Malformed input throws format_error with
// the source name, what was wrong, and where (byte offset, key or tensor name).
// Spec: ggml/docs/gguf.md (little-endian files only).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "strata/core/checked_math.hpp"
#include "strata/core/error.hpp"
#include "strata/core/mapped_file.hpp"
#include "strata/gguf/tensor_info.hpp"
#include "strata/gguf/type_id.hpp"
#include "strata/gguf/value.hpp"

namespace strata::gguf {

inline constexpr std::uint32_t magic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr std::uint32_t default_alignment = 32;
inline constexpr std::string_view alignment_key = "general.alignment";
inline constexpr int max_array_nesting = 8;  // GGUF writers nest at most 2 deep; bounds recursion

namespace detail {

// What a read is for, in an error message: a string, or a callable that builds one only when
// the message is needed (per-element descriptions would otherwise cost more than the parse).
inline const std::string& describe(const std::string& what) { return what; }
template <class F>
  requires std::is_invocable_r_v<std::string, const F&>
std::string describe(const F& what) {
  return what();
}

// Bounds-checked little-endian cursor; every read names what it reads for the error message.
class cursor {
 public:
  cursor(std::span<const std::byte> b, const std::string& source) : b_(b), source_(source) {}

  std::uint64_t pos() const noexcept { return pos_; }
  std::uint64_t remaining() const noexcept { return b_.size() - pos_; }

  [[noreturn]] void fail(const std::string& what, std::uint64_t at) const {
    throw format_error(source_ + ": " + what + " (at byte offset " + std::to_string(at) + ")");
  }
  [[noreturn]] void fail(const std::string& what) const { fail(what, pos_); }

  template <class What>
  const std::byte* take(std::uint64_t n, const What& what) {
    if (n > remaining())
      fail("truncated: " + describe(what) + " needs " + std::to_string(n) + " bytes but only " +
           std::to_string(remaining()) + " remain in the " + std::to_string(b_.size()) + "-byte file");
    const std::byte* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <class T, class What>
  T read(const What& what) {
    T v{};
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  template <class What>
  std::string_view read_string(const What& what) {
    const std::uint64_t at = pos_;
    const auto len = read<std::uint64_t>([&] { return describe(what) + " length"; });
    if (len > remaining())
      fail(describe(what) + " length " + std::to_string(len) + " exceeds the " + std::to_string(remaining()) +
               " bytes left in the file",
           at);
    const auto* p = take(len, what);
    return {reinterpret_cast<const char*>(p), std::size_t(len)};
  }

 private:
  std::span<const std::byte> b_;
  const std::string& source_;
  std::uint64_t pos_ = 0;
};

}  // namespace detail

class reader {
 public:
  // `source` names the input in error messages (the file path).
  explicit reader(std::span<const std::byte> bytes, std::string source = "<memory>")
      : bytes_(bytes), source_(std::move(source)) {
    parse();
  }
  reader(const reader&) = delete;  // views point into metadata_; keep it in place
  reader& operator=(const reader&) = delete;
  reader(reader&&) = default;

  const std::string& source() const noexcept { return source_; }
  std::uint32_t version() const noexcept { return version_; }
  std::uint64_t alignment() const noexcept { return alignment_; }
  std::uint64_t data_offset() const noexcept { return data_offset_; }
  std::uint64_t file_size() const noexcept { return bytes_.size(); }
  std::span<const std::byte> bytes() const noexcept { return bytes_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string_view, value>>& metadata() const noexcept { return metadata_; }
  const value* find(std::string_view key) const noexcept {
    const auto it = key_index_.find(key);
    return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
  }
  bool contains(std::string_view key) const noexcept { return find(key) != nullptr; }
  const value& at(std::string_view key) const {
    if (const value* v = find(key)) return *v;
    throw format_error(source_ + ": missing metadata key '" + std::string(key) + "'");
  }

  // Typed accessors: errors name the file, the key, the expected and the found type.
  template <class T>
  T get(std::string_view key) const {
    return with_key(key, [&] { return at(key).as<T>(); });
  }
  std::string_view get_string(std::string_view key) const {
    return with_key(key, [&] { return at(key).as_string(); });
  }
  std::uint64_t get_uint(std::string_view key) const {
    return with_key(key, [&] { return at(key).as_uint(); });
  }
  std::int64_t get_int(std::string_view key) const {
    return with_key(key, [&] { return at(key).as_int(); });
  }
  double get_number(std::string_view key) const {
    return with_key(key, [&] { return at(key).as_number(); });
  }
  bool get_bool(std::string_view key) const { return get<bool>(key); }
  // Optional forms: nullopt when absent, an error when present with the wrong type.
  std::optional<std::uint64_t> find_uint(std::string_view key) const {
    if (!contains(key)) return std::nullopt;
    return get_uint(key);
  }
  std::optional<double> find_number(std::string_view key) const {
    if (!contains(key)) return std::nullopt;
    return get_number(key);
  }
  std::optional<std::string_view> find_string(std::string_view key) const {
    if (!contains(key)) return std::nullopt;
    return get_string(key);
  }
  std::optional<bool> find_bool(std::string_view key) const {
    if (!contains(key)) return std::nullopt;
    return get_bool(key);
  }

  std::span<const tensor_info> tensors() const noexcept { return tensors_; }
  const tensor_info* find_tensor(std::string_view name) const noexcept {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
  }
  const tensor_info& tensor(std::string_view name) const {
    if (const tensor_info* t = find_tensor(name)) return *t;
    throw format_error(source_ + ": missing tensor '" + std::string(name) + "'");
  }

 private:
  template <class F>
  auto with_key(std::string_view key, F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (const format_error&) {
      throw;
    } catch (const error& e) {
      throw format_error(source_ + ": metadata key '" + std::string(key) + "': " + e.what());
    }
  }

  void parse() {
    detail::cursor c(bytes_, source_);
    if (bytes_.size() < 4) c.fail("file too small to be GGUF (" + std::to_string(bytes_.size()) + " bytes)", 0);
    const auto m = c.read<std::uint32_t>("magic");
    if (m != magic) {
      std::string shown;
      for (int i = 0; i < 4; ++i) {
        const char ch = char(std::to_integer<unsigned char>(bytes_[std::size_t(i)]));
        shown += (ch >= 32 && ch < 127) ? std::string(1, ch) : "\\x" + hex2(std::uint8_t(ch));
      }
      c.fail("not a GGUF file: magic is '" + shown + "', expected 'GGUF'", 0);
    }
    version_ = c.read<std::uint32_t>("version");
    if (version_ == 1) c.fail("GGUF version 1 is not supported (only 2 and 3)", 4);
    if (version_ != 2 && version_ != 3) {
      if ((version_ & 0xFFFF) == 0 && (version_ >> 16) != 0)
        c.fail("GGUF version " + std::to_string(version_) + " looks byte-swapped: big-endian GGUF is not supported", 4);
      c.fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)", 4);
    }
    const std::uint64_t count_at = c.pos();
    const auto n_tensors = c.read<std::uint64_t>("tensor count");
    const auto n_kv = c.read<std::uint64_t>("metadata key/value count");
    // Every tensor-info record needs >= 24 bytes and every key/value >= 13: reject counts the
    // file cannot possibly hold before reserving anything.
    if (n_tensors > c.remaining() / 24)
      c.fail("tensor count " + std::to_string(n_tensors) + " is impossible for a file of " +
                 std::to_string(bytes_.size()) + " bytes",
             count_at);
    if (n_kv > c.remaining() / 13)
      c.fail("metadata key/value count " + std::to_string(n_kv) + " is impossible for a file of " +
                 std::to_string(bytes_.size()) + " bytes",
             count_at + 8);

    metadata_.reserve(std::size_t(n_kv));
    for (std::uint64_t i = 0; i < n_kv; ++i) {
      const std::uint64_t at = c.pos();
      const auto key = c.read_string([&] { return "key of metadata entry " + std::to_string(i); });
      if (key.empty()) c.fail("metadata entry " + std::to_string(i) + " has an empty key", at);
      const std::string where = "metadata key '" + printable(key) + "'";
      const auto t = c.read<std::uint32_t>([&] { return where + " value type"; });
      value v = read_value(c, t, where, 0);
      if (!key_index_.emplace(key, metadata_.size()).second) c.fail("duplicate " + where, at);
      metadata_.emplace_back(key, std::move(v));
    }

    alignment_ = default_alignment;
    if (const value* a = find(alignment_key)) {
      if (a->type() != value_type::u32)
        throw format_error(source_ + ": metadata key 'general.alignment': expected u32, found " + a->describe_type());
      alignment_ = a->as<std::uint32_t>();
      if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
        throw format_error(source_ + ": metadata key 'general.alignment' = " + std::to_string(alignment_) +
                           " is not a power of two");
    }

    tensors_.reserve(std::size_t(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) tensors_.push_back(read_tensor_info(c, i));

    std::uint64_t data_start = 0;
    if (!checked_align_up(c.pos(), alignment_, data_start)) c.fail("data offset overflows");
    data_offset_ = data_start;
    if (n_tensors > 0 && data_offset_ > bytes_.size())
      c.fail("truncated: tensor data section starts at byte " + std::to_string(data_offset_) +
             " but the file has " + std::to_string(bytes_.size()) + " bytes");
    resolve_tensor_data();
  }

  value read_value(detail::cursor& c, std::uint32_t raw_type, const std::string& where, int depth) {
    const std::uint64_t at = c.pos() - 4;
    if (raw_type > 12) c.fail(where + " has invalid value type " + std::to_string(raw_type), at);
    const auto t = value_type(raw_type);
    if (t == value_type::string) return value::string(c.read_string(where));
    if (t != value_type::array) {
      const std::byte* p = c.take(scalar_size(t), [&] { return where + " (" + std::string(name_of(t)) + ")"; });
      value v = value::scalar(t, p);
      if (t == value_type::boolean && std::to_integer<unsigned>(*p) > 1)
        c.fail(where + " is a bool with byte value " + std::to_string(std::to_integer<unsigned>(*p)), c.pos() - 1);
      return v;
    }
    if (depth >= max_array_nesting)
      c.fail(where + " nests arrays deeper than " + std::to_string(max_array_nesting) + " levels", at);
    const auto raw_elem = c.read<std::uint32_t>([&] { return where + " array element type"; });
    if (raw_elem > 12) c.fail(where + " has invalid array element type " + std::to_string(raw_elem), c.pos() - 4);
    const auto elem = value_type(raw_elem);
    const std::uint64_t count_at = c.pos();
    const auto n = c.read<std::uint64_t>([&] { return where + " array length"; });
    // Minimum encoded size per element bounds the length by the bytes left.
    const std::uint64_t min_elem = elem == value_type::string ? 8 : elem == value_type::array ? 12 : scalar_size(elem);
    if (n > c.remaining() / min_elem)
      c.fail(where + " array length " + std::to_string(n) + " of " + std::string(name_of(elem)) +
                 " exceeds the " + std::to_string(c.remaining()) + " bytes left in the file",
             count_at);
    if (elem == value_type::string) {
      std::vector<std::string_view> s;
      s.reserve(std::size_t(n));
      for (std::uint64_t i = 0; i < n; ++i)
        s.push_back(c.read_string([&] { return where + " element " + std::to_string(i); }));
      return value::array_of_strings(std::move(s));
    }
    if (elem == value_type::array) {
      std::vector<value> a;
      a.reserve(std::size_t(n));
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::string sub = where + " element " + std::to_string(i);
        // Nested arrays are encoded like a top-level array value (element type, length, data).
        a.push_back(read_value(c, std::uint32_t(value_type::array), sub, depth + 1));
      }
      return value::array_of_arrays(std::move(a));
    }
    const std::uint64_t nbytes = n * scalar_size(elem);
    const std::byte* p = c.take(nbytes, [&] { return where + " array data"; });
    if (elem == value_type::boolean)
      for (std::uint64_t i = 0; i < n; ++i)
        if (std::to_integer<unsigned>(p[i]) > 1)
          c.fail(where + " element " + std::to_string(i) + " is a bool with byte value " +
                     std::to_string(std::to_integer<unsigned>(p[i])),
                 c.pos() - nbytes + i);
    return value::array_of_scalars(elem, std::size_t(n), {p, std::size_t(nbytes)});
  }

  tensor_info read_tensor_info(detail::cursor& c, std::uint64_t index) {
    tensor_info t;
    t.info_offset = c.pos();
    t.name = c.read_string([&] { return "name of tensor " + std::to_string(index); });
    const std::string where = "tensor '" + printable(t.name) + "'";
    if (t.name.empty()) c.fail("tensor " + std::to_string(index) + " has an empty name", t.info_offset);
    if (t.name.size() > max_tensor_name)
      c.fail(where + " name is " + std::to_string(t.name.size()) + " bytes, the limit is " +
                 std::to_string(max_tensor_name),
             t.info_offset);
    if (tensor_index_.count(t.name)) c.fail("duplicate " + where, t.info_offset);
    t.n_dims = c.read<std::uint32_t>([&] { return where + " dimension count"; });
    if (t.n_dims > max_dims)
      c.fail(where + " has " + std::to_string(t.n_dims) + " dimensions, at most " + std::to_string(max_dims) +
                 " are allowed",
             c.pos() - 4);
    for (std::uint32_t d = 0; d < t.n_dims; ++d) {
      t.ne[d] = c.read<std::uint64_t>([&] { return where + " dimension " + std::to_string(d); });
      if (t.ne[d] > std::uint64_t(INT64_MAX))
        c.fail(where + " dimension " + std::to_string(d) + " = " + std::to_string(t.ne[d]) + " is out of range",
               c.pos() - 8);
    }
    const std::uint64_t type_at = c.pos();
    const auto raw_type = c.read<std::uint32_t>([&] { return where + " type"; });
    const auto tr = traits_of(raw_type);
    if (!tr) {
      if (const auto old = removed_type_name(raw_type); !old.empty())
        c.fail(where + " has ggml type id " + std::to_string(raw_type) + " (" + std::string(old) +
                   "), which ggml removed",
               type_at);
      c.fail(where + " has unknown ggml type id " + std::to_string(raw_type), type_at);
    }
    t.type = type_id(raw_type);
    t.offset = c.read<std::uint64_t>([&] { return where + " data offset"; });

    std::uint64_t n = 1;
    for (std::uint32_t d = 0; d < max_dims; ++d)
      if (!checked_mul(n, t.ne[d], n) || n > std::uint64_t(INT64_MAX))
        c.fail(where + " element count " + t.shape_string() + " overflows", t.info_offset);
    if (t.ne[0] % tr->block_elems != 0)
      c.fail(where + " row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                 std::string(tr->name) + " block size " + std::to_string(tr->block_elems),
             t.info_offset);
    if (!checked_mul(n / tr->block_elems, tr->block_bytes, t.nbytes))
      c.fail(where + " byte size overflows", t.info_offset);
    if (t.offset % alignment_ != 0)
      c.fail(where + " data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                 std::to_string(alignment_),
             c.pos() - 8);
    tensor_index_.emplace(t.name, tensors_.size());
    return t;
  }

  void resolve_tensor_data() {
    const std::uint64_t data_size = bytes_.size() - std::min<std::uint64_t>(data_offset_, bytes_.size());
    for (auto& t : tensors_) {
      std::uint64_t end = 0;
      if (!checked_add(t.offset, t.nbytes, end) || end > data_size)
        throw format_error(source_ + ": truncated or corrupt: tensor '" + printable(t.name) + "' (" +
                           std::string(name_of(t.type)) + " " + t.shape_string() + ", " + std::to_string(t.nbytes) +
                           " bytes at data offset " + std::to_string(t.offset) + ") ends past the " +
                           std::to_string(data_size) + "-byte data section (tensor info at byte offset " +
                           std::to_string(t.info_offset) + ")");
      t.file_offset = data_offset_ + t.offset;
      t.data = bytes_.subspan(std::size_t(t.file_offset), std::size_t(t.nbytes));
    }
    // Tensors must not overlap: a corrupt offset would otherwise alias another tensor's bytes.
    // Empty tensors occupy no bytes and may sit anywhere, so they are left out; each tensor is
    // compared with the one reaching furthest so far, not merely its predecessor.
    std::vector<const tensor_info*> by_offset;
    by_offset.reserve(tensors_.size());
    for (const auto& t : tensors_)
      if (t.nbytes > 0) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const tensor_info* a, const tensor_info* b) { return a->offset < b->offset; });
    const tensor_info* furthest = nullptr;
    for (const auto* cur : by_offset) {
      if (furthest && cur->offset < furthest->offset + furthest->nbytes)
        throw format_error(source_ + ": tensor '" + printable(cur->name) + "' at data offset " +
                           std::to_string(cur->offset) + " overlaps tensor '" + printable(furthest->name) +
                           "' (data offsets " + std::to_string(furthest->offset) + ".." +
                           std::to_string(furthest->offset + furthest->nbytes) + ", tensor info at byte offset " +
                           std::to_string(cur->info_offset) + ")");
      if (!furthest || cur->offset + cur->nbytes > furthest->offset + furthest->nbytes) furthest = cur;
    }
  }

  static std::string hex2(std::uint8_t v) {
    const char* h = "0123456789abcdef";
    return {h[v >> 4], h[v & 15]};
  }
  // Names and keys come from the file: escape control bytes so messages stay readable.
  static std::string printable(std::string_view s) {
    std::string out;
    for (const char ch : s.substr(0, 200)) {
      const auto u = static_cast<unsigned char>(ch);
      if (u < 32 || u == 127) out += "\\x" + hex2(u);
      else out += ch;
    }
    if (s.size() > 200) out += "...";
    return out;
  }

  std::span<const std::byte> bytes_;
  std::string source_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = default_alignment;
  std::uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, value>> metadata_;
  std::unordered_map<std::string_view, std::size_t> key_index_;
  std::vector<tensor_info> tensors_;
  std::unordered_map<std::string_view, std::size_t> tensor_index_;
};

// A GGUF file on disk: the mapping and the reader over it, kept together (movable: the mapping's
// address, which every view points into, does not change when the object moves).
class file {
 public:
  explicit file(const std::filesystem::path& path)
      : map_(path), reader_(map_.bytes(), path.string()) {}
  const reader& gguf() const noexcept { return reader_; }
  const reader* operator->() const noexcept { return &reader_; }
  const std::filesystem::path& path() const noexcept { return map_.path(); }

 private:
  mapped_file map_;
  reader reader_;
};

// Maps and parses a GGUF file: `auto f = gguf::open(path); for (auto& t : f->tensors()) ...`.
// Throws strata::error (cannot open/map) or format_error (malformed, naming the offset).
inline file open(const std::filesystem::path& path) { return file(path); }

}  // namespace strata::gguf
