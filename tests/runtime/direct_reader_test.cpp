// The disk tier's O_DIRECT reader (runtime/tiers/direct_reader.hpp): every tensor of a fixture
// GGUF and random, overlapping, unaligned and end-of-file ranges come back equal to the mapped
// file's bytes, with small chunks and few slots so coalescing, chunking and reuse all run; bad
// ranges and arguments are refused naming them.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
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
const fs::path fixture = fs::path(STRATA_TEST_FIXTURES) / "models" / "llama4-Q4_K_M.gguf";

// nullopt-like: false when this file system has no O_DIRECT (tmpfs), said, nothing checked.
bool make_reader(std::unique_ptr<direct_reader>& r, unsigned depth, std::size_t chunk) {
  try {
    r = std::make_unique<direct_reader>(fixture, depth, chunk);
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
  const strata::gguf::file f(fixture);
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
  const strata::gguf::file f(fixture);
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
  CHECK_THROWS_WITH_AS(direct_reader(fixture, 4, 1000), doctest::Contains("multiple of 4096"), strata::error);
  CHECK_THROWS_WITH_AS(direct_reader("/nonexistent/model.gguf"), doctest::Contains("cannot open '/nonexistent/model.gguf'"),
                       strata::error);
}
