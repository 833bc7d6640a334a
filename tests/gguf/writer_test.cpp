// gguf::writer: every metadata value type and tensor layout survives write -> read exactly
// (type-exact values, identical tensor bytes, alignment honoured), the writer rejects what the
// reader would reject, and copying a llama.cpp-written file through reader + writer reproduces
// it byte for byte (same layout as llama.cpp's gguf writer and gguf-py).
#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "strata/gguf/reader.hpp"
#include "strata/gguf/writer.hpp"
#include "support/fixtures.hpp"
#include "support/manifest.hpp"

namespace {

using namespace strata;
using gguf::owned_value;
using gguf::type_id;
using gguf::value_type;

std::string hex(std::span<const std::byte> b) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (const auto x : b) {
    const auto u = std::to_integer<unsigned>(x);
    s += digits[u >> 4];
    s += digits[u & 15];
  }
  return s;
}
std::string hex(std::string_view s) { return hex(std::as_bytes(std::span(s.data(), s.size()))); }

template <class T>
std::string scalar_hex(T x) {
  std::array<std::byte, sizeof(T)> b{};
  std::memcpy(b.data(), &x, sizeof(T));
  return hex(b);
}

// Canonical, type-exact rendering of a value as the reader exposes it: "<type>:<hex bytes>",
// arrays as "[<elem type> n: ...]". Two values render equal iff they encode identically.
std::string dump(const gguf::value& v) {
  const std::string t(gguf::name_of(v.type()));
  switch (v.type()) {
    case value_type::u8: return t + ":" + scalar_hex(v.as<std::uint8_t>());
    case value_type::i8: return t + ":" + scalar_hex(v.as<std::int8_t>());
    case value_type::u16: return t + ":" + scalar_hex(v.as<std::uint16_t>());
    case value_type::i16: return t + ":" + scalar_hex(v.as<std::int16_t>());
    case value_type::u32: return t + ":" + scalar_hex(v.as<std::uint32_t>());
    case value_type::i32: return t + ":" + scalar_hex(v.as<std::int32_t>());
    case value_type::f32: return t + ":" + scalar_hex(v.as<float>());
    case value_type::boolean: return t + ":" + scalar_hex(v.as<bool>());
    case value_type::u64: return t + ":" + scalar_hex(v.as<std::uint64_t>());
    case value_type::i64: return t + ":" + scalar_hex(v.as<std::int64_t>());
    case value_type::f64: return t + ":" + scalar_hex(v.as<double>());
    case value_type::string: return t + ":" + hex(v.as_string());
    case value_type::array: break;
  }
  std::string s = "[" + std::string(gguf::name_of(v.elem_type())) + " " + std::to_string(v.size()) + ":";
  if (v.elem_type() == value_type::string) {
    for (const auto e : v.strings()) s += " " + hex(e);
  } else if (v.elem_type() == value_type::array) {
    for (const auto& e : v.arrays()) s += " " + dump(e);
  } else {
    s += " " + hex(v.raw_array_bytes());
  }
  return s + "]";
}

// The same rendering of an owned (to-be-written) value.
std::string dump(const owned_value& o) {
  const std::string t(gguf::name_of(o.type()));
  if (const auto* s = std::get_if<owned_value::scalar_t>(&o.v)) {
    std::array<std::byte, 8> b{};
    std::memcpy(b.data(), &s->raw, 8);
    return t + ":" + hex(std::span(b).first(gguf::scalar_size(s->type)));
  }
  if (const auto* s = std::get_if<std::string>(&o.v)) return t + ":" + hex(*s);
  if (const auto* a = std::get_if<owned_value::scalar_array_t>(&o.v))
    return "[" + std::string(gguf::name_of(a->elem)) + " " + std::to_string(a->n) + ": " + hex(a->bytes) + "]";
  if (const auto* a = std::get_if<std::vector<std::string>>(&o.v)) {
    std::string s = "[string " + std::to_string(a->size()) + ":";
    for (const auto& e : *a) s += " " + hex(e);
    return s + "]";
  }
  const auto& a = std::get<std::vector<owned_value>>(o.v);
  std::string s = "[array " + std::to_string(a.size()) + ":";
  for (const auto& e : a) s += " " + dump(e);
  return s + "]";
}

template <class T>
owned_value arr(std::initializer_list<T> xs) {
  const std::vector<T> v(xs);
  return owned_value::array(std::span<const T>(v));
}
owned_value bool_arr(std::initializer_list<bool> xs) {
  std::vector<std::uint8_t> raw;  // std::vector<bool> has no contiguous storage
  for (bool b : xs) raw.push_back(b);
  auto o = owned_value::array(std::span<const std::uint8_t>(raw));
  std::get<owned_value::scalar_array_t>(o.v).elem = value_type::boolean;
  return o;
}

// Every value type, edge values included, in a fixed order.
std::vector<std::pair<std::string, owned_value>> all_values() {
  const float nan_payload = std::bit_cast<float>(0x7fc00123u);
  std::vector<std::pair<std::string, owned_value>> kv;
  kv.emplace_back("general.architecture", owned_value::string("llama"));
  kv.emplace_back("t.u8", owned_value::scalar(std::uint8_t(0xAB)));
  kv.emplace_back("t.i8", owned_value::scalar(std::int8_t(-7)));
  kv.emplace_back("t.u16", owned_value::scalar(std::uint16_t(0xBEEF)));
  kv.emplace_back("t.i16", owned_value::scalar(std::int16_t(-12345)));
  kv.emplace_back("t.u32", owned_value::scalar(std::uint32_t(0xDEADBEEF)));
  kv.emplace_back("t.i32", owned_value::scalar(std::numeric_limits<std::int32_t>::min()));
  kv.emplace_back("t.f32", owned_value::scalar(1.5f));
  kv.emplace_back("t.f32.neg_zero", owned_value::scalar(-0.0f));
  kv.emplace_back("t.f32.nan_payload", owned_value::scalar(nan_payload));
  kv.emplace_back("t.f32.inf", owned_value::scalar(-std::numeric_limits<float>::infinity()));
  kv.emplace_back("t.bool.true", owned_value::scalar(true));
  kv.emplace_back("t.bool.false", owned_value::scalar(false));
  kv.emplace_back("t.u64", owned_value::scalar(std::numeric_limits<std::uint64_t>::max()));
  kv.emplace_back("t.i64", owned_value::scalar(std::numeric_limits<std::int64_t>::min()));
  kv.emplace_back("t.f64", owned_value::scalar(3.141592653589793));
  kv.emplace_back("t.f64.denorm", owned_value::scalar(std::numeric_limits<double>::denorm_min()));
  kv.emplace_back("t.str.empty", owned_value::string(""));
  kv.emplace_back("t.str.ascii", owned_value::string("hello"));
  kv.emplace_back("t.str.utf8", owned_value::string("h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\xa6\x99"));
  kv.emplace_back("t.str.nul", owned_value::string(std::string("a\0b", 3)));
  kv.emplace_back("t.utf8.\xc3\xbc.key", owned_value::string("key with UTF-8"));
  kv.emplace_back("t.arr.u8", arr<std::uint8_t>({0, 1, 255}));
  kv.emplace_back("t.arr.i8", arr<std::int8_t>({-128, 0, 127}));
  kv.emplace_back("t.arr.u16", arr<std::uint16_t>({1, 65535}));
  kv.emplace_back("t.arr.i16", arr<std::int16_t>({-32768, 32767, 0}));
  kv.emplace_back("t.arr.u32", arr<std::uint32_t>({7, 0xFFFFFFFFu}));
  kv.emplace_back("t.arr.i32", arr<std::int32_t>({-1, 2, -3, 4}));
  kv.emplace_back("t.arr.f32", arr<float>({0.5f, -0.0f, nan_payload, 1e-45f}));
  kv.emplace_back("t.arr.bool", bool_arr({true, false, true}));
  kv.emplace_back("t.arr.u64", arr<std::uint64_t>({0, std::numeric_limits<std::uint64_t>::max()}));
  kv.emplace_back("t.arr.i64", arr<std::int64_t>({std::numeric_limits<std::int64_t>::min(), 5}));
  kv.emplace_back("t.arr.f64", arr<double>({2.5, -1e300}));
  kv.emplace_back("t.arr.empty", arr<std::uint32_t>({}));
  kv.emplace_back("t.arr.str", owned_value::strings({"", "a", "\xc3\xbcn\xc3\xaf", std::string("x\0y", 3)}));
  kv.emplace_back("t.arr.str.empty", owned_value::strings({}));
  // Nested: array of arrays of differing element types (2 levels), and 3 levels.
  kv.emplace_back("t.arr.nested",
                  owned_value::arrays({arr<std::int32_t>({1, 2, 3}), arr<float>({}), owned_value::strings({"p", "q"}),
                                       bool_arr({false})}));
  kv.emplace_back("t.arr.nested3",
                  owned_value::arrays({owned_value::arrays({arr<std::uint8_t>({9}), owned_value::arrays({})}),
                                       owned_value::arrays({})}));
  kv.emplace_back("t.arr.nested.empty", owned_value::arrays({}));
  return kv;
}

struct tensor_spec {
  std::string name;
  type_id type;
  std::vector<std::uint64_t> ne;
};

// Several types and shapes: odd byte sizes (padding), 0-4 dims, zero-element tensors.
std::vector<tensor_spec> all_tensors() {
  return {
      {"f32.vec", type_id::f32, {7}},           {"f16.mat", type_id::f16, {3, 5}},
      {"bf16", type_id::bf16, {33}},            {"q4_0", type_id::q4_0, {64, 3}},
      {"empty.f32", type_id::f32, {0, 4}},      {"q8_0.4d", type_id::q8_0, {32, 1, 2, 2}},
      {"q4_k", type_id::q4_k, {256, 2}},        {"q6_k", type_id::q6_k, {512}},
      {"i8", type_id::i8, {5}},                 {"scalar", type_id::f32, {}},
      {"i64", type_id::i64, {3}},               {"f64", type_id::f64, {2, 1}},
      {"empty.q4_k", type_id::q4_k, {256, 0}},  {"mxfp4", type_id::mxfp4, {32, 3}},
      {"iq4_nl", type_id::iq4_nl, {32}},        {"i16.3d", type_id::i16, {3, 1, 3}},
  };
}

std::uint64_t nbytes_of(const tensor_spec& t) {
  std::uint64_t n = 1;
  for (auto d : t.ne) n *= d;
  return n / gguf::block_elems(t.type) * gguf::block_bytes(t.type);
}

std::vector<std::byte> random_bytes(std::size_t n, std::mt19937& rng) {
  std::vector<std::byte> b(n);
  for (auto& x : b) x = std::byte(rng() & 0xFF);
  return b;
}

std::size_t first_difference(std::span<const std::byte> a, std::span<const std::byte> b) {
  const auto n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return i;
  return n;
}

// A unique scratch path; the file is removed by the destructor.
struct temp_path {
  std::filesystem::path p;
  explicit temp_path(const std::string& tag)
      : p(std::filesystem::temp_directory_path() /
          ("strata_writer_test_" + std::to_string(::getpid()) + "_" + tag + ".gguf")) {}
  ~temp_path() {
    std::error_code ec;
    std::filesystem::remove(p, ec);
  }
};

std::string message_of_error(auto&& fn) {
  try {
    fn();
  } catch (const error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("writer: round trip of every value type and tensor layout") {
  for (const std::uint32_t alignment : {32u, 64u, 1u, 256u}) {
    CAPTURE(alignment);
    gguf::writer w(alignment);
    const auto kv = all_values();
    for (const auto& [k, v] : kv) w.set(k, v);
    std::mt19937 rng(1234 + alignment);
    const auto specs = all_tensors();
    std::vector<std::vector<std::byte>> data;
    for (const auto& t : specs) data.push_back(random_bytes(std::size_t(nbytes_of(t)), rng));
    for (std::size_t i = 0; i < specs.size(); ++i) w.add_tensor(specs[i].name, specs[i].type, specs[i].ne, data[i]);

    const auto bytes = w.to_bytes();
    CHECK(bytes.size() == w.file_size());
    const gguf::reader r(bytes, "roundtrip.gguf");
    CHECK(r.version() == 3);
    CHECK(r.alignment() == alignment);

    // Metadata: same keys in the same order (general.alignment first when not the default),
    // every value type-exact.
    const auto& md = r.metadata();
    const std::size_t first = alignment == gguf::default_alignment ? 0 : 1;
    REQUIRE(md.size() == kv.size() + first);
    if (first) {
      CHECK(md[0].first == "general.alignment");
      CHECK(md[0].second.type() == value_type::u32);
      CHECK(r.get<std::uint32_t>("general.alignment") == alignment);
    } else {
      CHECK_FALSE(r.contains("general.alignment"));
    }
    for (std::size_t i = 0; i < kv.size(); ++i) {
      INFO("key " << kv[i].first);
      CHECK(md[i + first].first == kv[i].first);
      CHECK(dump(md[i + first].second) == dump(kv[i].second));
      CHECK(dump(owned_value::from(md[i + first].second)) == dump(kv[i].second));  // deep copy is exact
    }
    // Typed access to what was written.
    CHECK(r.get<std::int32_t>("t.i32") == std::numeric_limits<std::int32_t>::min());
    CHECK(std::signbit(r.get<float>("t.f32.neg_zero")));
    CHECK(std::bit_cast<std::uint32_t>(r.get<float>("t.f32.nan_payload")) == 0x7fc00123u);
    CHECK(r.get_string("t.str.nul") == std::string_view("a\0b", 3));
    CHECK(r.get_string("t.str.empty").empty());
    CHECK(r.get_bool("t.bool.true"));
    CHECK_FALSE(r.get_bool("t.bool.false"));
    CHECK(r.get<std::uint64_t>("t.u64") == std::numeric_limits<std::uint64_t>::max());
    CHECK(r.at("t.arr.i16").to_vector<std::int16_t>() == std::vector<std::int16_t>{-32768, 32767, 0});
    CHECK(r.at("t.arr.bool").to_vector<bool>() == std::vector<bool>{true, false, true});
    CHECK(r.at("t.arr.f64").at<double>(1) == -1e300);
    CHECK(r.at("t.arr.empty").size() == 0);
    CHECK(r.at("t.arr.str").strings().at(2) == "\xc3\xbcn\xc3\xaf");
    const auto& nested = r.at("t.arr.nested").arrays();
    REQUIRE(nested.size() == 4);
    CHECK(nested[0].to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2, 3});
    CHECK(nested[1].elem_type() == value_type::f32);
    CHECK(nested[2].strings().at(1) == "q");
    CHECK(r.at("t.arr.nested3").arrays().at(0).arrays().at(0).at<std::uint8_t>(0) == 9);

    // Tensors: in order, exact shapes and bytes, every data offset aligned.
    REQUIRE(r.tensors().size() == specs.size());
    CHECK(r.data_offset() % alignment == 0);
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto& t = r.tensors()[i];
      INFO("tensor " << specs[i].name);
      CHECK(t.name == specs[i].name);
      CHECK(t.type == specs[i].type);
      REQUIRE(t.n_dims == specs[i].ne.size());
      for (std::size_t d = 0; d < specs[i].ne.size(); ++d) CHECK(t.ne[d] == specs[i].ne[d]);
      CHECK(t.nbytes == data[i].size());
      CHECK(t.file_offset % alignment == 0);
      CHECK(first_difference(t.data, data[i]) == data[i].size());
    }
    CHECK(r.tensor("empty.f32").n_elements() == 0);
    CHECK(r.tensor("scalar").n_elements() == 1);
  }
}

TEST_CASE("writer: metadata-only file has no data padding") {
  gguf::writer w;
  w.set("general.architecture", "llama");
  const auto bytes = w.to_bytes();
  CHECK(bytes.size() == w.file_size());
  CHECK(bytes.size() == 24 + (8 + 20 + 4 + 8 + 5));
  const gguf::reader r(bytes);
  CHECK(r.tensors().empty());
  CHECK(r.get_string("general.architecture") == "llama");
}

TEST_CASE("writer: general.alignment always matches the layout") {
  SUBCASE("set after construction adopts the new alignment") {
    gguf::writer w(64);
    w.set("general.alignment", std::uint32_t(128));
    CHECK(w.alignment() == 128);
    const std::vector<std::byte> data(4);
    w.add_tensor("a", type_id::f32, {1}, data);
    w.add_tensor("b", type_id::f32, {1}, data);
    const auto bytes = w.to_bytes();
    const gguf::reader r(bytes);
    CHECK(r.alignment() == 128);
    CHECK(r.metadata().size() == 1);
    CHECK(r.tensor("b").offset == 128);
    CHECK(bytes.size() == r.data_offset() + 256);
  }
  SUBCASE("remove restores the default") {
    gguf::writer w(64);
    w.remove("general.alignment");
    CHECK(w.alignment() == gguf::default_alignment);
    const std::vector<std::byte> data(4);
    w.add_tensor("a", type_id::f32, {1}, data);
    w.add_tensor("b", type_id::f32, {1}, data);
    const auto bytes = w.to_bytes();
    const gguf::reader r(bytes);
    CHECK(r.alignment() == 32);
    CHECK(r.tensor("b").offset == 32);
  }
  SUBCASE("invalid values are refused and change nothing") {
    gguf::writer w(64);
    CHECK(message_of_error([&] { w.set("general.alignment", std::uint64_t(64)); }) ==
          "gguf writer: general.alignment must be a u32, got u64");
    CHECK(message_of_error([&] { w.set("general.alignment", "64"); }) ==
          "gguf writer: general.alignment must be a u32, got string");
    CHECK(message_of_error([&] { w.set("general.alignment", std::uint32_t(48)); }) ==
          "gguf writer: general.alignment = 48 is not a power of two");
    CHECK(message_of_error([] { gguf::writer bad(0); }) == "gguf writer: general.alignment = 0 is not a power of two");
    CHECK(w.alignment() == 64);
  }
}

TEST_CASE("writer: rejects what the reader would reject") {
  gguf::writer w;
  const std::vector<std::byte> four(4);
  w.add_tensor("t", type_id::f32, {1}, four);
  CHECK(message_of_error([&] { w.add_tensor("t", type_id::f32, {1}, four); }) == "gguf writer: duplicate tensor 't'");
  CHECK(message_of_error([&] { w.add_tensor("", type_id::f32, {1}, four); }).find("must be 1..63 bytes") !=
        std::string::npos);
  CHECK(message_of_error([&] { w.add_tensor(std::string(64, 'x'), type_id::f32, {1}, four); })
            .find("must be 1..63 bytes") != std::string::npos);
  CHECK(message_of_error([&] { w.add_tensor("5d", type_id::f32, {1, 1, 1, 1, 1}, four); }) ==
        "gguf writer: tensor '5d' has more than 4 dimensions");
  CHECK(message_of_error([&] { w.add_tensor("q", type_id::q4_0, {33}, four); }) ==
        "gguf writer: tensor 'q' row length is not a multiple of the Q4_0 block size 32");
  CHECK(message_of_error([&] { w.add_tensor("q0", type_id::q4_0, {}, four); }).find("block size 32") !=
        std::string::npos);
  CHECK(message_of_error([&] { w.add_tensor("big", type_id::f32, {1ull << 32, 1ull << 32}, four); }) ==
        "gguf writer: tensor 'big' element count overflows");
  CHECK(message_of_error([&] { w.add_tensor("bad", type_id(4), {32}, four); }) ==
        "gguf writer: tensor 'bad' has invalid ggml type id 4");
  CHECK(message_of_error([&] { w.add_tensor("bad", type_id(1000), {32}, four); }) ==
        "gguf writer: tensor 'bad' has invalid ggml type id 1000");
  CHECK(message_of_error([&] { w.set("", std::uint8_t(1)); }) == "gguf writer: empty metadata key");
  CHECK(message_of_error([] { (void)owned_value::arrays({owned_value::scalar(1.0f)}); }) ==
        "gguf writer: nested array element is not an array");
  // A size mismatch leaves nothing queued: the writer stays usable (it used to keep the tensor,
  // whose fill then read past the caller's buffer).
  CHECK(message_of_error([&] { w.add_tensor("short", type_id::f32, {2}, four); }) ==
        "gguf writer: tensor 'short' (F32) expects 8 bytes, got 4");
  CHECK(w.tensor_count() == 1);
  const auto bytes = w.to_bytes();
  const gguf::reader r(bytes);
  CHECK(r.tensors().size() == 1);
}

TEST_CASE("writer: streams tensors larger than one chunk to a file") {
  constexpr std::uint64_t n = (16u << 20) + 96;  // 16 MiB chunk + a tail
  gguf::writer w;
  w.set("general.architecture", "test");
  std::uint64_t expected_offset = 0;
  bool consecutive = true;
  w.add_tensor("big", type_id::i8, {n}, [&](std::uint64_t off, std::span<std::byte> chunk) {
    consecutive = consecutive && off == expected_offset;
    expected_offset = off + chunk.size();
    for (std::size_t i = 0; i < chunk.size(); ++i) chunk[i] = std::byte((off + i) * 7 % 251);
  });
  const std::vector<std::byte> small{std::byte{1}, std::byte{2}};
  w.add_tensor("after", type_id::i8, {2}, small);
  const temp_path tmp("stream");
  w.write(tmp.p);
  CHECK(consecutive);
  CHECK(expected_offset == n);
  CHECK_FALSE(std::filesystem::exists(tmp.p.string() + ".tmp"));
  const gguf::file f(tmp.p);
  CHECK(f->file_size() == w.file_size());
  const auto& big = f->tensor("big");
  REQUIRE(big.nbytes == n);
  for (const std::uint64_t i : {std::uint64_t(0), std::uint64_t(1) << 20, (std::uint64_t(16) << 20) - 1,
                                std::uint64_t(16) << 20, n - 1})
    CHECK(std::to_integer<unsigned>(big.data[std::size_t(i)]) == i * 7 % 251);
  CHECK(f->tensor("after").data[1] == std::byte{2});
}

TEST_CASE("writer: a failed write leaves no file behind") {
  gguf::writer w;
  w.add_tensor("t", type_id::f32, {1}, [](std::uint64_t, std::span<std::byte>) { throw error("producer failed"); });
  const temp_path tmp("fail");
  CHECK(message_of_error([&] { w.write(tmp.p); }) == "producer failed");
  CHECK_FALSE(std::filesystem::exists(tmp.p));
  CHECK_FALSE(std::filesystem::exists(tmp.p.string() + ".tmp"));
}

namespace {

// Reads `path`, copies every key (in order, via owned_value::from) and every tensor into a
// writer, and checks the output is the original file byte for byte.
void check_copy_is_identical(const std::filesystem::path& path) {
  INFO(path.string());
  const gguf::file f(path);
  const auto& r = f.gguf();
  gguf::writer w;
  for (const auto& [k, v] : r.metadata()) w.set(std::string(k), owned_value::from(v));
  for (const auto& t : r.tensors())
    w.add_tensor(std::string(t.name), t.type, std::vector<std::uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                 t.data);
  CHECK(w.file_size() == r.file_size());
  const auto out = w.to_bytes();
  const auto diff = first_difference(out, r.bytes());
  INFO("first difference at byte offset " << diff << " (sizes " << out.size() << " vs " << r.file_size() << ")");
  CHECK(out.size() == r.file_size());
  CHECK(diff == out.size());
}

}  // namespace

TEST_CASE("writer: copying a local fixture model reproduces it byte for byte") {
  for (const auto& m : test::local_models()) check_copy_is_identical(m.path);
}

TEST_CASE("writer: copying every shared fixture GGUF reproduces it byte for byte") {
  const auto models = test::shared_models();
  if (models.empty()) {
    MESSAGE("skipped: no shared fixture set at " STRATA_SHARED_FIXTURES);
    return;
  }
  for (const auto& m : models) check_copy_is_identical(m.path);
  for (const auto& p : test::shared_tokenizer_ggufs()) check_copy_is_identical(p);
}
