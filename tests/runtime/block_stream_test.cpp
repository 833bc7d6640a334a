// The disk tier's ring (runtime/tiers/block_stream.hpp): every streamed tensor's address holds
// the file's bytes while its block runs, over several passes of an odd number of blocks on two
// slots (block i lives in slot i % 2, so a pass ends and the next begins on slot 0), after a
// pass cut short, and the counters add up. A file truncated under
// the reader gives an error naming the file and offset on the compute thread; a file system
// without O_DIRECT (tmpfs before Linux 6.6) is refused naming the file.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../../runtime/tiers/block_stream.hpp"
#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "support/fixtures.hpp"

namespace fs = std::filesystem;
using strata::tiers::block_stream;
using strata::tiers::streamed_tensor;

namespace {
const fs::path fixture = fs::path(STRATA_TEST_FIXTURES) / "models" / "llama-Q4_K_M.gguf";

// The tensors of blocks [0, n) of the fixture.
std::vector<streamed_tensor> block_tensors(const strata::gguf::reader& r, std::uint32_t n) {
  std::vector<streamed_tensor> out;
  for (const auto& t : r.tensors())
    for (std::uint32_t il = 0; il < n; ++il)
      if (t.name.starts_with("blk." + std::to_string(il) + ".")) out.push_back({std::string(t.name), il, t.file_offset, t.nbytes});
  return out;
}

// A copy of the fixture next to the test binary (same file system as the build tree).
struct temp_copy {
  fs::path path;
  explicit temp_copy(const fs::path& dir, const std::string& name) : path(dir / name) {
    fs::copy_file(fixture, path, fs::copy_options::overwrite_existing);
  }
  ~temp_copy() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

bool has_direct_io(const fs::path& dir) {
  struct statfs s {};
  return statfs(dir.c_str(), &s) == 0 && s.f_type != 0x01021994;  // TMPFS_MAGIC
}

// Runs block il as the decoder would and checks every tensor of it against the file's bytes.
void run_block(block_stream& bs, const strata::gguf::reader& r, const std::vector<streamed_tensor>& ts, std::uint32_t il) {
  bs.begin_block(il);
  for (const auto& t : ts) {
    if (t.block != il) continue;
    CAPTURE(t.name);
    const strata::gguf::tensor_info* info = r.find_tensor(t.name);
    REQUIRE(info);
    const std::byte* at = bs.place(*info);
    REQUIRE(at);
    REQUIRE(std::memcmp(at, info->data.data(), t.bytes) == 0);
  }
  bs.end_block(il);
}
}  // namespace

TEST_CASE("block stream: tensors hold the file's bytes over passes that wrap an odd ring, and the counters add up") {
  if (!has_direct_io(fs::current_path())) {
    MESSAGE("the build directory's file system has no O_DIRECT: block stream not checked");
    return;
  }
  const strata::gguf::file f(fixture);
  const auto ts = block_tensors(f.gguf(), 3);
  REQUIRE(ts.size() > 6);
  // Small chunks and depth: several chunks per span, the reader's queue refills.
  block_stream bs(fixture, ts, 2, 3, 16384);
  CHECK(bs.blocks() == std::vector<std::uint32_t>{0, 1, 2});
  const auto s0 = bs.stats();
  CHECK(s0.blocks == 3);
  CHECK(s0.slots == 2);
  std::uint64_t tensor_bytes = 0;
  for (const auto& t : ts) tensor_bytes += t.bytes;
  CHECK(s0.bytes_per_step >= tensor_bytes);
  CHECK(s0.bytes_per_step <= tensor_bytes + 3 * 2 * 4096 + 3 * (64 << 10));
  // A resident tensor (the embedding) is not placed; neither is a block outside the stream.
  CHECK(bs.place(*f->find_tensor("token_embd.weight")) == nullptr);
  CHECK(bs.place(*f->find_tensor("blk.3.attn_q.weight")) == nullptr);
  bs.begin_block(3);  // resident blocks pass through
  bs.end_block(3);

  const int passes = 5;
  for (int p = 0; p < passes; ++p) {
    bs.begin_step(2);
    for (std::uint32_t il = 0; il < 4; ++il) run_block(bs, f.gguf(), ts, il);
  }
  // A pass cut short after block 1 began (an error in the step): the next pass starts at block 0.
  bs.begin_block(0);
  bs.end_block(0);
  bs.begin_block(1);
  for (std::uint32_t il = 0; il < 3; ++il) run_block(bs, f.gguf(), ts, il);

  const auto s = bs.stats();
  CHECK(s.steps == passes);
  CHECK(s.tokens == 2 * passes);
  const std::uint64_t used = 3 * passes + 3 + 3;  // items the compute thread consumed (the cut pass too)
  CHECK(s.block_reads >= used);
  CHECK(s.block_reads <= used + 2);  // at most the ring ahead
  CHECK(s.bytes_read >= used / 3 * s.bytes_per_step);  // each block read used / 3 times at least
  CHECK(s.read_seconds > 0);
  CHECK(s.read_gbps() > 0);
}

TEST_CASE("block stream: a file truncated under the reader gives an error naming the file and offset") {
  const fs::path dir = fs::current_path();
  if (!has_direct_io(dir)) {
    MESSAGE("the build directory's file system has no O_DIRECT: truncation not checked");
    return;
  }
  const strata::gguf::file f(fixture);
  const auto ts = block_tensors(f.gguf(), 3);
  temp_copy copy(dir, "block_stream_truncated.gguf");
  std::uint64_t block2 = ~0ull;
  for (const auto& t : ts)
    if (t.block == 2) block2 = std::min(block2, t.file_offset);
  block_stream bs(copy.path, ts, 2);
  bs.begin_block(0);  // blocks 0 and 1 are read; block 2 waits for slot 0
  while (bs.stats().block_reads < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  fs::resize_file(copy.path, block2 + 5000);
  bs.end_block(0);
  bs.begin_block(1);
  bs.end_block(1);
  try {
    bs.begin_block(2);
    FAIL("a truncated file was read without an error");
  } catch (const strata::error& e) {
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(msg.find("block 2") != std::string::npos);
    CHECK(msg.find(copy.path.string()) != std::string::npos);
    CHECK(msg.find("short read") != std::string::npos);
    CHECK(msg.find("at offset ") != std::string::npos);
  }
  // The stream stays failed: later blocks give the same error instead of stale bytes.
  CHECK_THROWS_WITH_AS(bs.begin_block(0), doctest::Contains("short read"), strata::error);
}

TEST_CASE("block stream: tmpfs is refused naming the file where it has no O_DIRECT, else read like a drive") {
  const fs::path shm = "/dev/shm";
  if (!fs::is_directory(shm) || has_direct_io(shm)) {
    MESSAGE("no tmpfs at /dev/shm: not checked");
    return;
  }
  const strata::gguf::file f(fixture);
  temp_copy copy(shm, "strata_block_stream_tmpfs.gguf");
  const auto ts = block_tensors(f.gguf(), 2);
  // Linux 6.6 gave tmpfs O_DIRECT; older kernels refuse it with EINVAL.
  const int fd = ::open(copy.path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) {
    const std::string want = "cannot open '" + copy.path.string() + "' with O_DIRECT";
    CHECK_THROWS_WITH_AS(block_stream(copy.path, ts, 2), doctest::Contains(want.c_str()), strata::error);
    CHECK_THROWS_WITH_AS(block_stream(copy.path, ts, 2), doctest::Contains("no direct I/O"), strata::error);
    return;
  }
  ::close(fd);
  MESSAGE("this kernel's tmpfs has O_DIRECT: the stream reads it like a drive");
  block_stream bs(copy.path, ts, 2);
  for (int p = 0; p < 2; ++p)
    for (std::uint32_t il = 0; il < 2; ++il) run_block(bs, f.gguf(), ts, il);
}

TEST_CASE("block stream: destroyed with reads queued or in flight, it drains them and stops") {
  if (!has_direct_io(fs::current_path())) {
    MESSAGE("the build directory's file system has no O_DIRECT: not checked");
    return;
  }
  const strata::gguf::file f(fixture);
  const auto ts = block_tensors(f.gguf(), 3);
  for (int i = 0; i < 20; ++i) {
    block_stream bs(fixture, ts, 2, 2, 4096);  // many small chunks: reads are in flight at the end
    if (i % 2) {
      run_block(bs, f.gguf(), ts, 0);  // frees slot 0: block 2 is queued behind block 1
      bs.begin_block(1);
    }
  }
}
