// The two ways a Vulkan step with hand-offs is submitted (runtime/vulkan/handoff_submit.cpp):
// every part at once on a timeline semaphore (the host signals after each CPU part and spins on
// the GPU's values), the step in one submit with the GPU and the host meeting at flag words
// (STRATA_VK_HANDOFF_POLL=1), or a submit and fence wait per part (STRATA_VK_HANDOFF_FENCE=1); with the
// CPU workers kept hot through a step or not, the host spinning on the counter or not, the
// experts in one pool job or a job per stage, and the result buffers host-cached or not. The
// same kernels read the same bytes in the same order whichever way, so the logits of a prompt
// in several steps and of 8 decode steps are the same bits, for routed experts on the CPU
// (qwen3moe --cpu-moe: 4 hand-offs a step; llama4 --n-cpu-moe with a CPU stage after the GPU's)
// and for streamed dense FFNs computed on the CPU (qwen3: 3 a step).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "strata/tiers/links.hpp"
#include "support/fidelity.hpp"
#include "support/sanitized_build.hpp"
#include "support/shipped_fixture.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/vulkan_here.hpp"

namespace {

using strata::test::golden_model;
using strata::test::shipped_fixture;
using strata::test::scoped_env;

struct path {
  const char* name;
  bool timeline_on_lavapipe;  // a timeline path the flag-word paths' fallback runs on lavapipe too
  const char* fence;  // STRATA_VK_HANDOFF_FENCE
  const char* hot;    // STRATA_VK_HANDOFF_HOT
  const char* spin;   // STRATA_VK_HANDOFF_SPIN_US
  const char* fuse;   // STRATA_VK_HANDOFF_FUSE (0: the experts' pool job per stage)
  const char* wc;     // STRATA_VK_HANDOFF_WC (1: result buffers of the first host-visible type)
  const char* poll;   // STRATA_VK_HANDOFF_POLL (1: one submit, GPU and host meeting at flag words)
  const char* says;   // in the backend's description
};
constexpr path paths[] = {
    {"fence, workers sleeping, a job per stage (the old hand-off)", false, "1", "0", "0", "0", "1", "0",
     "a submit and fence wait per part"},
    {"timeline, workers sleeping, no spin", true, "0", "0", "0", "1", "0", "0", "parts pre-submitted on a timeline semaphore"},
    {"timeline, workers hot, host spinning", true, "0", "1", "200", "1", "0", "0",
     "parts pre-submitted on a timeline semaphore, CPU workers kept hot"},
    {"fence, workers hot", false, "1", "1", "0", "1", "0", "0", "a submit and fence wait per part, CPU workers kept hot"},
    // Flag words where the backend's probe passes (a real GPU); lavapipe's shader loops end early,
    // so there the probe fails and the step goes on the timeline.
    {"flag words or their fallback, workers sleeping", false, "0", "0", "0", "1", "0", "1",
     "one submit, GPU and host meeting at flag words|parts pre-submitted on a timeline semaphore"},
    {"flag words or their fallback, workers hot, host spinning", false, "0", "1", "200", "1", "0", "1",
     "one submit, GPU and host meeting at flag words, CPU workers kept hot|parts pre-submitted on a timeline semaphore, "
     "CPU workers kept hot"},
};

// Whether the description names one of the '|'-separated ways.
bool says_one_of(const std::string& d, std::string_view ways) {
  for (std::size_t at = 0;;) {
    const std::size_t bar = ways.find('|', at);
    if (d.find("; hand-offs: " + std::string(ways.substr(at, bar - at))) != std::string::npos) return true;
    if (bar == std::string_view::npos) return false;
    at = bar + 1;
  }
}

// Logits of the first run's prompt (steps of opt.n_batch tokens) and 8 decode steps, per path;
// every path's must equal the fence path's bit for bit. Under the sanitizers on lavapipe the two
// timeline paths are left out: the flag-word paths fall back to them there (the same switches for
// hot workers, spinning and one pool job), after the probe, so their host side still runs.
void check_paths(const golden_model& g, const strata::rt::engine_options& opt, std::string_view layout) {
  CAPTURE(g.name);
  const auto& run = g.runs.front();
  const bool lavapipe = strata::rt::vulkan_devices().front().find("llvmpipe") != std::string::npos;
  std::vector<float> ref;
  for (const path& p : paths) {
    if (strata::test::sanitized_build() && lavapipe && p.timeline_on_lavapipe) continue;
    CAPTURE(p.name);
    const scoped_env fence("STRATA_VK_HANDOFF_FENCE", p.fence), hot("STRATA_VK_HANDOFF_HOT", p.hot),
        spin("STRATA_VK_HANDOFF_SPIN_US", p.spin), fuse("STRATA_VK_HANDOFF_FUSE", p.fuse), wc("STRATA_VK_HANDOFF_WC", p.wc),
        poll("STRATA_VK_HANDOFF_POLL", p.poll);
    const auto m = strata::rt::model::load(g.path, opt);
    const std::string d = m->backend_description();
    CHECK(d.find(layout) != std::string::npos);
    CHECK(says_one_of(d, p.says));
    if (lavapipe && *p.poll == '1')
      CHECK(d.find("flag words") == std::string::npos);  // the probe keeps lavapipe on the timeline
    const auto got = strata::test::prompt_and_decode_logits(*m, run, 8);
    if (ref.empty()) {
      ref = got;
      continue;
    }
    REQUIRE(got.size() == ref.size());
    CHECK(got == ref);
  }
}

strata::rt::engine_options options(std::uint32_t n_batch) {
  strata::rt::engine_options opt;
  opt.backend = strata::rt::backend_kind::vulkan;
  opt.threads = 2;
  opt.n_ctx = 512;  // the fixtures were produced with n_ctx 512
  opt.n_batch = n_batch;
  opt.stream_experts = false;  // every step hands its experts to the CPU
  return opt;
}

}  // namespace

TEST_CASE("hand-off submission: qwen3moe --cpu-moe gives the same logits on the timeline and fence paths") {
  if (!strata::test::vulkan_here("hand-off submission checks")) return;
  auto opt = options(5);  // prompt steps of 5 tokens, a short last one, then 1-token steps
  opt.cpu_moe = true;
  check_paths(shipped_fixture("qwen3moe-Q4_K_M"), opt, "routed experts of 4 MoE layers on the CPU");
}

TEST_CASE("hand-off submission: llama4 -ngl 3 --n-cpu-moe 2 (weighted input, a CPU stage after) gives the same logits on every path") {
  if (!strata::test::vulkan_here("hand-off submission checks")) return;
  auto opt = options(256);
  opt.n_gpu_layers = 3;
  opt.n_cpu_moe = 2;
  check_paths(shipped_fixture("llama4-Q4_K_M"), opt, "routed experts of 1 MoE layers on the CPU");
}

TEST_CASE("hand-off submission: streamed dense FFNs computed on the CPU (qwen3) give the same logits on every path") {
  if (!strata::test::vulkan_here("hand-off submission checks")) return;
  auto opt = options(8);
  opt.stream_layers = 3;
  // A link slower than any CPU: every step (prompt and decode) computes the streamed FFNs on the
  // CPU, three hand-offs a step.
  strata::tiers::link_speeds l = strata::tiers::assumed_desktop_links();
  l.host_to_gpu = 1e3;
  l.handoff_s = 0;
  l.source = "test: a link slower than the CPU";
  opt.links = l;
  check_paths(shipped_fixture("qwen3-Q4_K_M"), opt, "computed on the CPU");
  const auto m = strata::rt::model::load(shipped_fixture("qwen3-Q4_K_M").path, opt);
  strata::test::prompt_and_decode_logits(*m, shipped_fixture("qwen3-Q4_K_M").runs.front(), 2);
  CHECK(m->streaming().cpu_steps == m->streaming().steps);
}

// A plain step (no hand-offs): the host polls its fence before vkWaitForFences sleeps
// (STRATA_VK_STEP_SPIN_US; on by default on real GPUs, off on a CPU device). The poll only
// changes when the host sees the step end, never what the step computed.
TEST_CASE("step submission: polling a plain step's fence gives the same logits as the driver's wait, and a bad poll time is refused") {
  if (!strata::test::vulkan_here("step fence poll")) return;
  const auto& g = shipped_fixture("qwen3-Q4_K_M");
  auto opt = options(512);
  std::vector<float> ref;
  // 1 s: lavapipe's steps take ~20 ms here, and the spinning host slows them further.
  for (const char* spin : {"0", "1000000"}) {
    CAPTURE(spin);
    const scoped_env s("STRATA_VK_STEP_SPIN_US", spin);
    const auto m = strata::rt::model::load(g.path, opt);
    const auto got = strata::test::prompt_and_decode_logits(*m, g.runs.front(), 4);
    // The poll ran: it sees the steps end (a step taking longer than the poll would not be
    // counted); without it, none is.
    if (*spin == '0') CHECK(m->handoffs().polled_steps == 0);
    else CHECK(m->handoffs().polled_steps > 0);
    if (ref.empty()) ref = got;
    REQUIRE(got.size() == ref.size());
    CHECK(got == ref);
  }
  const scoped_env bad("STRATA_VK_STEP_SPIN_US", "20ms");
  CHECK_THROWS_WITH(strata::rt::model::load(g.path, opt),
                    doctest::Contains("STRATA_VK_STEP_SPIN_US='20ms' must be microseconds from 0 (no poll) to 1000000"));
}
