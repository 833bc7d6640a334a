// The link beside the CPU in dense layer streaming (runtime/vulkan/layer_stream.cpp,
// --stream-link): in steps that compute the streamed FFNs on the CPU, some of them are still
// copied into the ring (split over the hand-offs of the CPU's FFNs before them) and the GPU
// computes them. The fixtures have 4 blocks; three linked blocks (so the second ring slot is
// reused) need more: qwen3 grown to 8 blocks, blocks 4-7 repeating 0-3, every FFN streamed and
// blocks 1, 4 and 6 linked (slots 0, 1, 0; block 6's weights are not block 1's, so a copy that
// did not land, or landed in the wrong slot, shows in the logits). Decode steps and short prompt
// steps run that way, longer prompt steps stream every FFN; the logits stay within the fixture's
// tolerance of the all-GPU and the CPU backend's runs of the same file.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/tiers/engine_layout.hpp"
#include "support/cpu_phase_links.hpp"
#include "support/fidelity.hpp"
#include "support/fixture_options.hpp"
#include "support/fixture_placement.hpp"
#include "support/gguf_edit.hpp"
#include "support/session_logits.hpp"
#include "support/shipped_fixture.hpp"
#include "support/vulkan_here.hpp"

namespace {

// qwen3 with its 4 blocks twice over (blk.4+i holds blk.i's tensors).
std::filesystem::path eight_block_qwen3(const std::filesystem::path& from) {
  strata::test::gguf_edit e(from);
  e.set("qwen3.block_count", std::uint32_t(8));
  const std::size_t n = e.tensors.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& name = e.tensors[i].name;
    if (!name.starts_with("blk.")) continue;
    const auto dot = name.find('.', 4);
    auto copy = e.tensors[i];
    copy.name = "blk." + std::to_string(std::stoi(name.substr(4, dot - 4)) + 4) + name.substr(dot);
    e.tensors.push_back(copy);
  }
  const auto path = std::filesystem::temp_directory_path() / ("strata-link-" + std::to_string(::getpid()) + ".gguf");
  e.write(path);
  return path;
}

struct removed_file {
  std::filesystem::path path;
  ~removed_file() { std::filesystem::remove(path); }
};

}  // namespace

TEST_CASE("layer streaming: the link carries blocks 1, 4 and 6 beside the CPU's FFNs and the logits hold") {
  if (!strata::test::vulkan_here("stream link")) return;
  const auto& fixture = strata::test::shipped_fixture("qwen3-Q4_K_M");
  const removed_file file{eight_block_qwen3(fixture.path)};
  strata::test::golden_model g = fixture;
  g.path = file.path;
  const auto& run = g.runs.front();

  auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
  opt.n_batch = 8;
  const auto ref_gpu = strata::test::prompt_and_decode_logits(*strata::rt::model::load(g.path, opt), run, 8);
  auto cpu_opt = strata::test::fixture_options(strata::rt::backend_kind::cpu);
  cpu_opt.n_batch = 8;
  const auto ref_cpu = strata::test::prompt_and_decode_logits(*strata::rt::model::load(g.path, cpu_opt), run, 8);

  // Links under which the CPU wins steps of 2..6 tokens (its time = its flops): decode and the
  // prompt's short last step take the CPU phase, 8-token prompt steps stream. DRAM at 4x the
  // link: a hand-off hides a quarter of a block's copy, so block 4's copy is split over the
  // hand-offs of blocks 2 and 3 (tiers/link_schedule.hpp).
  opt.stream_layers = 8;
  const auto in = strata::test::fixture_placement(g, opt, true);
  const auto layout = strata::tiers::fixed_layout(in.demand, -1, {}, 0, 8);
  strata::tiers::link_speeds base = strata::tiers::assumed_desktop_links();
  base.handoff_s = 0;
  base.block_s = 0;
  base.host_to_gpu = 1e9;  // the fixture's FFNs are small: a slow link keeps the copies off the chain's fixed costs
  base.cpu_read = 4 * base.host_to_gpu;
  const auto [l, T] = strata::test::cpu_phase_links(in.demand, layout, base, opt.n_batch);
  REQUIRE(T >= 2);
  opt.links = l;

  // The CPU alone first (--stream-link 0), then with three blocks on the link.
  opt.stream_link = 0;
  const auto cpu_phase = strata::test::prompt_and_decode_logits(*strata::rt::model::load(g.path, opt), run, 8);
  opt.stream_link = 3;
  const auto m = strata::rt::model::load(g.path, opt);
  CHECK(m->startup_report().find("but for 3 whose") != std::string::npos);
  const auto got = strata::test::prompt_and_decode_logits(*m, run, 8);
  REQUIRE(got.size() == ref_gpu.size());
  const std::size_t V = m->hparams().n_vocab;
  const auto sg = strata::test::compare_logits(got, ref_gpu, V);
  const auto sc = strata::test::compare_logits(got, ref_cpu, V);
  const auto sp = strata::test::compare_logits(cpu_phase, ref_gpu, V);
  MESSAGE("--stream-link 3 vs all-GPU: nmse " << sg.nmse << ", vs CPU " << sc.nmse << "; --stream-link 0 vs all-GPU "
                                              << sp.nmse << " (tolerance " << g.tolerance_nmse << ")");
  CHECK(sg.nmse <= g.tolerance_nmse);
  CHECK(sc.nmse <= g.tolerance_nmse);
  CHECK(sp.nmse <= g.tolerance_nmse);
  CHECK(sg.top1_agree == sg.rows);
  CHECK(got != cpu_phase);  // the linked blocks' FFNs came from the GPU's kernels

  const auto c = m->streaming();
  const std::uint64_t prompt_steps = (run.ids.size() + 7) / 8, short_last = run.ids.size() % 8 && run.ids.size() % 8 <= T;
  CHECK(c.layers == 8);
  CHECK(c.link_layers == 3);
  CHECK(c.cpu_tokens == T);
  CHECK(c.cpu_steps == 8 + short_last);
  CHECK(c.link_bytes_per_step * 8 > 2 * c.bytes_per_step);  // three of eight blocks (ffn_down's type alternates)
  CHECK(c.link_bytes_per_step * 2 < c.bytes_per_step);
  CHECK(c.bytes_streamed == (prompt_steps - short_last) * c.bytes_per_step + c.cpu_steps * c.link_bytes_per_step);
}

TEST_CASE("layer streaming: --stream-link beyond half the streamed blocks, without streaming or without a CPU phase is refused") {
  const auto& g = strata::test::shipped_fixture("qwen3-Q4_K_M");
  auto opt = strata::test::fixture_options(strata::rt::backend_kind::cpu);
  opt.stream_link = 1;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("--stream-link 1 needs the Vulkan backend"),
                       strata::error);
  if (!strata::test::vulkan_here("stream link refusals")) return;
  opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
  opt.stream_link = 1;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("--stream-link 1: no block's dense FFN is streamed"),
                       strata::error);
  opt.stream_layers = 3;
  strata::tiers::link_speeds fast = strata::tiers::assumed_desktop_links();
  fast.host_to_gpu = 1e12;  // every step streams
  opt.links = fast;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("every step streams the FFNs through the ring"),
                       strata::error);
  strata::tiers::link_speeds slow = strata::tiers::assumed_desktop_links();
  slow.host_to_gpu = 1e6;  // the CPU computes every decode step's FFNs
  opt.links = slow;
  opt.stream_link = 2;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("at most half of the 3 streamed blocks (1)"),
                       strata::error);
}
