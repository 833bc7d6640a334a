// Fidelity against llama.cpp: for every golden model and prompt, the logits at every prompt
// position (one batched prefill) and, where recorded, the logits of the 32 greedy tokens fed
// one at a time through the KV cache (the decode path) stay within the model's tolerance_nmse.
// tests/fixtures ships a subset; the full ../shared/fixtures set runs when present. The same
// check covers every layout of the memory tiers (layer splits, experts on the CPU, --fit).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "strata/arch/all.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/tiers/fit.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/runtime/placement.hpp"
#include "support/fidelity.hpp"
#include "support/cpu_phase_links.hpp"
#include "support/fixture_placement.hpp"
#include "support/sanitized_build.hpp"
#include "support/scoped_env.hpp"
#include "support/session_logits.hpp"

namespace {

using strata::test::golden_model;

strata::rt::engine_options fixture_options(strata::rt::backend_kind backend = strata::rt::backend_kind::cpu,
                                           int n_gpu_layers = -1) {
  strata::rt::engine_options opt;
  opt.backend = backend;
  opt.n_gpu_layers = n_gpu_layers;
  opt.threads = 2;
  opt.n_ctx = 512;   // the fixtures were produced with n_ctx 512
  opt.n_batch = 256;
  return opt;
}

// The model as loaded goes to `loaded` (layout tests check it after the logits); `only_run`
// limits the check to one prompt (layout tests: a third of the lavapipe time); `max_decode` the
// decode steps checked against the first of llama.cpp's (the sanitizer pass's end-to-end case).
// `last_logits` gets the last prompt's logits as checked: every prompt position, then its first
// `last_decode` decode steps (what prompt_and_decode_logits gives for it, without running it again),
// or nothing where the check decoded fewer.
void check_model(const golden_model& g, const strata::rt::engine_options& opt,
                 std::unique_ptr<strata::rt::model>* loaded = nullptr, std::string_view only_run = {},
                 std::size_t max_decode = SIZE_MAX, std::vector<float>* last_logits = nullptr, std::size_t last_decode = 0) {
  CAPTURE(g.name);
  auto model = strata::rt::model::load(g.path, opt);
  const std::size_t V = model->hparams().n_vocab;
  strata::rt::session s(*model);
  for (const auto& run : g.runs) {
    if (!only_run.empty() && run.prompt != only_run) continue;
    CAPTURE(run.prompt);
    std::vector<float> all;
    s.clear();
    s.prefill(run.ids, &all);
    const auto ref = strata::test::read_f32(run.logits);
    REQUIRE(ref.size() == run.ids.size() * V);
    const auto st = strata::test::compare_logits(all, ref, V);
    MESSAGE(g.name << " " << run.prompt << " prefill: nmse " << st.nmse << " (tolerance " << g.tolerance_nmse
                   << "), max_abs " << st.max_abs << ", top1 " << st.top1_agree << "/" << st.rows);
    CHECK(st.nmse <= g.tolerance_nmse);
    const bool last = last_logits != nullptr && &run == &g.runs.back();
    if (last) last_logits->clear();

    if (run.gen_logits.empty()) continue;
    const auto gref = strata::test::read_f32(run.gen_logits);
    std::vector<float> got;
    got.reserve(gref.size());
    for (std::size_t k = 0; k < run.greedy.size() && k < max_decode && got.size() < gref.size(); ++k) {
      const auto l = s.decode(run.greedy[k]);
      got.insert(got.end(), l.begin(), l.end());
    }
    if (last && got.size() >= last_decode * V) {
      *last_logits = std::move(all);
      last_logits->insert(last_logits->end(), got.begin(), got.begin() + std::ptrdiff_t(last_decode * V));
    }
    const auto gs = strata::test::compare_logits(got, std::span(gref).first(got.size()), V);
    MESSAGE(g.name << " " << run.prompt << " decode: nmse " << gs.nmse << ", max_abs " << gs.max_abs << ", top1 "
                   << gs.top1_agree << "/" << gs.rows);
    CHECK(gs.nmse <= g.tolerance_nmse);
  }
  if (loaded) *loaded = std::move(model);
}

void check_model(const golden_model& g, strata::rt::backend_kind backend = strata::rt::backend_kind::cpu,
                 int n_gpu_layers = -1) {
  check_model(g, fixture_options(backend, n_gpu_layers));
}

}  // namespace

TEST_CASE("fidelity: shipped fixture models match llama.cpp logits (prefill and decode)") {
  const auto models = strata::test::local_golden();
  REQUIRE(!models.empty());
  for (const auto& g : models) check_model(g);
}

// The Vulkan backend runs the same suite on whatever device the loader offers (in CI: Mesa's
// lavapipe). Without a Vulkan build or device it says so and checks nothing.
bool vulkan_available() {
  if (!strata::rt::vulkan_compiled_in()) {
    MESSAGE("this build has no Vulkan backend: Vulkan fidelity skipped");
    return false;
  }
  if (strata::rt::vulkan_devices().empty()) {
    MESSAGE("no Vulkan device (install mesa-vulkan-drivers for lavapipe): Vulkan fidelity skipped");
    return false;
  }
  return true;
}

// Under the sanitizers (CI's ASan pass, where this is the end-to-end case of every architecture)
// 8 of the 32 decode steps a prompt: the later ones replay the same recorded step at the next
// position (on the shipped fixtures every one below STRATA_VK_SHORT_CTX), which the release pass checks.
TEST_CASE("fidelity: Vulkan backend, shipped fixture models match llama.cpp logits (prefill and decode)") {
  if (!vulkan_available()) return;
  const auto models = strata::test::local_golden();
  REQUIRE(!models.empty());
  for (const auto& g : models)
    check_model(g, fixture_options(strata::rt::backend_kind::vulkan), nullptr, {}, strata::test::sanitized_build() ? 8 : SIZE_MAX);
}

// n_ctx 256: decode attention runs unsplit (the per-head kernel, which also writes the output
// projection's int8 input: attention.glsl QUANT_OUT) at every position; with n_ctx 512 it runs
// so only below STRATA_VK_SHORT_CTX (256) and splits over the cache beyond (COMBINE). Its
// one-token steps also run attn_prep's head ops and KV append (HEAD_OPS, on by default; q/k norms
// and RoPE of qwen3, RoPE of llama, Llama 4's post-RoPE norm and temperature), the same float
// operations in the same order, so on lavapipe the logits equal STRATA_VK_HEAD_OPS=0's bit for
// bit. A GPU's compiler may schedule the two kernels' float operations differently (the H200's
// logits differ in the last bits, which the int8 rounding of activations magnifies), so there the
// two agree within a tenth of the model's tolerance.
TEST_CASE("fidelity: Vulkan with a short context (unsplit decode attention) matches llama.cpp logits") {
  if (!vulkan_available()) return;
  int ran = 0;
  for (const auto& g : strata::test::local_golden()) {
    if (g.name != "qwen3-Q4_K_M" && g.name != "llama-Q4_K_M" && g.name != "llama4-Q4_K_M") continue;
    std::vector<float> logits[2];
    bool cpu_device = false;  // lavapipe
    for (const std::string_view on : {"1", "0"}) {
      CAPTURE(on);
      const strata::test::scoped_env env("STRATA_VK_HEAD_OPS", on.data());
      auto opt = fixture_options(strata::rt::backend_kind::vulkan);
      opt.n_ctx = 256;
      opt.gpu_profile = true;
      std::unique_ptr<strata::rt::model> m;
      auto& out = logits[on[0] - '0'];
      check_model(g, opt, &m, {}, SIZE_MAX, &out, 8);
      cpu_device = m->backend_description().find("llvmpipe") != std::string::npos;
      const auto prof = m->kernel_profile();
      const bool fused = std::any_of(prof.begin(), prof.end(), [](const auto& k) { return k.label.find(".HEAD_OPS") != std::string::npos; });
      CHECK(fused == (on[0] == '1'));
      if (out.empty()) out = strata::test::prompt_and_decode_logits(*m, g.runs.back(), 8);
    }
    const double nmse = strata::test::compare_logits(logits[1], logits[0], logits[0].size()).nmse;
    MESSAGE(g.name << ": HEAD_OPS against attn_prep, logits nmse " << nmse);
    if (cpu_device) CHECK(logits[0] == logits[1]);
    CHECK(nmse <= g.tolerance_nmse / 10);
    ++ran;
  }
  CHECK(ran == 3);
}

// -ngl 2: the embedding and layers 0-1 on the GPU, layers 2.. and the head on the CPU, the hidden
// state handed over every step (a dense and a MoE model). Under the sanitizers 8 decode steps a
// prompt, as the case above.
TEST_CASE("fidelity: Vulkan/CPU layer split (-ngl 2) matches llama.cpp logits") {
  if (!vulkan_available()) return;
  int ran = 0;
  for (const auto& g : strata::test::local_golden())
    if (g.name == "qwen3-Q4_K_M" || g.name == "qwen3moe-Q4_K_M") {
      check_model(g, fixture_options(strata::rt::backend_kind::vulkan, 2), nullptr, {}, strata::test::sanitized_build() ? 8 : SIZE_MAX);
      ++ran;
    }
  CHECK(ran == 2);
}

// STRATA_VK_TAIL=8: in decode steps the decoder's RMS norms run as the last workgroup of the
// dispatch that writes their input (the residual matvecs, the MoE combine; norm_tail.glsl) and
// the routers' top-k as the last workgroup of the router matvec (moe_topk.glsl; softmax for
// qwen3moe, sigmoid for llama4). Off by default (it lost 9-19% on the H100, bench/RESULTS.md
// session 7), so this case turns it on (the backend reads the variable when it is built).
// Q4_K_M fixtures (the four architectures' by default) on the Vulkan backend with one switch set.
void check_vulkan_with(const char* name, const char* value,
                       std::initializer_list<std::string_view> models = {"qwen3-Q4_K_M", "qwen3moe-Q4_K_M", "llama-Q4_K_M",
                                                                         "llama4-Q4_K_M"}) {
  const strata::test::scoped_env env(name, value);
  std::size_t ran = 0;
  for (const auto& g : strata::test::local_golden())
    if (std::find(models.begin(), models.end(), g.name) != models.end()) {
      check_model(g, strata::rt::backend_kind::vulkan);
      ++ran;
    }
  CHECK(ran == models.size());
}

TEST_CASE("fidelity: Vulkan with norms and top-k run as their producers' tails (STRATA_VK_TAIL=8) matches llama.cpp logits") {
  if (vulkan_available()) check_vulkan_with("STRATA_VK_TAIL", "8");
}

// Decode steps whose tokens sit below STRATA_VK_SHORT_CTX record their attention unsplit, the
// others split over the whole cache (n_ctx 512) with a combine pass. At 64 the short prompt
// decodes unsplit, the long one split, and the medium one (41 tokens + 32 decoded) crosses over,
// so both recordings of the same step shape run in one sequence.
TEST_CASE("fidelity: Vulkan decode across the short-context switch (STRATA_VK_SHORT_CTX=64) matches llama.cpp logits") {
  if (vulkan_available()) check_vulkan_with("STRATA_VK_SHORT_CTX", "64");
}

// Expert matvecs over short rows with lane groups summed by shuffles (mmvq.glsl SG_CLUSTER; 8 lanes
// by default on 32-wide subgroups): 4, because lavapipe's subgroups of 8 leave the default off.
TEST_CASE("fidelity: Vulkan MoE decode with 4-lane groups for short expert rows (STRATA_VK_MMVQ_SHORT_LPR=4) matches llama.cpp logits") {
  if (vulkan_available()) check_vulkan_with("STRATA_VK_MMVQ_SHORT_LPR", "4", {"qwen3moe-Q4_K_M", "llama4-Q4_K_M"});
}

// Decode's MoE combine as per-block tails of the experts' down matvec (mmvq.glsl MOE_BLOCK_TAIL, the
// default): the workgroup completing a token's 32-row block sums its experts with the residual and
// writes the next norm's first half (qwen3moe), the combine dispatch's operations in its order, so
// the logits equal those of STRATA_VK_MOE_BLOCK_TAIL=0 (the combine's own dispatch) bit for bit.
// llama4's shared expert runs between the combine and its residual add, so its down matvec waits
// and then records plainly with the combine's dispatch (the deferred down's fallback).
TEST_CASE("fidelity: Vulkan MoE decode with the combine as the down matvec's block tails matches llama.cpp logits, and without") {
  if (!vulkan_available()) return;
  int ran = 0;
  for (const auto& g : strata::test::local_golden()) {
    if (g.name != "qwen3moe-Q4_K_M" && g.name != "llama4-Q4_K_M") continue;
    std::vector<float> logits[2];
    for (const std::string_view on : {"1", "0"}) {
      CAPTURE(on);
      const strata::test::scoped_env env("STRATA_VK_MOE_BLOCK_TAIL", on.data());
      // The claim is the combine's, bit for bit: the router goes through its own dispatch in both
      // forms (the products' sums differ in the last bits; router_product_test.cpp checks them).
      const strata::test::scoped_env no_product("STRATA_VK_ROUTER_PRODUCT", "0");
      auto opt = fixture_options(strata::rt::backend_kind::vulkan);
      opt.gpu_profile = true;
      std::unique_ptr<strata::rt::model> m;
      auto& out = logits[on[0] - '0'];
      check_model(g, opt, &m, {}, SIZE_MAX, &out, 8);
      const auto prof = m->kernel_profile();
      const bool tails = std::any_of(prof.begin(), prof.end(), [](const auto& k) { return k.label.find(".MOE_BLOCK_TAIL") != std::string::npos; });
      CHECK(tails == (g.name == "qwen3moe-Q4_K_M" && on[0] == '1'));
      if (out.empty()) out = strata::test::prompt_and_decode_logits(*m, g.runs.back(), 8);
    }
    CHECK(logits[0] == logits[1]);
    ++ran;
  }
  CHECK(ran == 2);
}

// Decode steps of three sequences, each token its sequence's only one (a server's streams): the
// per-head attention appends every token's K/V rows itself (HEAD_OPS) and reads no row another
// token of the step writes. Against STRATA_VK_HEAD_OPS=0 (attn_prep's dispatch): bit for bit on
// lavapipe; on a GPU within a tenth of the model's tolerance (its compiler schedules the two
// kernels' float operations apart, and the int8 rounding of activations magnifies last-bit
// differences); a row read before its write would be far off either way.
TEST_CASE("fidelity: Vulkan decode steps of three sequences run attn_prep in the attention, as its own dispatch does") {
  if (!vulkan_available()) return;
  const auto models = strata::test::local_golden();
  const auto it = std::find_if(models.begin(), models.end(), [](const auto& m) { return m.name == "qwen3-Q4_K_M"; });
  REQUIRE(it != models.end());
  const auto& g = *it;
  REQUIRE(g.runs.size() >= 3);
  constexpr std::size_t steps = 6;
  std::vector<float> logits[2];
  bool cpu_device = false;
  for (const std::string_view on : {"1", "0"}) {
    CAPTURE(on);
    const strata::test::scoped_env env("STRATA_VK_HEAD_OPS", on.data());
    auto opt = fixture_options(strata::rt::backend_kind::vulkan);
    opt.n_ctx = 768;  // the sequences' pool; positions stay below 256 (short-context steps)
    opt.n_seq = 3;
    opt.gpu_profile = true;
    auto m = strata::rt::model::load(g.path, opt);
    cpu_device = m->backend_description().find("llvmpipe") != std::string::npos;
    const std::size_t V = m->hparams().n_vocab;
    for (std::uint32_t s = 0; s < 3; ++s) {  // each prompt a step of its own sequence
      const auto& ids = g.runs[s].ids;
      std::vector<std::int32_t> pos(ids.size());
      for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = std::int32_t(i);
      const std::vector<std::uint32_t> seqs(ids.size(), s);
      std::vector<std::uint8_t> want(ids.size(), 0);
      want.back() = 1;
      std::vector<float> last(V);
      m->forward({ids, pos, seqs, want}, last);
    }
    auto& out = logits[on[0] - '0'];
    out.resize(steps * 3 * V);
    for (std::size_t k = 0; k < steps; ++k) {
      std::vector<std::int32_t> toks, pos;
      for (std::uint32_t s = 0; s < 3; ++s) {
        toks.push_back(g.runs[s].greedy[k]);
        pos.push_back(std::int32_t(g.runs[s].ids.size() + k));
      }
      const std::vector<std::uint32_t> seqs{0, 1, 2};
      const std::vector<std::uint8_t> want(3, 1);
      m->forward({toks, pos, seqs, want}, std::span(out).subspan(k * 3 * V, 3 * V));
    }
    const auto prof = m->kernel_profile();
    const bool fused = std::any_of(prof.begin(), prof.end(), [](const auto& p) { return p.label.find(".HEAD_OPS") != std::string::npos; });
    CHECK(fused == (on[0] == '1'));
  }
  const double nmse = strata::test::compare_logits(logits[1], logits[0], logits[0].size()).nmse;
  MESSAGE("three sequences' decode steps, HEAD_OPS against attn_prep: logits nmse " << nmse);
  if (cpu_device) CHECK(logits[0] == logits[1]);
  CHECK(nmse <= g.tolerance_nmse / 10);
}

TEST_CASE("fidelity: Vulkan backend, full shared fixture set matches llama.cpp logits" * doctest::skip(true)) {
  // Run explicitly (--no-skip, or -tc='*Vulkan*full*'): ~25 models, minutes on lavapipe.
  // STRATA_TEST_MODELS=llama-Q4_0,llama-Q5_K_M checks only the models named.
  if (!vulkan_available()) return;
  const char* only = std::getenv("STRATA_TEST_MODELS");
  const std::string names = only ? "," + std::string(only) + "," : "";
  for (const auto& g : strata::test::shared_golden())
    if (names.empty() || names.find("," + g.name + ",") != std::string::npos) check_model(g, strata::rt::backend_kind::vulkan);
}

TEST_CASE("fidelity: full shared fixture set matches llama.cpp logits") {
  const auto models = strata::test::shared_golden();
  if (models.empty()) {
    MESSAGE("../shared/fixtures not present: full fidelity set skipped");
    return;
  }
  for (const auto& g : models) check_model(g);
}

// --- Memory tiers (issue 14): every layout the engine executes gives llama.cpp's logits. ---

namespace {

const golden_model* shipped(std::string_view name) {
  static const auto models = strata::test::local_golden();
  for (const auto& g : models)
    if (g.name == name) return &g;
  FAIL("fixture model " << name << " is not shipped");
  return nullptr;
}


// Link speeds under which a split pays on a model of a few MiB: a free hand-off and a slow CPU
// (with desktop numbers the planner rightly keeps such a model on one side: a hand-off costs
// more than the whole token). cache false: --no-expert-cache.
strata::rt::engine_options fit_options(bool cache = true) {
  auto opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.fit = true;
  opt.cache_experts = cache;
  opt.ram_budget = 1ull << 30;
  strata::tiers::link_speeds l = strata::tiers::assumed_desktop_links();
  l.handoff_s = 0;
  l.cpu_read = 1e9;
  l.source = "test: free hand-offs, slow CPU";
  opt.links = l;
  return opt;
}

// The smallest GPU budget (in steps of 1/256 of the all-GPU layout's bytes) for which --fit
// chooses a layout `wanted` accepts, with that budget; nullopt when none does.
template <class Wanted>
std::optional<std::pair<std::uint64_t, strata::tiers::engine_layout>> budget_for(const golden_model& g, Wanted wanted,
                                                                                 bool cache = true) {
  auto in = strata::test::fixture_placement(g, fit_options(cache), true);
  const std::uint64_t all = strata::tiers::layout_gpu_bytes(in.demand, strata::tiers::layer_split_layout(in.demand, -1));
  for (std::uint64_t b = all / 256; b <= all; b += all / 256) {
    in.plan.gpu_budget = b;
    const auto l = strata::tiers::plan_engine_layout(in.demand, in.plan);
    if (wanted(l)) return std::pair{b, l};
  }
  return std::nullopt;
}

// Loads g with --fit under `budget` (the Vulkan ledger then caps the backend at it: the load
// proves the planner's estimate holds), checks the logits and that the layout is `expect`.
void check_fit(const golden_model& g, std::uint64_t budget, const strata::tiers::engine_layout& expect, bool cache = true) {
  auto opt = fit_options(cache);
  opt.gpu_budget = budget;
  std::unique_ptr<strata::rt::model> m;
  check_model(g, opt, &m, "medium");
  REQUIRE(m);
  MESSAGE(g.name << " --fit --gpu-budget " << budget << ": " << m->backend_description());
  CHECK(m->n_gpu_layers() == expect.n_gpu_layers);
  CHECK(m->cpu_expert_layers() == expect.handoff_layers());
  CHECK(m->cached_expert_layers() == expect.cached_layers());
  if (!expect.cached_layers().empty()) CHECK(m->expert_cache().slots == expect.expert_slots);
  CHECK(m->streamed_layers() == expect.streamed_layers());
  CHECK(m->expert_streamed_layers() == expect.expert_streamed_layers());
}

}  // namespace

TEST_CASE("fidelity: Vulkan with every routed expert on the CPU (qwen3moe --cpu-moe) matches llama.cpp logits") {
  if (!vulkan_available()) return;
  const golden_model& g = *shipped("qwen3moe-Q4_K_M");
  auto opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.cpu_moe = true;
  opt.stream_experts = false;  // the hand-off in every step (streamed prompt steps: expert_stream_test.cpp)
  std::unique_ptr<strata::rt::model> m;
  check_model(g, opt, &m, "medium");
  REQUIRE(m);
  CHECK(m->n_gpu_layers() == 4);
  CHECK(m->cpu_expert_layers() == std::vector<std::uint32_t>{0, 1, 2, 3});
  // Every step hands the four blocks' experts to the CPU (the counters of /metrics and strata-bench).
  const auto h = m->handoffs();
  CHECK(h.steps > 0);
  CHECK(h.handoff_steps == h.steps);
  CHECK(h.handoffs == 4 * h.steps);
  CHECK(h.tokens >= h.steps);
  CHECK(h.per_step() == doctest::Approx(4.0));
}

// Llama 4: sigmoid router weighting the experts' input, a shared expert beside them, MoE in
// every second block; --n-cpu-moe 2 hands off block 1 only, and -ngl 3 leaves block 3 (MoE) and
// the head to the CPU stage.
TEST_CASE("fidelity: Vulkan with experts on the CPU and a layer split (llama4 -ngl 3 --n-cpu-moe 2) matches llama.cpp logits") {
  if (!vulkan_available()) return;
  const golden_model& g = *shipped("llama4-Q4_K_M");
  auto opt = fixture_options(strata::rt::backend_kind::vulkan, 3);
  opt.n_cpu_moe = 2;
  opt.stream_experts = false;
  std::unique_ptr<strata::rt::model> m;
  check_model(g, opt, &m, "medium");
  REQUIRE(m);
  CHECK(m->n_gpu_layers() == 3);
  CHECK(m->cpu_expert_layers() == std::vector<std::uint32_t>{1});
  const auto h = m->handoffs();  // one hand-off a step, in the GPU stage (the CPU stage has none to count)
  CHECK(h.steps > 0);
  CHECK(h.handoffs == h.steps);
}

// GPU-cached experts (--expert-cache): qwen3moe (8 experts, top-2) with 4 slots per layer and
// prompt steps of 2 tokens, so every step (prompt and decode) runs from the slots and the cache
// evicts within the prompt; llama4 (4 experts, top-1, weighted input) with 2 slots and the whole
// prompt in one step, which routes more experts than slots: the prompt's blocks run on the CPU,
// the decode steps from the slots.
TEST_CASE("fidelity: Vulkan with GPU-cached experts (--expert-cache, fewer slots than experts) matches llama.cpp logits") {
  if (!vulkan_available()) return;
  struct cached_case {
    const char* model;
    std::uint32_t slots, n_batch;
    std::vector<std::uint32_t> layers;
  };
  for (const cached_case& c : {cached_case{"qwen3moe-Q4_K_M", 4, 2, {0, 1, 2, 3}}, cached_case{"llama4-Q4_K_M", 2, 256, {1, 3}}}) {
    CAPTURE(c.model);
    const golden_model& g = *shipped(c.model);
    auto opt = fixture_options(strata::rt::backend_kind::vulkan);
    opt.expert_cache = c.slots;
    opt.n_batch = c.n_batch;
    std::unique_ptr<strata::rt::model> m;
    check_model(g, opt, &m, "medium");
    REQUIRE(m);
    CHECK(m->cached_expert_layers() == c.layers);
    CHECK(m->cpu_expert_layers().empty());
    const auto st = m->expert_cache();
    MESSAGE(std::string(c.model) << " --expert-cache " << c.slots << ": hit rate " << st.hit_rate() << " (" << st.hits << "/"
                    << st.hits + st.misses << "), evictions " << st.evictions << ", " << st.bytes_per_token()
                    << " bytes uploaded per token, block-steps from the slots " << st.gpu_blocks << ", on the CPU "
                    << st.cpu_blocks);
    CHECK(st.layers == c.layers.size());
    // The split form uploads every miss, so these short runs evict; the lookup form (the default)
    // reads misses from host memory and admits only what out-counts a victim (its own test forces evictions).
    if (st.lookup_blocks) CHECK(st.host_read_bytes > 0);
    else CHECK(st.evictions > 0);
    CHECK(st.hits > 0);
    CHECK(st.gpu_blocks > 0);
    // The lookup form (the default) hands a block to the CPU only for its decode misses (llama4's
    // top-1 with the planner's choice, tiers::choose_expert_misses); the split form does where a
    // prompt step routes more experts than slots.
    if (st.lookup_blocks) CHECK(st.cpu_blocks == st.miss_cpu_blocks);
    else CHECK((st.cpu_blocks > 0) == (c.n_batch > 2));
    CHECK(m->backend_description().find("GPU expert slots") != std::string::npos);
  }
  auto opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.expert_cache = 9;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(shipped("qwen3moe-Q4_K_M")->path, opt),
                       doctest::Contains("has 8 experts; the slots per layer must be 1..8"), strata::error);
  opt.expert_cache = 0;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(shipped("qwen3moe-Q4_K_M")->path, opt),
                       doctest::Contains("--expert-cache 0: the expert cache needs at least one slot"), strata::error);
}

TEST_CASE("fidelity: Vulkan --fit under a tiny GPU budget splits the layers of a dense model (qwen3) and matches llama.cpp logits") {
  if (!vulkan_available()) return;
  const golden_model& g = *shipped("qwen3-Q4_K_M");
  const auto found = budget_for(g, [](const strata::tiers::engine_layout& l) { return l.n_gpu_layers == 2; });
  REQUIRE(found);
  check_fit(g, found->first, found->second);
}

TEST_CASE("fidelity: Vulkan --fit --no-expert-cache under a tiny GPU budget computes some experts on the CPU (qwen3moe) and matches llama.cpp logits") {
  if (!vulkan_available()) return;
  const golden_model& g = *shipped("qwen3moe-Q4_K_M");
  const auto found = budget_for(
      g,
      [](const strata::tiers::engine_layout& l) {
        const auto h = l.handoff_layers();
        return l.n_gpu_layers == 4 && !h.empty() && h.size() < 4;
      },
      false);
  REQUIRE(found);
  check_fit(g, found->first, found->second, false);
}

// Under a slow CPU the planner prefers GPU-cached experts (slots from the room the budget leaves)
// to experts on the CPU once the room holds at least the experts one token uses.
TEST_CASE("fidelity: Vulkan --fit under a tiny GPU budget GPU-caches some experts (qwen3moe) and matches llama.cpp logits") {
  if (!vulkan_available()) return;
  const golden_model& g = *shipped("qwen3moe-Q4_K_M");
  const auto found = budget_for(g, [](const strata::tiers::engine_layout& l) {
    return l.n_gpu_layers == 4 && !l.cached_layers().empty() && l.expert_slots < 8;
  });
  REQUIRE(found);
  MESSAGE("--fit chose " << found->second.expert_slots << " slots for " << found->second.cached_layers().size() << " blocks");
  check_fit(g, found->first, found->second);
}

TEST_CASE("tiers: a GPU layout beyond --gpu-budget (or the CPU side beyond --ram-budget) is refused naming the budget") {
  const golden_model& g = *shipped("qwen3moe-Q4_K_M");
  auto opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.gpu_budget = 1 << 20;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt),
                       doctest::Contains("--gpu-budget 1.00 MiB does not hold what -ngl 4 puts on the GPU"), strata::error);
  opt.n_gpu_layers = 0;
  opt.ram_budget = 1 << 20;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("--ram-budget 1.00 MiB does not hold"),
                       strata::error);
  opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.override_tensor = {"attn_k=cpu"};
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("'blk.0.attn_k.weight'"), strata::error);
  // --fit under a budget too small for one block: everything on the CPU (no GPU stage at all).
  opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.fit = true;
  opt.gpu_budget = 1 << 20;
  opt.ram_budget = 1ull << 30;
  const auto m = strata::rt::model::load(g.path, opt);
  CHECK(m->n_gpu_layers() == 0);
  CHECK(m->backend_description().starts_with("cpu"));
}

// --- Dense layer streaming (issue 14 item 4): the FFN of streamed blocks is copied into a GPU
// ring every step; the kernels are the same, so the logits are the all-GPU run's, bit for bit.

namespace {

using strata::test::prompt_and_decode_logits;

// qwen3 (4 dense blocks): the FFN of blocks 1-3 streamed, so the two ring slots are reused
// (block 3 reads slot 1 after block 1 did), for the prompt in steps of n_batch tokens then 8
// decode steps: identical to the all-GPU logits, within the fixture's tolerance of the CPU
// backend's and of llama.cpp's.
void check_streamed(std::uint32_t n_batch) {
  const golden_model& g = *shipped("qwen3-Q4_K_M");
  const auto& run = g.runs.front();
  auto opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.n_batch = n_batch;
  strata::tiers::link_speeds fast_link = strata::tiers::assumed_desktop_links();
  fast_link.host_to_gpu = 1e12;  // every step streams (no per-phase CPU share)
  fast_link.source = "test: a link faster than the CPU";
  opt.links = fast_link;
  const auto ref_gpu = prompt_and_decode_logits(*strata::rt::model::load(g.path, opt), run, 8);
  auto ref_opt = fixture_options(strata::rt::backend_kind::cpu);
  ref_opt.n_batch = n_batch;
  const auto ref_cpu = prompt_and_decode_logits(*strata::rt::model::load(g.path, ref_opt), run, 8);
  opt.stream_layers = 3;
  const auto m = strata::rt::model::load(g.path, opt);
  CHECK(m->streamed_layers() == std::vector<std::uint32_t>{1, 2, 3});
  CHECK(m->backend_description().find("dense FFN of 3 blocks streamed") != std::string::npos);
  const auto got = prompt_and_decode_logits(*m, run, 8);
  REQUIRE(got.size() == ref_gpu.size());
  CHECK(got == ref_gpu);
  const std::size_t V = m->hparams().n_vocab;
  const auto st = strata::test::compare_logits(got, ref_cpu, V);
  const auto ref = strata::test::read_f32(run.logits);
  const auto sl = strata::test::compare_logits(std::span(got).first(ref.size()), ref, V);
  MESSAGE("streamed vs CPU: nmse " << st.nmse << ", prompt vs llama.cpp: nmse " << sl.nmse << " (tolerance "
                                   << g.tolerance_nmse << ")");
  CHECK(st.nmse <= g.tolerance_nmse);
  CHECK(sl.nmse <= g.tolerance_nmse);
  const auto c = m->streaming();
  const std::uint64_t steps = (run.ids.size() + n_batch - 1) / n_batch + 8;
  CHECK(c.layers == 3);
  CHECK(c.cpu_steps == 0);
  CHECK(c.steps == steps);
  CHECK(c.tokens == run.ids.size() + 8);
  CHECK(c.bytes_streamed == steps * c.bytes_per_step);
  CHECK(c.ring_bytes >= 2 * (c.bytes_per_step / 3));
  CHECK(m->startup_report().find("layer streaming: dense FFN of 3 blocks") != std::string::npos);
}

}  // namespace

TEST_CASE("fidelity: Vulkan with streamed dense FFNs (--stream-layers 3), 5-token prompt steps, gives the all-GPU logits") {
  if (vulkan_available()) check_streamed(5);
}

TEST_CASE("fidelity: Vulkan with streamed dense FFNs (--stream-layers 3), one prompt step (tiled matmuls), gives the all-GPU logits") {
  if (vulkan_available()) check_streamed(256);
}

// The per-phase choice: link speeds under which the CPU computes the streamed FFNs in steps of
// a few tokens (decode) and longer steps stream them (prefill). Prompt steps of 8 tokens (a
// short last one may be the CPU's), then 8 decode steps on the CPU; the logits match the
// all-GPU run's, the CPU backend's and llama.cpp's within the fixture's tolerance.
TEST_CASE("fidelity: Vulkan streamed dense FFNs computed on the CPU in decode steps and streamed in prompt steps") {
  if (!vulkan_available()) return;
  const golden_model& g = *shipped("qwen3-Q4_K_M");
  const auto& run = g.runs.front();
  auto opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.n_batch = 8;
  const auto ref_gpu = prompt_and_decode_logits(*strata::rt::model::load(g.path, opt), run, 8);
  auto ref_opt = fixture_options(strata::rt::backend_kind::cpu);
  ref_opt.n_batch = 8;
  const auto ref_cpu = prompt_and_decode_logits(*strata::rt::model::load(g.path, ref_opt), run, 8);
  // The CPU's time = its flops (reads and hand-offs free), set so it beats the link in steps
  // of a few tokens: the first CPU speed (in steps of 2x) for which T is 2..6.
  opt.stream_layers = 3;
  const auto in = strata::test::fixture_placement(g, opt, true);
  auto layout = strata::tiers::fixed_layout(in.demand, -1, {}, 0, 3);
  double bytes = 0;
  for (const auto& t : in.demand.tensors)
    if (t.kind == strata::tiers::tensor_kind::dense_ffn && t.layer >= 1) bytes += double(t.bytes);
  strata::tiers::link_speeds base = strata::tiers::assumed_desktop_links();
  base.handoff_s = 0;
  base.cpu_read = 1e15;
  const auto [l, T] = strata::test::cpu_phase_links(in.demand, layout, base, opt.n_batch);
  REQUIRE(T >= 2);
  opt.links = l;
  const auto m = strata::rt::model::load(g.path, opt);
  CHECK(m->backend_description().find("computed on the CPU") != std::string::npos);
  const auto got = prompt_and_decode_logits(*m, run, 8);
  REQUIRE(got.size() == ref_gpu.size());
  const std::size_t V = m->hparams().n_vocab;
  const auto sg = strata::test::compare_logits(got, ref_gpu, V);
  const auto sc = strata::test::compare_logits(got, ref_cpu, V);
  const auto ref = strata::test::read_f32(run.logits);
  const auto sl = strata::test::compare_logits(std::span(got).first(ref.size()), ref, V);
  MESSAGE("per-phase streaming vs all-GPU: nmse " << sg.nmse << ", vs CPU " << sc.nmse << ", prompt vs llama.cpp "
                                                   << sl.nmse << " (tolerance " << g.tolerance_nmse << ")");
  CHECK(sg.nmse <= g.tolerance_nmse);
  CHECK(sc.nmse <= g.tolerance_nmse);
  CHECK(sl.nmse <= g.tolerance_nmse);
  CHECK(sg.top1_agree == sg.rows);
  const auto c = m->streaming();
  const std::uint64_t prompt_steps = (run.ids.size() + 7) / 8, short_last = run.ids.size() % 8 && run.ids.size() % 8 <= T;
  CHECK(c.cpu_tokens == T);
  CHECK(c.steps == prompt_steps + 8);
  CHECK(c.cpu_steps == 8 + short_last);
  CHECK(c.bytes_streamed == (prompt_steps - short_last) * c.bytes_per_step);
  // The plan counts the streamed FFNs as CPU-computed in decode, streamed in prefill.
  layout.stream_cpu_tokens = T;
  const auto p = strata::tiers::layout_plan(in.demand, layout, l, 1ull << 40, opt.n_batch);
  CHECK(p.decode.host_to_gpu_bytes == doctest::Approx(0).epsilon(1e-9));
  CHECK(p.decode.handoffs == 6);
  CHECK(p.prefill.host_to_gpu_bytes == doctest::Approx(bytes / 8));
}

// With a link faster than the (slowed) CPU, --fit streams the FFNs that do not fit instead of
// leaving blocks to the CPU, within a budget the Vulkan ledger enforces.
TEST_CASE("fidelity: Vulkan --fit under a tiny GPU budget streams dense FFNs (qwen3) and matches llama.cpp logits") {
  if (!vulkan_available()) return;
  const golden_model& g = *shipped("qwen3-Q4_K_M");
  const auto found = budget_for(g, [](const strata::tiers::engine_layout& l) {
    return l.n_gpu_layers == 4 && !l.streamed_layers().empty();
  });
  REQUIRE(found);
  MESSAGE("--fit streams the FFN of " << found->second.streamed_layers().size() << " blocks");
  check_fit(g, found->first, found->second);
}

TEST_CASE("tiers: --stream-layers beyond the GPU blocks, without Vulkan, with --fit, or a budget short of the ring is refused naming the sizes") {
  const golden_model& g = *shipped("qwen3-Q4_K_M");
  auto opt = fixture_options(strata::rt::backend_kind::vulkan, 2);
  opt.stream_layers = 3;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("--stream-layers 3: -ngl 2 puts 2 blocks"),
                       strata::error);
  opt = fixture_options(strata::rt::backend_kind::cpu);
  opt.stream_layers = 1;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("--stream-layers needs the Vulkan backend"),
                       strata::error);
  if (!vulkan_available()) return;
  opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.stream_layers = 1;
  opt.fit = true;
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains("--stream-layers with --fit"), strata::error);
  // The planner's check: resident weights, KV and the ring against the budget.
  opt = fixture_options(strata::rt::backend_kind::vulkan);
  opt.stream_layers = 3;
  const auto in = strata::test::fixture_placement(g, opt, true);
  const auto layout = strata::tiers::fixed_layout(in.demand, -1, {}, 0, 3);
  const auto p = strata::tiers::layout_plan(in.demand, layout, in.plan.links, 1ull << 40, opt.n_batch);
  const std::uint64_t slot = strata::tiers::ring_slot_bytes(in.demand, layout);
  REQUIRE(p.gpu_ring == 2 * slot);
  opt.gpu_budget = p.gpu_weights + p.gpu_kv + p.gpu_ring - 1;
  const std::string ring_text = "and the layer-streaming ring (2 slots of " + strata::format_byte_size(slot) + ")";
  CHECK_THROWS_WITH_AS(strata::rt::model::load(g.path, opt), doctest::Contains(ring_text.c_str()), strata::error);
  // The backend's check as it allocates: some budget holds the activations and the resident
  // weights but not the ring; the load then names the ring, its slots and the budget.
  bool ring_refused = false;
  for (std::uint64_t b = p.gpu_weights + p.gpu_kv + p.gpu_ring; b < p.gpu_total() + 4 * slot && !ring_refused; b += slot / 4) {
    opt.gpu_budget = b;
    try {
      strata::rt::model::load(g.path, opt);
    } catch (const strata::error& e) {
      const std::string what = e.what();
      ring_refused = what.find("does not hold the layer-streaming ring (2 slots of " + strata::format_byte_size(slot)) !=
                     std::string::npos;
      if (ring_refused) MESSAGE(what);
    }
  }
  CHECK(ring_refused);
}
