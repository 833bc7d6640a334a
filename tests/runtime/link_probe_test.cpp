// The link probe's host half (DRAM read, O_DIRECT reads through io_uring) and its cache file:
// round trip, missing file, malformed files refused naming the line.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "strata/core/error.hpp"
#include "strata/runtime/link_probe.hpp"

namespace fs = std::filesystem;

namespace {
fs::path temp_file(const char* name) {
  return fs::temp_directory_path() / (std::string("strata_link_probe_") + std::to_string(::getpid()) + "_" + name);
}
}  // namespace

TEST_CASE("link probe: DRAM measured, the disk measured with O_DIRECT or the reason given") {
  strata::rt::probe_options o;
  o.disk_file = fs::path(STRATA_TEST_FIXTURES) / "models" / "llama4-Q4_K_M.gguf";
  o.threads = 2;
  o.gpu = false;
  o.dram_bytes = 16ull << 20;
  o.disk_bytes = 8ull << 20;
  o.seconds_per_test = 0.2;
  const strata::tiers::link_speeds l = strata::rt::probe_links(o);
  CAPTURE(l.source);
  CHECK(l.cpu_read > 1e8);  // any machine sweeps DRAM faster than 100 MB/s
  CHECK(l.source.find("measured cpu_read(2 threads)") != std::string::npos);
  CHECK(l.source.find("assumed gpu_flops cpu_flops handoff") != std::string::npos);
  CHECK(l.source.find("host_to_gpu gpu_read side_by_side") != std::string::npos);  // gpu = false: assumed
  CHECK(l.cpu_read_beside_copies == strata::tiers::assumed_desktop_links().cpu_read_beside_copies);
  // File systems without O_DIRECT (tmpfs, some overlays) give the reason instead of numbers.
  if (l.source.find("disk not measured: ") == std::string::npos) {
    CHECK(l.source.find(" nvme_qd1 nvme_qd32;") != std::string::npos);
    CHECK(l.nvme_qd1 > 1e6);
    CHECK(l.nvme_qd32 > 1e6);
  } else {
    CHECK(l.source.find("assumed gpu_flops cpu_flops handoff nvme_qd1 nvme_qd32") != std::string::npos);
  }
  CHECK(!l.assumed());
}

TEST_CASE("link probe: a missing disk file is reported, not fatal") {
  strata::rt::probe_options o;
  o.disk_file = "/nonexistent/strata-model.gguf";
  o.gpu = false;
  o.dram_bytes = 4ull << 20;
  const auto l = strata::rt::probe_links(o);
  CHECK(l.source.find("disk not measured: cannot open '/nonexistent/strata-model.gguf' with O_DIRECT") !=
        std::string::npos);
  CHECK(l.nvme_qd32 == strata::tiers::assumed_desktop_links().nvme_qd32);
}

TEST_CASE("link probe cache: round trip, missing, malformed") {
  const fs::path f = temp_file("links.txt");
  strata::tiers::link_speeds l = strata::tiers::assumed_desktop_links();
  l.cpu_read = 12.5e9;
  l.nvme_qd1 = 1.25e9;
  l.cpu_read_beside_copies = 0.625;
  l.copies_beside_cpu_read = 0.875;
  l.source = "probe: measured cpu_read(2 threads); assumed the rest";
  strata::rt::save_cached_links(f, l);
  const auto back = strata::rt::load_cached_links(f);
  REQUIRE(back);
  CHECK(back->cpu_read == l.cpu_read);
  CHECK(back->nvme_qd1 == l.nvme_qd1);
  CHECK(back->gpu_read == l.gpu_read);
  CHECK(back->handoff_s == l.handoff_s);
  CHECK(back->block_s == l.block_s);
  CHECK(back->cpu_read_beside_copies == l.cpu_read_beside_copies);
  CHECK(back->copies_beside_cpu_read == l.copies_beside_cpu_read);
  CHECK(back->source.find("probe cache " + f.string()) == 0);
  CHECK(back->source.find(l.source) != std::string::npos);
  fs::remove(f);
  CHECK(!strata::rt::load_cached_links(f));

  const auto write = [&](const std::string& text) { std::ofstream(f) << text; };
  write("something else\n");
  CHECK_THROWS_WITH_AS(strata::rt::load_cached_links(f), doctest::Contains("line 1"), strata::error);
  write("strata-link-probe 3\ncpu_read fast\n");
  CHECK_THROWS_WITH_AS(strata::rt::load_cached_links(f), doctest::Contains("line 2: 'cpu_read fast'"), strata::error);
  write("strata-link-probe 3\ncpu_read 1e9\ncpu_read_beside_copies 1.5\n");
  CHECK_THROWS_WITH_AS(strata::rt::load_cached_links(f),
                       doctest::Contains("line 3: 'cpu_read_beside_copies 1.5' is not '<share> <number in (0, 1]>'"),
                       strata::error);
  write("strata-link-probe 3\ncpu_read 1e9\nsource x\n");
  CHECK_THROWS_WITH_AS(strata::rt::load_cached_links(f), doctest::Contains("incomplete"), strata::error);
  write("strata-link-probe 1\ngpu_read 3.146e+11\n");  // the old probe's GPU copies: ignored, not used
  CHECK(!strata::rt::load_cached_links(f));
  write("strata-link-probe 2\ngpu_read 3.1e+12\n");  // no side-by-side shares: probed again
  CHECK(!strata::rt::load_cached_links(f));
  fs::remove(f);
}
