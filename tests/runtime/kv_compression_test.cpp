// Compressed KV caches on the fixture models: logits NMSE and top-1 agreement against the f16
// cache at every prompt position (one batched prefill) and over 32 decoded tokens, for tq4, tq3,
// K q8_0 + V tq3, K tq4 + V tq3 and q8_0, with no full-precision window (every position reads
// compressed keys and values) and with the default window of 128. Prefix reuse must give the
// same logits as evaluating the whole prompt at once. The gates are regression limits set from
// the measured values with headroom, not accuracy claims (the fixtures have random weights).
#include <cstdlib>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "strata/kernels/cpu/kv_storage.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"
#include "support/vulkan_here.hpp"

namespace {

using strata::kv::kv_type;

struct kv_case {
  const char* name;
  kv_type k, v;
  std::uint32_t window;
  double max_nmse;     // gate on prefill and decode NMSE vs f16 KV
  double min_top1;     // gate on the fraction of prompt positions whose argmax matches f16 KV
};

// Limits from the measured worst case over the shipped fixtures (tests/runtime output, also in
// bench/RESULTS.md) with 2-3x headroom. top-1 is gated on the prefill positions only: the 32
// greedy decode steps of these random-weight models are full of near-ties (q8_0 already flips
// up to 6 of 32), so decode top-1 is reported, not gated.
constexpr kv_case cases[] = {
    {"q8_0", kv_type::q8_0, kv_type::q8_0, 0, 2e-3, 0.85},
    {"tq4", kv_type::tq4, kv_type::tq4, 0, 5e-2, 0.65},
    {"tq3", kv_type::tq3, kv_type::tq3, 0, 0.15, 0.5},
    {"tq2", kv_type::tq2, kv_type::tq2, 0, 0.5, 0.25},
    {"k-q8_0/v-tq3", kv_type::q8_0, kv_type::tq3, 0, 0.15, 0.5},
    {"k-tq4/v-tq3", kv_type::tq4, kv_type::tq3, 0, 0.15, 0.5},
    {"tq3 window 128", kv_type::tq3, kv_type::tq3, 128, 2e-2, 0.9},
};

struct run_logits {
  std::vector<float> prefill, decode;
};

run_logits evaluate(const strata::test::golden_model& g, const strata::test::golden_run& run, kv_type k, kv_type v,
                    std::uint32_t window, strata::rt::backend_kind backend = strata::rt::backend_kind::cpu) {
  strata::rt::engine_options opt;
  opt.backend = backend;
  opt.threads = 2;
  opt.n_ctx = 512;
  opt.n_batch = 256;
  opt.type_k = k;
  opt.type_v = v;
  opt.kv_window = window;
  auto model = strata::rt::model::load(g.path, opt);
  strata::rt::session s(*model);
  run_logits out;
  s.prefill(run.ids, &out.prefill);
  for (std::size_t i = 0; i < run.greedy.size(); ++i) {
    const auto l = s.decode(run.greedy[i]);
    out.decode.insert(out.decode.end(), l.begin(), l.end());
  }
  return out;
}

}  // namespace

TEST_CASE("compressed KV vs f16 KV on the fixture models: NMSE and top-1 at every position") {
  const auto models = strata::test::local_golden();
  REQUIRE(!models.empty());
  for (const auto& g : models) {
    CAPTURE(g.name);
    // The long prompt (~160 tokens) exercises the most cached positions.
    const auto& run = g.runs.back();
    CAPTURE(run.prompt);
    const auto ref = evaluate(g, run, kv_type::f16, kv_type::f16, 0);
    const std::size_t V = ref.prefill.size() / run.ids.size();
    for (const auto& c : cases) {
      CAPTURE(c.name);
      const auto got = evaluate(g, run, c.k, c.v, c.window);
      const auto p = strata::test::compare_logits(got.prefill, ref.prefill, V);
      const auto d = strata::test::compare_logits(got.decode, ref.decode, V);
      MESSAGE(g.name << " " << run.prompt << " [" << std::string(c.name) << "] prefill nmse " << p.nmse << " top1 " << p.top1_agree
                     << "/" << p.rows << "; decode nmse " << d.nmse << " top1 " << d.top1_agree << "/" << d.rows);
      CHECK(p.nmse <= c.max_nmse);
      CHECK(d.nmse <= c.max_nmse);
      CHECK(double(p.top1_agree) >= c.min_top1 * double(p.rows));
    }
  }
}

TEST_CASE("compressed KV: prefix reuse gives the logits of a full evaluation") {
  const auto models = strata::test::local_golden();
  REQUIRE(!models.empty());
  const auto& g = models.front();
  const auto& ids = g.runs.back().ids;
  for (const kv_type t : {kv_type::tq3, kv_type::q8_0}) {
    CAPTURE(strata::kv::name_of(t));
    strata::rt::engine_options opt;
    opt.threads = 2;
    opt.n_ctx = 512;
    opt.n_batch = 64;  // the prompt spans several batches; the window ring is 16 + 64 rows
    opt.type_k = opt.type_v = t;
    opt.kv_window = 16;
    auto model = strata::rt::model::load(g.path, opt);
    strata::rt::session s(*model);
    const std::vector<std::int32_t> head(ids.begin(), ids.begin() + std::ptrdiff_t(ids.size() / 2));
    s.prefill(head);
    const auto a = s.prefill(ids);
    const std::vector<float> reused(a.begin(), a.end());
    CHECK(s.reused_tokens() == head.size());
    s.clear();
    const auto b = s.prefill(ids);
    REQUIRE(b.size() == reused.size());
    for (std::size_t i = 0; i < b.size(); ++i) CHECK(reused[i] == b[i]);
  }
}

TEST_CASE("compressed KV: unsupported head dims are named") {
  const auto models = strata::test::local_golden();
  REQUIRE(!models.empty());
  strata::kv::kv_config c;
  c.n_layer = 1;
  c.n_head_kv = 1;
  c.head_dim = 72;
  c.n_ctx = 32;
  c.type_k = kv_type::tq3;
  CHECK_THROWS_WITH(strata::kernels::cpu::kv_storage{c}, doctest::Contains("head_dim 72"));
  c.type_k = kv_type::q8_0;
  c.head_dim = 48;
  CHECK_THROWS_WITH(strata::kernels::cpu::kv_storage{c}, doctest::Contains("head_dim is 48"));
  CHECK(strata::kv::parse_kv_cache_types("tq3", "q8_0", "").k == kv_type::q8_0);
  CHECK(strata::kv::parse_kv_cache_types("tq3", "q8_0", "").v == kv_type::tq3);
  CHECK_THROWS_WITH(strata::kv::parse_kv_type("tq5"), doctest::Contains("supported: f16, f32, q8_0, tq4, tq3, tq2"));
}

TEST_CASE("compressed KV: two sequences interleaved in one batch match separate runs") {
  const auto models = strata::test::local_golden();
  REQUIRE(!models.empty());
  const auto& g = models.front();
  const auto& a = g.runs.back().ids;   // long prompt
  const auto& b = g.runs.front().ids;  // short prompt
  strata::rt::engine_options opt;
  opt.threads = 2;
  opt.n_ctx = 512;
  opt.n_batch = 256;
  opt.n_seq = 2;
  opt.type_k = kv_type::tq4;
  opt.type_v = kv_type::tq3;
  opt.kv_window = 4;  // the f16 ring and the compressed rows are both read, per sequence
  auto model = strata::rt::model::load(g.path, opt);
  const std::size_t V = model->hparams().n_vocab;
  // One batch: a's tokens and b's tokens alternating while both last, every row wants logits.
  std::vector<std::int32_t> toks, pos;
  std::vector<std::uint32_t> seqs;
  std::vector<std::size_t> a_row, b_row;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size()) {
      a_row.push_back(toks.size());
      toks.push_back(a[i]), pos.push_back(std::int32_t(i)), seqs.push_back(0);
    }
    if (i < b.size()) {
      b_row.push_back(toks.size());
      toks.push_back(b[i]), pos.push_back(std::int32_t(i)), seqs.push_back(1);
    }
  }
  const std::vector<std::uint8_t> want(toks.size(), 1);
  std::vector<float> logits(toks.size() * V);
  model->forward({toks, pos, seqs, want}, logits);

  for (int which = 0; which < 2; ++which) {
    const auto& ids = which == 0 ? a : b;
    const auto& rows = which == 0 ? a_row : b_row;
    strata::rt::engine_options one = opt;
    one.n_seq = 1;
    auto m1 = strata::rt::model::load(g.path, one);
    strata::rt::session s(*m1);
    std::vector<float> all;
    s.prefill(ids, &all);
    // Each sequence caches the same bits as in a run of its own and reads only its own rows and
    // ring; only batch-shape effects in the matmuls could differ (none are expected).
    double num = 0, den = 0;
    for (std::size_t r = 0; r < ids.size(); ++r)
      for (std::size_t c = 0; c < V; ++c) {
        const double d = double(logits[rows[r] * V + c]) - all[r * V + c];
        num += d * d;
        den += double(all[r * V + c]) * all[r * V + c];
      }
    CAPTURE(which);
    CHECK(num / den < 1e-10);
  }
}

// The Vulkan backend's compressed KV (kv_store_q / attention_q) against the CPU backend's on
// the fixture models: the same codes are stored (bit-exact quantize-on-append, tests/vulkan),
// so the logits differ only by the two backends' float arithmetic (matmuls, attention order),
// far below the compression error itself (the f16 -> tq3 NMSE above is ~1e-2..1e-1).
TEST_CASE("compressed KV: Vulkan backend matches the CPU backend's compressed-KV logits (vulkan)") {
  if (!strata::test::vulkan_here("Vulkan compressed-KV fidelity")) return;
  const auto models = strata::test::local_golden();
  REQUIRE(!models.empty());
  struct vk_case {
    const char* name;
    kv_type k, v;
    std::uint32_t window;
  };
  constexpr vk_case vk_cases[] = {{"f16", kv_type::f16, kv_type::f16, 0}, {"tq3", kv_type::tq3, kv_type::tq3, 0},
                                  {"tq4", kv_type::tq4, kv_type::tq4, 0},
                                  {"k-q8_0/v-tq3 window 16", kv_type::q8_0, kv_type::tq3, 16}};
  // The F32 fixture: the CPU backend multiplies F32 weights without quantizing activations,
  // so both backends feed (nearly) the same K and V to the quantizer.
  const auto it = std::find_if(models.begin(), models.end(), [](const auto& m) { return m.name == "llama-F32"; });
  const auto& g = it != models.end() ? *it : models.front();
  CAPTURE(g.name);
  const auto& run = g.runs.back();
  for (const auto& c : vk_cases) {
    CAPTURE(std::string(c.name));
    const auto cpu = evaluate(g, run, c.k, c.v, c.window);
    // Codes are a discontinuous function of K and V: on a GPU with tensor cores the prompt's
    // matmuls round weights and activations to f16, which moves K/V by ~2^-11 and flips codes at
    // cell boundaries (measured on the H100: tq3 prefill NMSE 5.8e-4 with them, f16 KV 5e-7).
    // This test is about the codec and attention path, so both sides multiply in f32.
    // STRATA_VK_TAIL=8 too (compressed caches): the split decode attention's merge runs as its
    // last workgroup's tail (split_combine.glsl), the norms as their producers' tails.
    for (const bool tail : {false, c.k != kv_type::f16}) {
      CAPTURE(tail);
      ::setenv("STRATA_VK_COOPMAT", "0", 1);
      if (tail) ::setenv("STRATA_VK_TAIL", "8", 1);
      const auto gpu = evaluate(g, run, c.k, c.v, c.window, strata::rt::backend_kind::vulkan);
      ::unsetenv("STRATA_VK_COOPMAT");
      ::unsetenv("STRATA_VK_TAIL");
      const std::size_t V = cpu.prefill.size() / run.ids.size();
      const auto p = strata::test::compare_logits(gpu.prefill, cpu.prefill, V);
      const auto d = strata::test::compare_logits(gpu.decode, cpu.decode, V);
      MESSAGE(g.name << " [" << std::string(c.name) << std::string(tail ? ", tails" : "") << "] Vulkan vs CPU: prefill nmse " << p.nmse
                     << " top1 " << p.top1_agree << "/" << p.rows << "; decode nmse " << d.nmse << " top1 " << d.top1_agree
                     << "/" << d.rows);
      CHECK(p.nmse <= 1e-4);
      CHECK(d.nmse <= 1e-4);
      if (c.k == kv_type::f16) break;  // {false, false}: once
    }
  }
}
