// The expert cache's lookup form (runtime/vulkan/expert_cache_lookup.cpp, the default): the
// expert kernels map each routed expert through the block's slot map on the GPU and read a
// missed one from the block's host copy, so no step splits at a cached block. The kernels and
// their math are those of the all-GPU run, so the logits with --expert-cache equal the all-GPU
// logits bit for bit (qwen3moe: top-2 of 8 experts in every block; llama4: top-1 of 4, experts
// weighting the input), whatever the slots hold. The counters must show both sources used:
// hits, misses read over the link, admissions that evict, and no block on the CPU.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"
#include "support/fixture_options.hpp"
#include "support/sanitized_build.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"
#include "support/shipped_fixture.hpp"
#include "support/vulkan_here.hpp"

namespace {
std::vector<float> run_all(strata::rt::model& m, const strata::test::golden_model& g) {
  std::vector<float> logits;
  for (const auto& run : g.runs) {
    const auto l = strata::test::prompt_and_decode_logits(m, run, 12);
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}
}  // namespace

TEST_CASE("expert cache: the lookup form gives the all-GPU logits bit for bit and reads misses from host memory") {
  if (!strata::test::vulkan_here("expert cache lookup")) return;
  struct cached_case {
    const char* model;
    std::uint32_t slots, n_batch;
  };
  for (const cached_case& c : {cached_case{"qwen3moe-Q4_K_M", 4, 2}, cached_case{"llama4-Q4_K_M", 2, 2}, cached_case{"qwen3moe-Q4_K_M", 3, 64}}) {
    CAPTURE(c.model);
    CAPTURE(c.n_batch);
    const auto& g = strata::test::shipped_fixture(c.model);
    auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
    opt.n_batch = c.n_batch;
    const auto all_gpu = run_all(*strata::rt::model::load(g.path, opt), g);
    opt.expert_cache = c.slots;
    opt.expert_cpu_misses = false;  // llama4's top-1 misses would go to the CPU by the planner's choice
    // A small upload budget and no margin: admissions happen (and evict) within the short fixture runs.
    const strata::test::scoped_env margin("STRATA_VK_CACHE_MARGIN", "0");
    auto m = strata::rt::model::load(g.path, opt);
    const auto cached = run_all(*m, g);
    const auto st = m->expert_cache();
    MESSAGE(std::string(c.model) << " --expert-cache " << c.slots << " -b " << c.n_batch << ": hit rate " << st.hit_rate() << " ("
                    << st.hits << "/" << st.hits + st.misses << "), lookup block-steps " << st.lookup_blocks << ", "
                    << st.host_read_bytes << " bytes read from host memory, " << st.bytes_uploaded << " uploaded, evictions "
                    << st.evictions);
    if (c.n_batch == 2) CHECK(cached == all_gpu);  // prompt steps of more tokens take other GEMM forms than the all-GPU run's
    else CHECK(cached.size() == all_gpu.size());
    CHECK(st.lookup_blocks > 0);
    CHECK(st.lookup_blocks == st.gpu_blocks);
    CHECK(st.cpu_blocks == 0);
    CHECK(st.hits > 0);
    CHECK(st.misses > 0);
    CHECK(st.host_read_bytes > 0);
    CHECK(st.evictions > 0);
    CHECK(st.bytes_uploaded > 0);
    CHECK(m->startup_report().find("mapped to slots by the expert kernels") != std::string::npos);
  }
}

// Prompt steps' staging (runtime/vulkan/expert_cache_stage.cpp): a step of more than
// STRATA_VK_CACHE_STAGE_TOKENS tokens copies each cached block's experts whole into the staging
// pair and the lookup kernels read a miss there. The bytes are the host copy's, so the logits are
// the unstaged lookup form's bit for bit; staged steps' misses cross no link in a kernel. (The
// fixtures' experts are small: the planner would not choose it; STRATA_VK_CACHE_STAGE=1 forces it.)
TEST_CASE("expert cache: prompt steps staging the cached experts on the GPU give the lookup form's logits bit for bit") {
  if (!strata::test::vulkan_here("expert cache staging")) return;
  for (const char* model : {"qwen3moe-Q4_K_M", "llama4-Q4_K_M"}) {
    CAPTURE(model);
    const auto& g = strata::test::shipped_fixture(model);
    auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
    opt.n_batch = 64;
    opt.expert_cache = 2;
    opt.expert_cpu_misses = false;
    const strata::test::scoped_env margin("STRATA_VK_CACHE_MARGIN", "0");
    const strata::test::scoped_env tokens("STRATA_VK_CACHE_STAGE_TOKENS", "4");
    std::vector<float> plain, staged;
    strata::rt::model::expert_cache_counters sp, ss;
    {
      const strata::test::scoped_env off("STRATA_VK_CACHE_STAGE", "0");
      auto m = strata::rt::model::load(g.path, opt);
      plain = run_all(*m, g);
      sp = m->expert_cache();
      CHECK(sp.stage_bytes == 0);
      CHECK(m->startup_report().find("staging pair") == std::string::npos);
    }
    {
      const strata::test::scoped_env on("STRATA_VK_CACHE_STAGE", "1");
      auto m = strata::rt::model::load(g.path, opt);
      staged = run_all(*m, g);
      ss = m->expert_cache();
      CHECK(m->startup_report().find("prompt steps of more than 4 tokens copying each cached layer's experts whole") != std::string::npos);
    }
    MESSAGE(std::string(model) << ": staged block-steps " << ss.staged_blocks << " (" << ss.staged_bytes << " bytes copied), host reads "
                  << ss.host_read_bytes << " against " << sp.host_read_bytes << " unstaged; staging " << ss.stage_bytes << " bytes");
    CHECK(staged == plain);
    CHECK(ss.stage_bytes > 0);
    CHECK(ss.staged_blocks > 0);
    CHECK(ss.staged_blocks % ss.layers == 0);  // a staged step copies every cached block
    CHECK(ss.staged_bytes > 0);
    CHECK(ss.host_read_bytes < sp.host_read_bytes);  // the prompt steps' misses read the staging pair
    CHECK(ss.hits + ss.misses == sp.hits + sp.misses);
  }
}

// Staging beside the misses hand-off: with hand-off steps raised to 64 tokens, a step that hands a
// block to the host never stages it (the host may send it to the CPU after the router); grouped
// steps (more than two pairs an expert) keep the plain lookup form and stage. Within tolerance of
// the all-GPU logits over prompts and decodes.
TEST_CASE("expert cache: staging and the misses hand-off in one run keep the all-GPU logits within tolerance") {
  if (!strata::test::vulkan_here("expert cache staging with CPU misses")) return;
  const auto& g = strata::test::shipped_fixture("llama4-Q4_K_M");
  auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
  opt.n_batch = 64;
  const auto all_gpu = run_all(*strata::rt::model::load(g.path, opt), g);
  opt.expert_cache = 2;
  opt.expert_cpu_misses = true;
  const strata::test::scoped_env margin("STRATA_VK_CACHE_MARGIN", "0");
  const strata::test::scoped_env miss_tokens("STRATA_VK_CACHE_CPU_MISS_TOKENS", "64");
  const strata::test::scoped_env stage("STRATA_VK_CACHE_STAGE", "1");
  const strata::test::scoped_env stage_tokens("STRATA_VK_CACHE_STAGE_TOKENS", "0");
  auto m = strata::rt::model::load(g.path, opt);
  const auto got = run_all(*m, g);
  const auto st = m->expert_cache();
  MESSAGE("llama4 staging + CPU misses: staged block-steps " << st.staged_blocks << ", CPU block-steps " << st.miss_cpu_blocks
                                                             << ", lookup block-steps " << st.lookup_blocks);
  REQUIRE(got.size() == all_gpu.size());
  CHECK(strata::test::compare_logits(got, all_gpu, m->hparams().n_vocab).nmse <= g.tolerance_nmse);
  CHECK(st.staged_blocks > 0);
  CHECK(st.miss_cpu_blocks > 0);
  CHECK(st.staged_blocks < st.lookup_blocks);  // the hand-off steps did not stage
}

TEST_CASE("expert cache: STRATA_VK_CACHE_LOOKUP=0 keeps the split form, which uploads every miss") {
  if (!strata::test::vulkan_here("expert cache split form")) return;
  const strata::test::scoped_env off("STRATA_VK_CACHE_LOOKUP", "0");
  const auto& g = strata::test::shipped_fixture("qwen3moe-Q4_K_M");
  auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
  opt.n_batch = 2;
  opt.expert_cache = 4;
  opt.expert_cpu_misses = false;
  auto m = strata::rt::model::load(g.path, opt);
  run_all(*m, g);
  const auto st = m->expert_cache();
  CHECK(st.lookup_blocks == 0);
  CHECK(st.host_read_bytes == 0);
  CHECK(st.gpu_blocks > 0);
  CHECK(st.misses > 0);
  CHECK(st.bytes_uploaded > 0);
  CHECK(m->startup_report().find("mapped to slots by the expert kernels") == std::string::npos);
}

// STRATA_VK_CACHE_CPU_MISSES: steps of up to 8 tokens hand each cached block to the host after
// its router (runtime/vulkan/expert_cache_misses.cpp), which computes a block-step whose misses
// are at least the share on the CPU (the kernels skip its pairs) and lets the GPU's kernels run
// the others from the slots; admissions stay the lookup form's. With STRATA_VK_CACHE_LOOKUP=0 the
// split form does it instead (expert_cache.cpp: a submit and fence wait a block, misses below the
// share uploaded, admissions beside the step). The CPU's experts are the CPU backend's kernels,
// so the logits follow the all-GPU run within the fixture's tolerance (not bit for bit), and
// every path must run: block-steps on the CPU for their misses, GPU block-steps from the slots
// once admissions filled them, and (prompt steps of more than 8 tokens) lookup block-steps.
// Under the sanitizers (strata::test::sanitized_build) only the variants marked asan run: the
// hand-offs with 2-token prompt steps (llama4) and with lookup prompt steps reading misses over the
// link (qwen3moe -b 64), and the split form (llama4); qwen3moe's two -b 2 variants, most of the
// case's time, are the release pass's (the prefetch case records the split form's 2-token steps).
TEST_CASE("expert cache: STRATA_VK_CACHE_CPU_MISSES computes missed experts on the CPU, in the lookup form's hand-offs or split") {
  if (!strata::test::vulkan_here("expert cache CPU misses")) return;
  struct cpu_case {
    const char* model;
    std::uint32_t n_batch;
    bool split, asan;
  };
  std::map<std::pair<std::string, std::uint32_t>, std::vector<float>> all_gpu_of;  // the all-GPU run of each model and step size, once
  for (const cpu_case& c : {cpu_case{"qwen3moe-Q4_K_M", 2, false, false}, cpu_case{"llama4-Q4_K_M", 2, false, true},
                            cpu_case{"qwen3moe-Q4_K_M", 64, false, true}, cpu_case{"qwen3moe-Q4_K_M", 2, true, false},
                            cpu_case{"llama4-Q4_K_M", 64, true, true}}) {
    if (strata::test::sanitized_build() && !c.asan) continue;
    CAPTURE(c.model);
    CAPTURE(c.n_batch);
    CAPTURE(c.split);
    const auto& g = strata::test::shipped_fixture(c.model);
    auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
    opt.n_batch = c.n_batch;
    auto& all_gpu = all_gpu_of[{c.model, c.n_batch}];
    if (all_gpu.empty()) all_gpu = run_all(*strata::rt::model::load(g.path, opt), g);
    opt.expert_cache = 2;
    const strata::test::scoped_env cpu("STRATA_VK_CACHE_CPU_MISSES", "0.5");
    const strata::test::scoped_env margin("STRATA_VK_CACHE_MARGIN", "0");
    const strata::test::scoped_env lookup("STRATA_VK_CACHE_LOOKUP", c.split ? "0" : "1");
    auto m = strata::rt::model::load(g.path, opt);
    const auto cached = run_all(*m, g);
    const auto st = m->expert_cache();
    MESSAGE(std::string(c.model) << " -b " << c.n_batch << (c.split ? " split" : " hand-offs") << ": hit rate " << st.hit_rate()
                                 << " (" << st.hits << "/" << st.hits + st.misses << "), GPU block-steps " << st.gpu_blocks << " (lookup "
                                 << st.lookup_blocks << "), CPU " << st.cpu_blocks << " (misses " << st.miss_cpu_blocks << "), uploaded "
                                 << st.bytes_uploaded << ", read from host memory " << st.host_read_bytes << ", evictions "
                                 << st.evictions);
    REQUIRE(cached.size() == all_gpu.size());
    CHECK(strata::test::compare_logits(cached, all_gpu, m->hparams().n_vocab).nmse <= g.tolerance_nmse);
    CHECK(st.miss_cpu_blocks > 0);
    CHECK(st.hits > 0);
    CHECK(st.misses > 0);
    CHECK(st.bytes_uploaded > 0);
    if (c.split) {
      CHECK(st.lookup_blocks == 0);
      CHECK(st.miss_cpu_blocks <= st.cpu_blocks);
      CHECK(st.gpu_blocks > 0);
      CHECK(m->startup_report().find("steps of up to 8 tokens split at each cached layer") != std::string::npos);
    } else {
      // Every block-step is the lookup form's; those the CPU computed are not the GPU's.
      CHECK(st.miss_cpu_blocks == st.cpu_blocks);
      CHECK(st.gpu_blocks > 0);
      CHECK(st.gpu_blocks + st.miss_cpu_blocks == st.lookup_blocks);
      CHECK(m->startup_report().find("steps of up to 8 tokens hand each cached layer to the host") != std::string::npos);
      if (c.n_batch == 64) CHECK(st.host_read_bytes > 0);  // prompt steps of more than 8 tokens read misses over the link
    }
  }
}

// A CPU-expert block after the cached ones (-ot): its prompt steps hand its sum back through the
// CPU-expert regions, and decode's cached blocks then hand theirs through their own (a region
// shared by hand-off order would add the prompt's sum to a later decode's GPU-computed block).
TEST_CASE("expert cache: misses on the CPU beside a CPU-expert block keep the all-GPU logits within tolerance over prompt and decode") {
  if (!strata::test::vulkan_here("expert cache CPU misses beside CPU experts")) return;
  const auto& g = strata::test::shipped_fixture("qwen3moe-Q4_K_M");
  auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
  opt.n_batch = 64;
  const auto all_gpu = run_all(*strata::rt::model::load(g.path, opt), g);
  opt.expert_cache = 2;
  opt.expert_cpu_misses = true;
  opt.override_tensor = {R"(blk\.3\.ffn_.*_exps=cpu)"};
  opt.stream_experts = false;  // block 3 on the CPU in prompt steps too
  auto m = strata::rt::model::load(g.path, opt);
  const auto cached = run_all(*m, g);
  const auto st = m->expert_cache();
  CHECK(m->cpu_expert_layers() == std::vector<std::uint32_t>{3});
  CHECK(m->cached_expert_layers() == std::vector<std::uint32_t>{0, 1, 2});
  REQUIRE(cached.size() == all_gpu.size());
  CHECK(strata::test::compare_logits(cached, all_gpu, m->hparams().n_vocab).nmse <= g.tolerance_nmse);
  CHECK(st.miss_cpu_blocks > 0);
  CHECK(st.gpu_blocks > 0);
}

TEST_CASE("expert cache: STRATA_VK_CACHE_CPU_MISSES must be a share of a step's experts") {
  if (!strata::test::vulkan_here("expert cache CPU misses switch")) return;
  const auto& g = strata::test::shipped_fixture("qwen3moe-Q4_K_M");
  auto opt = strata::test::fixture_options(strata::rt::backend_kind::vulkan);
  opt.expert_cache = 2;
  const strata::test::scoped_env bad("STRATA_VK_CACHE_CPU_MISSES", "2");
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("STRATA_VK_CACHE_CPU_MISSES"), strata::error);
}
