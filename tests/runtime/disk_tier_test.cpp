// The disk tier in the engine (issue 14 item 5): CPU blocks beyond --ram-budget, or sent there by
// -ot REGEX=disk, are read from the model file every step through the ring and give the
// all-resident logits: bit for bit where the same kernels run (F32: no packed layout), within
// the fixture's tolerance of the resident run and of llama.cpp where the resident blocks use the
// packed gemm. Counters, the startup report and the refusals are checked too.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "strata/arch/all.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/runtime/placement.hpp"
#include "support/fidelity.hpp"
#include "support/shipped_fixture.hpp"
#include "support/fixture_placement.hpp"
#include "support/session_logits.hpp"

namespace fs = std::filesystem;
using strata::test::golden_model;
using strata::test::shipped_fixture;

namespace {


strata::rt::engine_options cpu_options(std::uint32_t n_batch) {
  strata::rt::engine_options opt;
  opt.backend = strata::rt::backend_kind::cpu;
  opt.threads = 2;
  opt.n_ctx = 512;
  opt.n_batch = n_batch;
  return opt;
}

bool direct_io_at(const fs::path& p) {
  struct statfs s {};
  return statfs(p.parent_path().c_str(), &s) == 0 && s.f_type != 0x01021994;  // TMPFS_MAGIC
}

// What the CPU side holds in RAM with every block resident (the budget the disk tier weighs).
std::uint64_t resident_ram(const golden_model& g, const strata::rt::engine_options& opt) {
  const auto in = strata::test::fixture_placement(g, opt, false);
  const auto l = strata::tiers::layer_split_layout(in.demand, 0);
  return strata::tiers::layout_plan(in.demand, l, in.plan.links, ~0ull >> 2, opt.n_batch).ram_total();
}

// Loads g with opt (which makes blocks disk-backed), checks the blocks, report and counters, and
// returns the logits of the first run's prompt (in steps of n_batch) and 6 decode steps.
std::vector<float> disk_logits(const golden_model& g, const strata::rt::engine_options& opt,
                               const std::vector<std::uint32_t>& blocks) {
  const auto m = strata::rt::model::load(g.path, opt);
  CHECK(m->disk_layers() == blocks);
  const std::string report = m->startup_report();
  CAPTURE(report);
  CHECK(report.find("disk tier: ") != std::string::npos);
  CHECK(report.find(g.path.string()) != std::string::npos);
  const auto& run = g.runs.front();
  const auto got = strata::test::prompt_and_decode_logits(*m, run, 6);
  const auto c = m->disk_tier();
  const std::uint64_t steps = (run.ids.size() + opt.n_batch - 1) / opt.n_batch + 6;
  CHECK(c.blocks == blocks.size());
  CHECK(c.slots == std::min<std::size_t>(2, blocks.size()));
  CHECK(c.steps == steps);
  CHECK(c.tokens == run.ids.size() + 6);
  CHECK(c.block_reads >= steps * blocks.size());
  CHECK(c.block_reads <= steps * blocks.size() + c.slots);  // the ring reads at most its slots ahead
  CHECK(c.bytes_read >= steps * c.bytes_per_step);
  CHECK(c.read_seconds > 0);
  return got;
}

}  // namespace

TEST_CASE("disk tier: a --ram-budget short of the model streams the last blocks and gives the resident logits") {
  for (const char* name : {"llama-F32", "qwen3-Q4_K_M", "qwen3moe-Q4_K_M"}) {
    const golden_model& g = shipped_fixture(name);
    CAPTURE(g.name);
    if (!direct_io_at(g.path)) {
      MESSAGE("the fixtures' file system has no O_DIRECT: disk tier not checked");
      return;
    }
    auto opt = cpu_options(5);  // several prompt steps
    const auto& run = g.runs.front();
    const auto ref = strata::test::prompt_and_decode_logits(*strata::rt::model::load(g.path, opt), run, 6);
    // One byte short of everything resident: with a 2-slot ring, 3 of the 4 blocks must stream.
    opt.ram_budget = resident_ram(g, opt) - 1;
    const auto got = disk_logits(g, opt, {1, 2, 3});
    REQUIRE(got.size() == ref.size());
    const std::size_t V = ref.size() / (run.ids.size() + 6);
    const auto st = strata::test::compare_logits(got, ref, V);
    const auto llama = strata::test::read_f32(run.logits);
    const auto sl = strata::test::compare_logits(std::span(got).first(llama.size()), llama, V);
    MESSAGE(g.name << " disk vs resident: nmse " << st.nmse << ", max_abs " << st.max_abs << "; prompt vs llama.cpp nmse "
                   << sl.nmse << " (tolerance " << g.tolerance_nmse << ")");
    if (g.name == "llama-F32") CHECK(got == ref);  // F32 has no packed layout: the same row kernels ran
    CHECK(st.nmse <= g.tolerance_nmse);
    CHECK(sl.nmse <= g.tolerance_nmse);
  }
}

TEST_CASE("disk tier: -ot REGEX=disk streams the matching tensors of CPU blocks, bit for bit on the row kernels") {
  const golden_model& g = shipped_fixture("llama-F32");
  if (!direct_io_at(g.path)) {
    MESSAGE("the fixtures' file system has no O_DIRECT: disk tier not checked");
    return;
  }
  auto opt = cpu_options(256);  // the whole prompt in one step
  const auto& run = g.runs.front();
  const auto ref = strata::test::prompt_and_decode_logits(*strata::rt::model::load(g.path, opt), run, 6);
  opt.override_tensor = {R"(blk\.[02]\.ffn_=disk,blk\.3\.attn=disk)"};
  CHECK(disk_logits(g, opt, {0, 2, 3}) == ref);
}

TEST_CASE("disk tier: refusals name the budget, the rule and tensor, or the file") {
  const golden_model& g = shipped_fixture("qwen3-Q4_K_M");
  auto opt = cpu_options(16);
  opt.ram_budget = 1 << 20;  // below the KV cache alone
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("--ram-budget 1.00 MiB does not hold"),
                       strata::error);
  opt.ram_budget = 0;
  opt.override_tensor = {"token_embd=disk"};
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt),
                       doctest::Contains("override 'token_embd=disk' matches 'token_embd.weight'"), strata::error);
  // A file system without O_DIRECT (tmpfs before Linux 6.6): a clear refusal at load, never a
  // silent page-cache fallback.
  const fs::path shm = "/dev/shm/strata_disk_tier_test.gguf";
  if (fs::is_directory(shm.parent_path()) && !direct_io_at(shm)) {
    fs::copy_file(g.path, shm, fs::copy_options::overwrite_existing);
    opt.override_tensor = {R"(blk\.1\.=disk)"};
    const int fd = ::open(shm.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) {
      const std::string want = "cannot open '" + shm.string() + "' with O_DIRECT";
      CHECK_THROWS_WITH_AS(strata::rt::model::load(shm, opt), doctest::Contains(want.c_str()), strata::error);
    } else {
      ::close(fd);
      MESSAGE("this kernel's tmpfs has O_DIRECT: it loads like a drive");
      CHECK(strata::rt::model::load(shm, opt)->disk_layers() == std::vector<std::uint32_t>{1});
    }
    fs::remove(shm);
  } else {
    MESSAGE("no tmpfs at /dev/shm: the O_DIRECT refusal not checked here");
  }
  // A truncated file: the GGUF reader names the file, the tensor and its offset before any read.
  const fs::path cut = fs::current_path() / "disk_tier_truncated.gguf";
  fs::copy_file(g.path, cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, fs::file_size(cut) - 4096);
  const std::string want = cut.string() + ": truncated or corrupt: tensor";
  CHECK_THROWS_WITH_AS(strata::rt::model::load(cut, opt), doctest::Contains(want.c_str()), strata::error);
  fs::remove(cut);
}
