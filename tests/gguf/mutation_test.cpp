// gguf::reader on damaged input: truncation at (almost) every header offset and inside the
// data, thousands of seeded byte mutations of the header/metadata/tensor-info region, and one
// hand-built corruption per validation rule with the message it must produce. The reader must
// either parse (and then every view it hands out lies inside the input) or throw
// strata::format_error naming what is wrong; it must never crash, hang or read out of bounds.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "strata/gguf/reader.hpp"
#include "support/fixtures.hpp"
#include "support/gguf_walk.hpp"
#include "support/manifest.hpp"

namespace {

using namespace strata;

// nullopt when the input parses (after walking every view), else the error message.
std::optional<std::string> parse_error(std::span<const std::byte> bytes, const std::string& source = "damaged.gguf") {
  try {
    const gguf::reader r(bytes, source);
    (void)test::walk_all(r);
    return std::nullopt;
  } catch (const format_error& e) {
    return std::string(e.what());
  } catch (const error& e) {
    return std::string(e.what());
  }
}

// Where a model's header ends (end of the last tensor-info record) and its data ends.
struct model_layout {
  std::uint64_t infos_begin = 0;  // first tensor-info record
  std::uint64_t infos_end = 0;    // one past the last tensor-info record
  std::uint64_t data_end = 0;     // one past the last tensor byte
};

model_layout layout_of(std::span<const std::byte> bytes) {
  const gguf::reader r(bytes);
  model_layout l;
  l.infos_begin = r.tensors().front().info_offset;
  for (const auto& t : r.tensors()) l.data_end = std::max(l.data_end, t.file_offset + t.nbytes);
  // The record of the last tensor: name (8 + len), n_dims (4), ne (8 each), type (4), offset (8).
  const auto& last = r.tensors().back();
  l.infos_end = last.info_offset + 8 + last.name.size() + 4 + 8 * last.n_dims + 4 + 8;
  return l;
}

struct loaded_model {
  std::string name;
  std::vector<std::byte> bytes;
  model_layout layout;
};

std::vector<loaded_model> load_local_models() {
  std::vector<loaded_model> out;
  for (const auto& m : test::local_models()) {
    loaded_model lm{m.name, test::read_bytes(m.path), {}};
    lm.layout = layout_of(lm.bytes);
    out.push_back(std::move(lm));
  }
  return out;
}

// Truncation at `cut` must fail with a message unless every tensor byte is still there.
void check_truncated(const loaded_model& m, std::uint64_t cut) {
  const auto err = parse_error(std::span(m.bytes).first(std::size_t(cut)));
  INFO(m.name << " truncated to " << cut << " bytes");
  if (cut >= m.layout.data_end) {  // only trailing padding lost: still a complete file
    REQUIRE_FALSE(err.has_value());
    return;
  }
  REQUIRE(err.has_value());
  REQUIRE(!err->empty());
  REQUIRE(err->starts_with("damaged.gguf: "));
}

// ---- a byte-level GGUF builder for hand-made corruptions ------------------------------------

struct gguf_bytes {
  std::vector<std::byte> b;

  template <class T>
  gguf_bytes& put(T x) {
    const auto at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &x, sizeof(T));
    return *this;
  }
  gguf_bytes& u32(std::uint32_t x) { return put(x); }
  gguf_bytes& u64(std::uint64_t x) { return put(x); }
  gguf_bytes& str(std::string_view s) {
    u64(s.size());
    for (const char c : s) b.push_back(std::byte(c));
    return *this;
  }
  gguf_bytes& header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    b.clear();
    return str_raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  gguf_bytes& str_raw(std::string_view s) {
    for (const char c : s) b.push_back(std::byte(c));
    return *this;
  }
  gguf_bytes& kv_u32(std::string_view k, std::uint32_t v) { return str(k).u32(4).u32(v); }
  gguf_bytes& kv_str(std::string_view k, std::string_view v) { return str(k).u32(8).str(v); }
  gguf_bytes& tensor(std::string_view name, std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t off) {
    str(name).u32(std::uint32_t(ne.size()));
    for (auto d : ne) u64(d);
    return u32(type).u64(off);
  }
  gguf_bytes& pad(std::size_t alignment = 32) {
    b.resize((b.size() + alignment - 1) / alignment * alignment);
    return *this;
  }
  gguf_bytes& zeros(std::size_t n) {
    b.resize(b.size() + n);
    return *this;
  }
};

// Fails the test unless `g` is rejected with a message containing every one of `parts`.
void expect_error(const gguf_bytes& g, std::initializer_list<std::string_view> parts) {
  const auto err = parse_error(g.b, "crafted.gguf");
  REQUIRE_MESSAGE(err.has_value(), "parsed, but expected an error containing '" << *parts.begin() << "'");
  CHECK(err->starts_with("crafted.gguf: "));
  for (const auto p : parts) CHECK_MESSAGE(err->find(p) != std::string::npos, "'" << *err << "' lacks '" << p << "'");
}

void expect_ok(const gguf_bytes& g) {
  const auto err = parse_error(g.b, "crafted.gguf");
  CHECK_MESSAGE(!err.has_value(), *err);
}

// One F32 tensor "t" of 32 elements and one string key: the valid base of most cases.
gguf_bytes valid_file() {
  gguf_bytes g;
  g.header(1, 1).kv_str("general.architecture", "llama").tensor("t", {32}, 0, 0).pad().zeros(128);
  return g;
}

// A key holding `depth` nested arrays around an empty array of u8.
gguf_bytes nested_file(int depth) {
  gguf_bytes g;
  g.header(0, 1).str("deep").u32(9);  // value type: array
  for (int i = 1; i < depth; ++i) g.u32(9).u64(1);  // element type array, one element
  g.u32(0).u64(0);  // innermost: array of u8, empty
  return g;
}

}  // namespace

TEST_CASE("mutation: the crafted base file parses") {
  expect_ok(valid_file());
  const auto g = valid_file();
  const gguf::reader r(g.b);
  CHECK(r.tensor("t").nbytes == 128);
}

TEST_CASE("mutation: truncation anywhere before the end of the data fails cleanly") {
  const auto models = load_local_models();
  REQUIRE(models.size() == 5);  // tools/trim_manifest.py: one K-quant per arch + llama-F32
  // Model 0: every offset of the first 4 KiB (header, scalar keys, start of the vocabulary) and
  // of the tensor infos plus the padding after them; in between (the vocabulary arrays, ~30 KB)
  // every 5th offset, which still lands on every byte of the 8-byte length fields. The others:
  // the same with strides (5 in the first 4 KiB and the infos, 37 in the vocabulary). Each cut in
  // the infos re-parses the whole vocabulary, so a full sweep of every model costs seconds under
  // ASan for no new coverage.
  for (std::size_t i = 0; i < models.size(); ++i) {
    const auto& m = models[i];
    const std::uint64_t dense = i == 0 ? 1 : 5, vocab = i == 0 ? 5 : 37;
    for (std::uint64_t cut = 0; cut < 4096; cut += dense) check_truncated(m, cut);
    for (std::uint64_t cut = 4096; cut < m.layout.infos_begin; cut += vocab) check_truncated(m, cut);
    for (std::uint64_t cut = m.layout.infos_begin; cut <= m.layout.infos_end + 64; cut += dense)
      check_truncated(m, cut);
  }
  // Inside the data: the middle and the last byte of every tensor, and the file's last byte.
  for (const auto& m : models) {
    const gguf::reader r(m.bytes);
    for (const auto& t : r.tensors()) {
      check_truncated(m, t.file_offset + t.nbytes / 2);
      check_truncated(m, t.file_offset + t.nbytes - 1);
    }
    check_truncated(m, m.bytes.size() - 1);
    CHECK_FALSE(parse_error(m.bytes).has_value());
  }
}

TEST_CASE("mutation: seeded byte mutations of the header never crash") {
  auto models = load_local_models();
  std::mt19937_64 rng(20240611);
  std::size_t parsed = 0, rejected = 0;
  for (auto& m : models) {
    const std::uint64_t header_end = m.layout.infos_end;
    for (int i = 0; i < 1000; ++i) {
      // Half the mutations land in the first KiB and the tensor infos (counts, types, shapes,
      // offsets), half anywhere in the header (mostly string lengths of the vocab arrays).
      std::uint64_t at = 0;
      switch (rng() % 4) {
        case 0: at = rng() % 1024; break;
        case 1: at = m.layout.infos_begin + rng() % (header_end - m.layout.infos_begin); break;
        default: at = rng() % header_end; break;
      }
      const int span = rng() % 8 == 0 ? 8 : 1;  // sometimes a whole u64 field's worth of bytes
      std::vector<std::byte> saved(m.bytes.begin() + std::ptrdiff_t(at), m.bytes.begin() + std::ptrdiff_t(at + span));
      const auto kind = rng() % 4;
      for (int k = 0; k < span; ++k) {
        auto& b = m.bytes[std::size_t(at) + std::size_t(k)];
        switch (kind) {
          case 0: b ^= std::byte(1u << (rng() % 8)); break;
          case 1: b = std::byte{0xFF}; break;
          case 2: b = std::byte{0}; break;
          default: b = std::byte(rng() & 0xFF); break;
        }
      }
      const auto err = parse_error(m.bytes);
      if (err) {
        INFO(m.name << ": mutation " << i << " at byte " << at);
        CHECK_FALSE(err->empty());
        ++rejected;
      } else {
        ++parsed;
      }
      std::memcpy(m.bytes.data() + at, saved.data(), saved.size());
    }
  }
  MESSAGE("mutations: " << parsed << " parsed, " << rejected << " rejected");
  CHECK(rejected > 0);
}

TEST_CASE("mutation: each validation rule rejects its corruption with a precise message") {
  SUBCASE("bad magic") {
    auto g = valid_file();
    g.b[3] = std::byte{'X'};
    expect_error(g, {"not a GGUF file: magic is 'GGUX', expected 'GGUF'", "at byte offset 0"});
    g.b[0] = std::byte{0};
    expect_error(g, {"magic is '\\x00GUX'"});
    expect_error(gguf_bytes{{std::byte{'G'}, std::byte{'G'}}}, {"file too small to be GGUF (2 bytes)"});
  }
  SUBCASE("versions") {
    auto g = valid_file();
    g.header(0, 0, 1);
    expect_error(g, {"GGUF version 1 is not supported (only 2 and 3)", "at byte offset 4"});
    g.header(0, 0, 4);
    expect_error(g, {"unsupported GGUF version 4 (supported: 2, 3)"});
    g.header(0, 0, 0x03000000);
    expect_error(g, {"GGUF version 50331648 looks byte-swapped: big-endian GGUF is not supported"});
    g.header(0, 0, 2);
    expect_ok(g);
  }
  SUBCASE("huge counts") {
    gguf_bytes g;
    g.header(std::uint64_t(1) << 60, 0);
    expect_error(g, {"tensor count 1152921504606846976 is impossible for a file of 24 bytes", "at byte offset 8"});
    g.header(0, ~std::uint64_t(0));
    expect_error(g, {"metadata key/value count 18446744073709551615 is impossible", "at byte offset 16"});
  }
  SUBCASE("string lengths beyond the file") {
    gguf_bytes g;
    g.header(0, 1).u64(1000).str_raw("abcdefghijklmn");
    expect_error(g, {"key of metadata entry 0 length 1000 exceeds the 14 bytes left in the file", "at byte offset 24"});
    g.header(0, 1).str("k").u32(8).u64(~std::uint64_t(0));
    expect_error(g, {"metadata key 'k' length 18446744073709551615 exceeds the 0 bytes left"});
    g.header(1, 0).u64(std::uint64_t(1) << 63).zeros(32);
    expect_error(g, {"name of tensor 0 length 9223372036854775808 exceeds"});
  }
  SUBCASE("array length whose byte size wraps u64") {
    gguf_bytes g;
    // 2^61 + 1 u64 elements: n * 8 wraps to 8, which the bytes left would cover.
    g.header(0, 1).str("a").u32(9).u32(10).u64((std::uint64_t(1) << 61) + 1).u64(0).u64(0);
    expect_error(g, {"metadata key 'a' array length 2305843009213693953 of u64 exceeds the 16 bytes left"});
    g.header(0, 1).str("s").u32(9).u32(8).u64(~std::uint64_t(0) / 8 + 2).zeros(64);
    expect_error(g, {"metadata key 's' array length", "of string exceeds"});
    g.header(0, 1).str("n").u32(9).u32(9).u64(~std::uint64_t(0)).zeros(64);
    expect_error(g, {"metadata key 'n' array length 18446744073709551615 of array exceeds"});
  }
  SUBCASE("invalid value types") {
    gguf_bytes g;
    g.header(0, 1).str("v").u32(13).u32(0);
    expect_error(g, {"metadata key 'v' has invalid value type 13", "at byte offset 33"});
    g.header(0, 1).str("v").u32(0xFFFFFFFF).u32(0);
    expect_error(g, {"has invalid value type 4294967295"});
    g.header(0, 1).str("v").u32(9).u32(13).u64(0);
    expect_error(g, {"metadata key 'v' has invalid array element type 13", "at byte offset 37"});
    g.header(0, 1).str("\x01\x7f").u32(99);
    expect_error(g, {"metadata key '\\x01\\x7f' has invalid value type 99"});
  }
  SUBCASE("bool byte other than 0 or 1") {
    gguf_bytes g;
    g.header(0, 1).str("b").u32(7).put(std::uint8_t(2));
    expect_error(g, {"metadata key 'b' is a bool with byte value 2", "at byte offset 37"});
    g.header(0, 1).str("b").u32(9).u32(7).u64(3).put(std::uint8_t(1)).put(std::uint8_t(0)).put(std::uint8_t(0xFF));
    expect_error(g, {"metadata key 'b' element 2 is a bool with byte value 255", "at byte offset 51"});
  }
  SUBCASE("array nesting depth") {
    expect_ok(nested_file(gguf::max_array_nesting));
    expect_error(nested_file(gguf::max_array_nesting + 1), {"nests arrays deeper than 8 levels"});
    expect_error(nested_file(100000), {"nests arrays deeper than 8 levels"});
  }
  SUBCASE("duplicate and empty keys") {
    gguf_bytes g;
    g.header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
    expect_error(g, {"duplicate metadata key 'a.b'", "at byte offset 43"});
    g.header(0, 1).kv_u32("", 1);
    expect_error(g, {"metadata entry 0 has an empty key", "at byte offset 24"});
  }
  SUBCASE("general.alignment") {
    gguf_bytes g;
    g.header(0, 1).str("general.alignment").u32(10).u64(32);
    expect_error(g, {"metadata key 'general.alignment': expected u32, found u64"});
    g.header(0, 1).kv_str("general.alignment", "32");
    expect_error(g, {"metadata key 'general.alignment': expected u32, found string"});
    g.header(0, 1).kv_u32("general.alignment", 48);
    expect_error(g, {"metadata key 'general.alignment' = 48 is not a power of two"});
    g.header(0, 1).kv_u32("general.alignment", 0);
    expect_error(g, {"'general.alignment' = 0 is not a power of two"});
    g.header(1, 1).kv_u32("general.alignment", 64).tensor("t", {32}, 0, 32).pad(64).zeros(256);
    expect_error(g, {"tensor 't' data offset 32 is not a multiple of the alignment 64"});
  }
  SUBCASE("tensor types") {
    gguf_bytes g;
    g.header(1, 0).tensor("t", {32}, 40, 0).pad().zeros(64);
    expect_error(g, {"tensor 't' has unknown ggml type id 40", "at byte offset 45"});
    g.header(1, 0).tensor("t", {32}, 0xFFFFFFFF, 0).pad().zeros(64);
    expect_error(g, {"unknown ggml type id 4294967295"});
    g.header(1, 0).tensor("t", {32}, 4, 0).pad().zeros(64);
    expect_error(g, {"tensor 't' has ggml type id 4 (Q4_2), which ggml removed"});
    g.header(1, 0).tensor("t", {32}, 33, 0).pad().zeros(64);
    expect_error(g, {"ggml type id 33 (Q4_0_8_8), which ggml removed"});
  }
  SUBCASE("tensor shapes") {
    gguf_bytes g;
    g.header(1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).pad().zeros(64);
    expect_error(g, {"tensor 't' has 5 dimensions, at most 4 are allowed", "at byte offset 33"});
    g.header(1, 0).tensor("t", {33, 2}, 2, 0).pad().zeros(64);
    expect_error(g, {"tensor 't' row length 33 is not a multiple of the Q4_0 block size 32"});
    g.header(1, 0).tensor("t", {100}, 12, 0).pad().zeros(64);
    expect_error(g, {"row length 100 is not a multiple of the Q4_K block size 256"});
    g.header(1, 0).tensor("t", {std::uint64_t(1) << 32, std::uint64_t(1) << 32}, 0, 0).pad().zeros(64);
    expect_error(g, {"tensor 't' element count [4294967296, 4294967296] overflows"});
    g.header(1, 0).tensor("t", {std::uint64_t(1) << 62, 2}, 0, 0).pad().zeros(64);
    expect_error(g, {"element count [4611686018427387904, 2] overflows"});  // 2^63 > INT64_MAX
    g.header(1, 0).tensor("t", {std::uint64_t(1) << 63}, 0, 0).pad().zeros(64);
    expect_error(g, {"tensor 't' dimension 0 = 9223372036854775808 is out of range"});
    // Byte size overflow with a legal element count: 2^62 F64 elements = 2^65 bytes.
    g.header(1, 0).tensor("t", {std::uint64_t(1) << 62}, 28, 0).pad().zeros(64);
    expect_error(g, {"tensor 't' byte size overflows"});
    g.header(1, 0).tensor("t", {0, 7}, 0, 0).pad();
    expect_ok(g);  // zero elements: accepted, no bytes
  }
  SUBCASE("tensor names") {
    gguf_bytes g;
    g.header(1, 0).tensor("", {32}, 0, 0).pad().zeros(128);
    expect_error(g, {"tensor 0 has an empty name"});
    g.header(1, 0).tensor(std::string(64, 'n'), {32}, 0, 0).pad().zeros(128);
    expect_error(g, {"name is 64 bytes, the limit is 63"});
    g.header(2, 0).tensor("t", {32}, 0, 0).tensor("t", {32}, 0, 128).pad().zeros(256);
    expect_error(g, {"duplicate tensor 't'", "at byte offset 57"});
  }
  SUBCASE("tensor offsets") {
    gguf_bytes g;
    g.header(1, 0).tensor("t", {32}, 0, 8).pad().zeros(256);
    expect_error(g, {"tensor 't' data offset 8 is not a multiple of the alignment 32", "at byte offset 49"});
    g.header(1, 0).tensor("t", {32}, 0, 64).pad().zeros(128);
    expect_error(g, {"truncated or corrupt: tensor 't' (F32 [32], 128 bytes at data offset 64) ends past the "
                     "128-byte data section (tensor info at byte offset 24)"});
    g.header(1, 0).tensor("t", {32}, 0, ~std::uint64_t(31)).pad().zeros(128);
    expect_error(g, {"ends past the 128-byte data section"});  // offset + size wraps u64
    g.header(1, 0).tensor("t", {32}, 0, 0);
    expect_error(g, {"truncated: tensor data section starts at byte 64 but the file has 57 bytes"});
  }
  SUBCASE("overlapping tensors") {
    gguf_bytes g;
    g.header(2, 0).tensor("a", {64}, 0, 0).tensor("b", {32}, 0, 128).pad().zeros(512);
    expect_error(g, {"tensor 'b' at data offset 128 overlaps tensor 'a' (data offsets 0..256"});
    g.header(2, 0).tensor("a", {32}, 0, 0).tensor("b", {32}, 0, 0).pad().zeros(512);
    expect_error(g, {"overlaps tensor"});
    // An empty tensor between two overlapping ones must not hide the overlap.
    g.header(3, 0).tensor("a", {96}, 0, 0).tensor("z", {0}, 0, 128).tensor("b", {32}, 0, 256).pad().zeros(512);
    expect_error(g, {"tensor 'b' at data offset 256 overlaps tensor 'a' (data offsets 0..384"});
    // A small tensor inside a larger one.
    g.header(3, 0).tensor("a", {256}, 0, 0).tensor("c", {8}, 0, 32).tensor("b", {8}, 0, 512).pad().zeros(2048);
    expect_error(g, {"tensor 'c' at data offset 32 overlaps tensor 'a'"});
    // Out of order but disjoint is fine, and so are empty tensors sharing an offset.
    g.header(3, 0).tensor("b", {32}, 0, 128).tensor("a", {32}, 0, 0).tensor("z", {0}, 0, 128).pad().zeros(256);
    expect_ok(g);
  }
}
