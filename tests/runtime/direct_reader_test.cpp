// The disk tier's O_DIRECT reader (runtime/tiers/direct_reader.hpp): every tensor of a fixture
// GGUF and random, overlapping, unaligned and end-of-file ranges come back equal to the mapped
// file's bytes, with small chunks and few slots so coalescing, chunking and reuse all run; bad
// ranges and arguments are refused naming them.
#include <doctest/doctest.h>

#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../../runtime/tiers/direct_reader.hpp"
#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"

namespace fs = std::filesystem;
using strata::tiers::direct_read;
using strata::tiers::direct_reader;

namespace {
const fs::path reader_fixture = fs::path(STRATA_TEST_FIXTURES) / "models" / "llama4-Q4_K_M.gguf";

// nullopt-like: false when this file system has no O_DIRECT (tmpfs), said, nothing checked.
bool make_reader(std::unique_ptr<direct_reader>& r, unsigned depth, std::size_t chunk) {
  try {
    r = std::make_unique<direct_reader>(reader_fixture, depth, chunk);
    return true;
  } catch (const strata::error& e) {
    if (std::string(e.what()).find("with O_DIRECT") == std::string::npos) throw;
    MESSAGE("no O_DIRECT here (" << e.what() << "): direct reader not checked");
    return false;
  }
}
}  // namespace

TEST_CASE("direct reader: every tensor of a GGUF equals the mapped bytes") {
  std::unique_ptr<direct_reader> r;
  if (!make_reader(r, 4, 16384)) return;
  const strata::gguf::file f(reader_fixture);
  std::vector<std::vector<std::byte>> out;
  std::vector<direct_read> reads;
  for (const auto& t : f->tensors()) out.emplace_back(t.nbytes + 1);  // +1: unaligned destinations
  std::size_t i = 0;
  for (const auto& t : f->tensors()) reads.push_back({t.file_offset, t.nbytes, out[i++].data() + 1});
  r->read(reads);
  i = 0;
  for (const auto& t : f->tensors()) {
    CAPTURE(t.name);
    REQUIRE(std::memcmp(out[i++].data() + 1, t.data.data(), t.nbytes) == 0);
  }
  CHECK(r->stats().spans == 1);  // tensors are adjacent (alignment padding < the gap)
  CHECK(r->stats().chunks > 4);  // more chunks than slots: buffers were reused
  CHECK(r->stats().bytes_from_disk >= r->stats().bytes_delivered);
}

TEST_CASE("direct reader: random overlapping, empty and end-of-file ranges") {
  std::unique_ptr<direct_reader> r;
  if (!make_reader(r, 3, 8192)) return;
  const strata::gguf::file f(reader_fixture);
  const auto whole = f->bytes();
  const std::uint64_t size = r->file_size();
  REQUIRE(size == whole.size());
  std::mt19937_64 rng(5);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::vector<std::byte>> out;
    std::vector<direct_read> reads;
    const int n = 1 + int(rng() % 12);
    for (int j = 0; j < n; ++j) {
      const std::uint64_t off = j == 0 ? size - 1 - rng() % 5000 : rng() % size;  // one range reaches EOF
      const std::uint64_t len = j == 1 ? 0 : (j == 0 ? size - off : std::min<std::uint64_t>(rng() % 70000, size - off));
      out.emplace_back(len + 3);
      reads.push_back({off, len, out.back().data() + 3});
    }
    const auto want = reads;
    r->read(reads);
    for (const auto& w : want) REQUIRE(std::memcmp(w.dst, whole.data() + w.offset, w.bytes) == 0);
  }
  std::vector<std::byte> buf(16);
  std::vector<direct_read> bad{{size - 8, 16, buf.data()}};
  CHECK_THROWS_WITH_AS(r->read(bad), doctest::Contains("past the end of"), strata::error);
}

TEST_CASE("direct reader: bad arguments and files") {
  CHECK_THROWS_WITH_AS(direct_reader(reader_fixture, 4, 1000), doctest::Contains("multiple of 4096"), strata::error);
  CHECK_THROWS_WITH_AS(direct_reader("/nonexistent/model.gguf"), doctest::Contains("cannot open '/nonexistent/model.gguf'"),
                       strata::error);
}

// Aligned spans straight into memory registered with the ring (the disk tier's slots): the
// chunks inside it go out as READ_FIXED, those outside as plain reads, both with the file's
// bytes; a second registration, or read()'s bounce buffers beside it, are refused.
TEST_CASE("direct reader: read_direct into registered memory (READ_FIXED) and beside it") {
  std::unique_ptr<direct_reader> r;
  if (!make_reader(r, 4, 16384)) return;
  const std::uint64_t size = r->file_size() / 4096 * 4096;
  REQUIRE(size >= 4 * 65536);
  const std::size_t half = std::size_t(size / 2 / 4096 * 4096);
  auto* mem = static_cast<std::byte*>(std::aligned_alloc(4096, size));
  REQUIRE(mem != nullptr);
  const std::unique_ptr<std::byte, decltype(&std::free)> hold(mem, &std::free);
  std::memset(mem, 0, size);
  if (!r->register_memory({mem, half})) {
    MESSAGE("the kernel refused to register " << half << " bytes (RLIMIT_MEMLOCK?): plain reads only");
  } else {
    CHECK_THROWS_WITH_AS(r->register_memory({mem, half}), doctest::Contains("registered twice"), strata::error);
    std::vector<direct_read> in{{0, half, mem}}, beside{{half, size - half, mem + half}};
    r->read_direct(in);
    const auto fixed = r->stats().fixed_chunks;
    CHECK(fixed == (half + 16383) / 16384);  // chunks of 16 KiB, the last one shorter
    r->read_direct(beside);
    CHECK(r->stats().fixed_chunks == fixed);  // outside the registered region: plain reads
    std::vector<direct_read> unaligned{{1, 8, mem}};
    CHECK_THROWS_WITH_AS(r->read(unaligned), doctest::Contains("read() after register_memory()"), strata::error);
  }
  if (r->stats().fixed_chunks == 0) return;
  std::ifstream in(reader_fixture, std::ios::binary);
  std::vector<char> file(size);
  REQUIRE(in.read(file.data(), std::streamsize(size)));
  CHECK(std::memcmp(mem, file.data(), size) == 0);
}
