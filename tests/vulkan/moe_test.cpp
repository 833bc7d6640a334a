// moe_ffn on the GPU (router matmul, top-k, expert matvecs by id, SwiGLU, combine) for the
// softmax router (Qwen3-MoE) and the sigmoid routers (Llama 4, which weights the expert input;
// and sigmoid weights applied at the combine, the GPU's other sigmoid path), k = 1..8. Gate: a
// float64 evaluation of the same routing and experts on the C++-dequantized weights (the F32
// router stays in f32 on every device, so its logits are exact). The CPU backend, which quantizes activations before each matmul, is compared loosely.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/scoped_env.hpp"
#include "vulkan/vk_harness.hpp"

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

constexpr std::uint32_t n_embd = 256, n_ff = 256, moe_table_rows = 160;  // rows of x: token ids up to 3 + 128

struct moe_case {
  const char* name;
  graph::moe_gating gating;
  graph::moe_weighting weighting;
  std::uint32_t n_expert, k, n_tok;
  gguf::type_id up, down;  // gate and up share a format, as in llama-quantize's mixes
  std::uint32_t ff = n_ff;  // the experts' intermediate width
  // Experts 1, 5, 9 and 12 share a router row that gives token row 3 (the first token) its four largest
  // logits, equal to the last bit: a top-k of fewer than four must take the lower ids.
  bool tied = false;
};

struct moe_model {
  vkt::weight_store store;
  const gguf::tensor_info *x, *inp, *gate, *up, *down;
  std::vector<float> xs, inp_f;
  vkt::random_weight g, u, d;
};

// `steps` steps of the same shape (the GPU records the first and replays the rest); the last one's output.
template <class Backend>
std::vector<float> run_moe(Backend& be, const moe_case& c, const moe_model& m, int steps = 1) {
  const auto xt = be.load(*m.x), inp = be.load(*m.inp), gate = be.load(*m.gate), up = be.load(*m.up),
             down = be.load(*m.down);
  const std::uint32_t n = c.n_tok, pairs = n * c.k;
  const auto x = be.alloc(n, n_embd), out = be.alloc(n, n_embd), logits = be.alloc(n, c.n_expert);
  const auto xin = be.alloc(pairs, n_embd), g = be.alloc(pairs, c.ff), u = be.alloc(pairs, c.ff), y = be.alloc(pairs, n_embd);
  be.reserve(n, pairs);
  auto kv = be.make_kv(vkt::small_kv());
  const auto b = vkt::batch_data::rows(n, 3);
  std::vector<float> result;
  for (int i = 0; i < steps; ++i)
    result = vkt::run_step(be, b, [&] {
      be.embed(xt, x.all());
      be.moe_ffn({&inp, &gate, &up, &down}, {c.gating, c.weighting, c.k}, x.all(),
                 {logits.all(), xin.all(), g.all(), u.all(), y.all()}, out.all());
      return out.all();
    });
  return result;
}

// Steps of different sizes and token rows on one backend (steps of one size replay one recording).
template <class Backend>
std::vector<std::vector<float>> run_moe_steps(Backend& be, const moe_case& c, const moe_model& m,
                                              const std::vector<vkt::batch_data>& steps) {
  const auto xt = be.load(*m.x), inp = be.load(*m.inp), gate = be.load(*m.gate), up = be.load(*m.up),
             down = be.load(*m.down);
  std::uint32_t most = 0;
  for (const auto& b : steps) most = std::max(most, std::uint32_t(b.tokens.size()));
  const std::uint32_t pairs = most * c.k;
  const auto x = be.alloc(most, n_embd), out = be.alloc(most, n_embd), logits = be.alloc(most, c.n_expert);
  const auto xin = be.alloc(pairs, n_embd), g = be.alloc(pairs, c.ff), u = be.alloc(pairs, c.ff), y = be.alloc(pairs, n_embd);
  be.reserve(most, pairs);
  auto kv = be.make_kv(vkt::small_kv());
  std::vector<std::vector<float>> result;
  for (const auto& b : steps) {
    const auto n = std::uint32_t(b.tokens.size());
    result.push_back(vkt::run_step(be, b, [&] {
      be.embed(xt, x.view(n));
      be.moe_ffn({&inp, &gate, &up, &down}, {c.gating, c.weighting, c.k}, x.view(n),
                 {logits.view(n), xin.view(n * c.k), g.view(n * c.k), u.view(n * c.k), y.view(n * c.k)}, out.view(n));
      return out.view(n);
    }));
  }
  return result;
}

// The same FFN in float64: softmax over all experts renormalised over the top k (weights
// floored at 2^-14 as ggml does), or sigmoid of the top-k logits; ties keep the lower id.
// int8: the experts' inputs (x, or x weighted for Llama 4, and the SwiGLU output) as the
// integer matvec sees them, quantized to int8 blocks (vkt::q8_activations).
// ties: int8 codes within float rounding of a tie, (token, slot, 0 = expert input / 1 = SwiGLU
// output, element), are listed in `seen`; those in `flipped` round the other way.
struct tie_choice {
  std::vector<std::array<std::uint32_t, 4>> seen;
  std::set<std::array<std::uint32_t, 4>> flipped;
};
std::vector<double> reference(const moe_case& c, const moe_model& m, bool int8, tie_choice* ties = nullptr) {
  const std::uint32_t E = c.n_expert;
  const auto q8 = [&](const std::vector<double>& v, std::uint32_t t, std::uint32_t j, std::uint32_t stage) {
    const std::vector<float> f(v.begin(), v.end());
    if (!ties) return vkt::q8_activations(f);
    return vkt::q8_activations(f, [&](std::size_t i) {
      const std::array<std::uint32_t, 4> s{t, j, stage, std::uint32_t(i)};
      if (std::find(ties->seen.begin(), ties->seen.end(), s) == ties->seen.end()) ties->seen.push_back(s);
      return ties->flipped.count(s) > 0;
    });
  };
  const bool weight_input = c.weighting == graph::moe_weighting::input;
  auto matvec = [](const float* w, std::uint32_t rows, std::uint32_t K, const std::vector<double>& v) {
    std::vector<double> r(rows);
    for (std::uint32_t i = 0; i < rows; ++i) {
      double s = 0;
      for (std::uint32_t k = 0; k < K; ++k) s += double(w[std::size_t(i) * K + k]) * v[k];
      r[i] = s;
    }
    return r;
  };
  std::vector<double> out(std::size_t(c.n_tok) * n_embd, 0.0);
  for (std::uint32_t t = 0; t < c.n_tok; ++t) {
    const float* xr = m.xs.data() + std::size_t(3 + t) * n_embd;
    const std::vector<double> x(xr, xr + n_embd);
    const auto l = matvec(m.inp_f.data(), E, n_embd, x);
    std::vector<std::uint32_t> order(E);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return l[a] > l[b]; });
    std::vector<double> w(c.k);
    if (c.gating == graph::moe_gating::softmax) {
      const double mx = l[order[0]];
      double sum = 0, wsum = 0;
      for (const double v : l) sum += std::exp(v - mx);
      for (std::uint32_t j = 0; j < c.k; ++j) wsum += w[j] = std::exp(l[order[j]] - mx) / sum;
      for (auto& v : w) v /= std::max(wsum, 6.103515625e-5);
    } else {
      for (std::uint32_t j = 0; j < c.k; ++j) w[j] = 1.0 / (1.0 + std::exp(-l[order[j]]));
    }
    for (std::uint32_t j = 0; j < c.k; ++j) {
      const std::size_t e = order[j];
      std::vector<double> xi = x;
      if (weight_input)
        for (auto& v : xi) v *= float(w[j]);  // the GPU's weights are floats
      if (int8) xi = q8(xi, t, weight_input ? j : 0, 0);  // unweighted: one quantized row per token
      const auto gv = matvec(m.g.dequant.data() + e * c.ff * n_embd, c.ff, n_embd, xi);
      const auto uv = matvec(m.u.dequant.data() + e * c.ff * n_embd, c.ff, n_embd, xi);
      std::vector<double> h(c.ff);
      for (std::uint32_t i = 0; i < c.ff; ++i) h[i] = gv[i] / (1.0 + std::exp(-gv[i])) * uv[i];
      if (int8) h = q8(h, t, j, 1);
      const auto yv = matvec(m.d.dequant.data() + e * n_embd * c.ff, n_embd, c.ff, h);
      for (std::uint32_t i = 0; i < n_embd; ++i) out[std::size_t(t) * n_embd + i] += (weight_input ? 1.0 : w[j]) * yv[i];
    }
  }
  return out;
}

void make_model(moe_model& m, const moe_case& c, std::mt19937& rng) {
  m.xs = vkt::normal_floats(std::size_t(moe_table_rows) * n_embd, rng);
  m.inp_f = vkt::normal_floats(std::size_t(c.n_expert) * n_embd, rng, 0.1f);
  if (c.tied)
    for (const std::uint32_t e : {1u, 5u, 9u, 12u})
      for (std::uint32_t i = 0; i < n_embd; ++i) m.inp_f[std::size_t(e) * n_embd + i] = 0.1f * m.xs[3 * n_embd + i];
  m.g = vkt::make_weight(c.up, std::size_t(c.n_expert) * c.ff, n_embd, rng, 0.1f);
  m.u = vkt::make_weight(c.up, std::size_t(c.n_expert) * c.ff, n_embd, rng, 0.1f);
  m.d = vkt::make_weight(c.down, std::size_t(c.n_expert) * n_embd, c.ff, rng, 0.1f);
  m.x = &m.store.add_f32("test.x", m.xs, n_embd, moe_table_rows);
  m.inp = &m.store.add_f32("blk.0.ffn_gate_inp.weight", m.inp_f, n_embd, c.n_expert);
  m.gate = &m.store.add("blk.0.ffn_gate_exps.weight", c.up, m.g.bytes, n_embd, c.ff, c.n_expert);
  m.up = &m.store.add("blk.0.ffn_up_exps.weight", c.up, m.u.bytes, n_embd, c.ff, c.n_expert);
  m.down = &m.store.add("blk.0.ffn_down_exps.weight", c.down, m.d.bytes, c.ff, n_embd, c.n_expert);
}

TEST_CASE("vulkan ops: moe_ffn (softmax and sigmoid routers, k = 1..8) vs float64 and the CPU backend") {
  if (!vkt::available()) return;
  using gguf::type_id;
  constexpr auto softmax = graph::moe_gating::softmax, sigmoid = graph::moe_gating::sigmoid;
  constexpr auto output = graph::moe_weighting::output, input = graph::moe_weighting::input;
  // Two format pairs only: every format's matvec runs in matmul_test, and each new shader costs
  // lavapipe about a second of LLVM compilation at its first dispatch.
  const moe_case cases[] = {
      {"softmax top-2 of 16, 5 tokens, Q4_K/Q6_K", softmax, output, 16, 2, 5, type_id::q4_k, type_id::q6_k},
      {"softmax top-8 of 64, 9 tokens, Q8_0", softmax, output, 64, 8, 9, type_id::q8_0, type_id::q8_0},
      {"softmax top-5 of 16, 1 token, Q4_K/Q6_K", softmax, output, 16, 5, 1, type_id::q4_k, type_id::q6_k},
      // Tied logits (ties go to the lower id): a decode step (the gate/up matvec's prologue) and a few tokens.
      {"softmax top-3 of 16, four tied logits, 1 token, Q4_K/Q6_K", softmax, output, 16, 3, 1, type_id::q4_k, type_id::q6_k,
       n_ff, true},
      {"softmax top-2 of 16, four tied logits, 5 tokens, Q4_K/Q6_K", softmax, output, 16, 2, 5, type_id::q4_k, type_id::q6_k,
       n_ff, true},
      {"sigmoid top-1 of 16 (weighted input), 7 tokens, Q4_K/Q6_K", sigmoid, input, 16, 1, 7, type_id::q4_k,
       type_id::q6_k},
      {"sigmoid top-4 of 16 (weighted input), 3 tokens, Q8_0", sigmoid, input, 16, 4, 3, type_id::q8_0, type_id::q8_0},
      {"sigmoid top-3 of 16 (weighted combine), 4 tokens, Q4_K/Q6_K", sigmoid, output, 16, 3, 4, type_id::q4_k,
       type_id::q6_k},
      // More than two pairs per expert: pairs grouped by expert (MOE_GROUP), chunks of up to 8
      // pairs share each expert's weight reads; full and partial chunks, experts without pairs.
      {"softmax top-4 of 16, 37 tokens (grouped), Q4_K/Q6_K", softmax, output, 16, 4, 37, type_id::q4_k, type_id::q6_k},
      {"sigmoid top-2 of 16 (weighted input), 21 tokens (grouped), Q8_0", sigmoid, input, 16, 2, 21, type_id::q8_0,
       type_id::q8_0},
      // Either side of the grouping threshold: two pairs per expert run a matvec per pair, one more
      // pair groups.
      {"softmax top-2 of 16, 16 tokens (per pair), Q4_K/Q6_K", softmax, output, 16, 2, 16, type_id::q4_k, type_id::q6_k},
      {"softmax top-2 of 16, 17 tokens (grouped), Q4_K/Q6_K", softmax, output, 16, 2, 17, type_id::q4_k, type_id::q6_k},
      // Prompt-sized steps (256+ pairs): grouped experts on tensor cores where the device has
      // them (int8 ones: mul_mmq.glsl, Q4_K and Q6_K units; else f16 mul_mm_small, chunks of 32).
      {"softmax top-4 of 16, 80 tokens (grouped, tensor cores), Q4_K/Q6_K", softmax, output, 16, 4, 80, type_id::q4_k,
       type_id::q6_k},
      {"sigmoid top-4 of 16 (weighted input), 70 tokens (grouped, tensor cores), Q6_K/Q4_K", sigmoid, input, 16, 4, 70,
       type_id::q6_k, type_id::q4_k},
      // The int8 chunk by pairs per expert (mmq_chunk_for): 24 -> chunks of 64, 4 -> chunks of 16.
      {"softmax top-8 of 16, 48 tokens (grouped, tensor cores, 24 pairs an expert), Q4_K/Q6_K", softmax, output, 16, 8,
       48, type_id::q4_k, type_id::q6_k},
      {"softmax top-2 of 64, 128 tokens (grouped, tensor cores, 4 pairs an expert), Q4_K/Q6_K", softmax, output, 64, 2,
       128, type_id::q4_k, type_id::q6_k},
  };
  // Every top-k runs in its lean form by default (moe_topk.glsl TOPK_LEAN: each subgroup selects, the
  // weights from the k selected logits alone). Cases run again in the full form (STRATA_VK_TOPK_LEAN=0, the
  // fallback where k exceeds the subgroup): a decode step (the gate/up matvec's prologue), a few tokens (the
  // MOE_TOPK dispatch), the tied logits, a sigmoid router weighting the combine, and a grouped step.
  const std::set<std::string> full_too{cases[0].name, cases[2].name, cases[3].name, cases[4].name, cases[7].name, cases[8].name};
  std::mt19937 rng(4242);
  for (const auto& c : cases) {
    CAPTURE(c.name);
    moe_model m;
    make_model(m, c, rng);
    std::vector<float> cpu;
    {
      vkt::cpu_backend be;
      cpu = run_moe(be, c, m);
    }
    for (const bool lean : {true, false}) {
      if (!lean && !full_too.count(c.name)) continue;
      CAPTURE(lean);
      const test::scoped_env lean_env("STRATA_VK_TOPK_LEAN", lean ? "1" : "0");
      std::vector<float> g;
      bool int8 = false, f16 = false, int8_tc = false;
      {
        gpu::backend be;
        g = run_moe(be, c, m);
        // Grouped steps (more than two pairs per expert) may run on the tensor cores (f16); else the
        // expert matvecs take int8 activations at every step size where the format has an int8 unit.
        f16 = be.tensor_core_experts(c.n_tok * c.k, c.n_expert, n_embd, c.ff);
        // Int8 tensor cores: the same int8 activations as the integer matvecs, the weights exact.
        int8_tc = f16 && be.int8_tensor_core_experts(c.n_tok * c.k, c.n_expert, n_embd, c.ff, c.up, c.down);
        f16 = f16 && !int8_tc;
        int8 = int8_tc || (!f16 && be.int8_activations(c.up, n_embd, 1) && be.int8_activations(c.down, c.ff, 1));
        // F32 weights never take the tensor cores: the router's logits (which choose the experts)
        // are the reference's exact ones.
        CHECK_FALSE(be.tensor_core_matmul(type_id::f32, n_embd, c.n_tok));
      }
      // A code within float rounding of a tie may round either way on the GPU (one such code of
      // the weighted-input case moves with the last bit of its routing weight and costs 4.7e-9):
      // each is rounded the other way where that brings the reference closer to the GPU.
      tie_choice ties;
      double e64 = vkt::nmse_f64(g, reference(c, m, int8, &ties));
      for (const auto& s : std::vector(ties.seen)) {
        ties.flipped.insert(s);
        if (const double e = vkt::nmse_f64(g, reference(c, m, int8, &ties)); e < e64) e64 = e;
        else ties.flipped.erase(s);
      }
      const double ecpu = test::nmse(g, cpu);
      MESSAGE((std::string(c.name) + (int8_tc ? " (int8 tensor-core experts)" : int8 ? " (int8 experts)" : f16 ? " (f16 tensor-core experts)" : "") +
               (lean ? "" : " (full top-k)"))
              << ": NMSE vs float64 " << e64 << " (" << ties.flipped.size() << " of " << ties.seen.size()
              << " codes near a tie rounded the other way), vs CPU backend " << ecpu);
      CHECK(e64 <= (f16 ? vkt::tol_matmul_f64_f16_tiles : vkt::tol_moe_f64));
      CHECK(ecpu <= vkt::tol_moe_cpu);
    }
  }
}

// A token whose router logits are all NaN (a broken model or input): no logit is a maximum, so the
// top-k may leave that token's ids unset; every kernel that reads ids clamps them to the experts'
// tensor (mmvq.glsl, matvec.glsl, moe.glsl MOE_GROUP). The step must complete, and the other tokens
// must come out as the CPU backend computes them: a decode step (the gate/up prologue), a few
// tokens (the MOE_TOPK dispatch, a matvec per pair) and a grouped step, in both top-k forms.
TEST_CASE("vulkan ops: moe_ffn with one token's router logits NaN completes, the other tokens match the CPU backend") {
  if (!vkt::available()) return;
  using gguf::type_id;
  const moe_case cases[] = {
      {"NaN logits, top-3 of 16, 1 token", graph::moe_gating::softmax, graph::moe_weighting::output, 16, 3, 1,
       type_id::q4_k, type_id::q6_k},
      {"NaN logits, top-2 of 16, 5 tokens", graph::moe_gating::softmax, graph::moe_weighting::output, 16, 2, 5,
       type_id::q4_k, type_id::q6_k},
      {"NaN logits, top-4 of 16, 37 tokens (grouped)", graph::moe_gating::softmax, graph::moe_weighting::output, 16, 4,
       37, type_id::q4_k, type_id::q6_k},
  };
  std::mt19937 rng(77);
  for (const auto& c : cases) {
    CAPTURE(c.name);
    moe_model m;
    make_model(m, c, rng);
    for (std::uint32_t i = 0; i < n_embd; ++i) m.xs[3 * n_embd + i] = std::numeric_limits<float>::quiet_NaN();  // token 0
    m.x = &m.store.add_f32("test.x_nan", m.xs, n_embd, moe_table_rows);
    std::vector<float> cpu;
    {
      vkt::cpu_backend be;
      cpu = run_moe(be, c, m);
    }
    for (const bool lean : {true, false}) {
      CAPTURE(lean);
      const test::scoped_env lean_env("STRATA_VK_TOPK_LEAN", lean ? "1" : "0");
      std::vector<float> g;
      {
        gpu::backend be;
        g = run_moe(be, c, m, 2);  // recorded, then replayed
      }
      REQUIRE(g.size() == std::size_t(c.n_tok) * n_embd);
      if (c.n_tok == 1) continue;  // only the NaN token: completing is the check
      const std::vector<float> g_rest(g.begin() + n_embd, g.end()), cpu_rest(cpu.begin() + n_embd, cpu.end());
      CHECK(std::all_of(g_rest.begin(), g_rest.end(), [](float v) { return std::isfinite(v); }));
      CHECK(test::nmse(g_rest, cpu_rest) <= vkt::tol_moe_cpu);
    }
  }
}

// Memory tiers: the experts of block 0 computed by the CPU inside the GPU step (router on the
// GPU, rows and logits handed to the CPU kernels, the sum copied back). The experts then run the
// CPU backend's code on the CPU backend's kernels, so the result is the CPU backend's up to the
// router logits' float rounding (GPU vs CPU sums), which moves the gate weights by ~1e-7
// relative: tol_moe_handoff. The second step replays the recorded one (hand-off included).
TEST_CASE("vulkan ops: moe_ffn with the experts on the CPU (mid-step hand-off) equals the CPU backend") {
  if (!vkt::available()) return;
  using gguf::type_id;
  constexpr double tol_moe_handoff = 1e-10;
  const moe_case cases[] = {
      {"softmax top-2 of 16, 5 tokens, Q4_K/Q6_K", graph::moe_gating::softmax, graph::moe_weighting::output, 16, 2, 5,
       type_id::q4_k, type_id::q6_k},
      {"softmax top-5 of 16, 1 token, Q8_0", graph::moe_gating::softmax, graph::moe_weighting::output, 16, 5, 1,
       type_id::q8_0, type_id::q8_0},
      {"sigmoid top-1 of 16 (weighted input), 7 tokens, Q4_K/Q6_K", graph::moe_gating::sigmoid,
       graph::moe_weighting::input, 16, 1, 7, type_id::q4_k, type_id::q6_k},
  };
  std::mt19937 rng(77);
  for (const auto& c : cases) {
    CAPTURE(c.name);
    moe_model m;
    make_model(m, c, rng);
    gpu::backend_options o;
    o.cpu_expert_layers = {0};
    o.cpu_threads = 2;
    gpu::backend be(o), once(o);
    const auto replayed = run_moe(be, c, m, 2);
    CHECK(be.handoffs_per_step() == 1);
    CHECK(be.description().find("on the CPU") != std::string::npos);
    const auto first = run_moe(once, c, m);
    vkt::cpu_backend cb;
    const auto cpu = run_moe(cb, c, m);
    const double e = test::nmse(first, cpu);
    MESSAGE(std::string(c.name) << ": hand-off vs CPU backend NMSE " << e);
    CHECK(e <= tol_moe_handoff);
    CHECK(replayed == first);
    CHECK(be.memory_use().weights < m.g.bytes.size());  // the expert tensors were not uploaded
  }
}

// Memory tiers: the GPU's slice of a CPU block's experts (cpu_experts.cpp record_shared_moe,
// STRATA_VK_GPU_SLICE): in a one-token step of a block whose experts have a pinned copy
// (expert streaming), the GPU computes every routed expert's first intermediate columns (gate/up
// rows, down's inputs) from that copy and the CPU the columns after them; out = both sums. The
// same experts alone on the CPU are the reference: the slice changes only which kernels compute
// a quarter of the columns (the GPU's and the CPU's int8 activations round differently), where a
// slice counted twice or left out would move a quarter of every expert's output. The cut must
// fall on whole Q6_K/Q4_K blocks of down's rows (256 columns) and 32-column blocks for Q8_0.
TEST_CASE("vulkan ops: moe_ffn with the GPU computing a column slice of a CPU block's experts equals the CPU alone") {
  if (!vkt::available()) return;
  using gguf::type_id;
  struct slice_case {
    moe_case c;
    std::uint32_t cols25, cols60;  // the GPU's columns at STRATA_VK_GPU_SLICE=25 and 60
  };
  const slice_case cases[] = {
      {{"softmax top-2 of 16, 1 token, Q4_K/Q6_K, 1024 wide", graph::moe_gating::softmax, graph::moe_weighting::output, 16,
        2, 1, type_id::q4_k, type_id::q6_k, 1024},
       256, 512},
      {{"sigmoid top-1 of 16 (weighted input), 1 token, Q4_K/Q4_K, 1024 wide", graph::moe_gating::sigmoid,
        graph::moe_weighting::input, 16, 1, 1, type_id::q4_k, type_id::q4_k, 1024},
       256, 512},
      // 160 of 256 columns: 5 blocks of rows stored in groups of 8 (the kernel's layout follows
      // the stored row, not the columns it reads).
      {{"softmax top-5 of 16, 1 token, Q8_0, 256 wide", graph::moe_gating::softmax, graph::moe_weighting::output, 16, 5,
        1, type_id::q8_0, type_id::q8_0, 256},
       64, 160},
  };
  std::mt19937 rng(91);
  for (const auto& [c, cols25, cols60] : cases) {
    CAPTURE(c.name);
    moe_model m;
    make_model(m, c, rng);
    gpu::backend_options o;
    o.cpu_expert_layers = {0};
    o.streamed_expert_layers = {0};
    o.expert_cpu_tokens = 8;  // one-token steps hand the block to the CPU
    o.cpu_threads = 2;
    std::vector<float> alone, all_gpu;
    {
      const test::scoped_env off("STRATA_VK_GPU_SLICE", "0");  // top-1 blocks slice by default
      gpu::backend be(o);
      alone = run_moe(be, c, m, 2);
      CHECK(be.expert_streaming().share_blocks == 0);
      CHECK(be.description().find("the GPU computing") == std::string::npos);
    }
    {
      gpu::backend be;
      all_gpu = run_moe(be, c, m);
    }
    const double apart = test::nmse(alone, all_gpu);
    for (const auto& [percent, cols] : {std::pair{"25", cols25}, std::pair{"60", cols60}}) {
      CAPTURE(percent);
      const test::scoped_env slice("STRATA_VK_GPU_SLICE", percent);
      gpu::backend be(o);
      const auto sliced = run_moe(be, c, m, 2);  // recorded, then replayed
      CHECK(be.description().find(std::string("the GPU computing the first ") + percent +
                                  "% of each routed expert's columns from the pinned copy in 1-token steps") != std::string::npos);
      const auto st = be.expert_streaming();
      CHECK(st.share_blocks == 2);
      // The GPU read its columns' share of each routed expert's gate, up and down bytes.
      const std::uint64_t expert = (m.g.bytes.size() + m.u.bytes.size() + m.d.bytes.size()) / c.n_expert;
      CHECK(st.share_bytes == 2 * std::uint64_t(c.k) * expert * cols / c.ff);
      // The sum lies between the CPU's and the GPU's own results: closer to each than they are
      // to each other (a slice counted twice or left out is far from both).
      const double to_cpu = test::nmse(sliced, alone), to_gpu = test::nmse(sliced, all_gpu);
      MESSAGE(std::string(c.name) << ", GPU slice of " << cols << " columns: NMSE vs the CPU alone " << to_cpu << ", vs all on the GPU "
                     << to_gpu << " (those two apart: " << apart << ")");
      CHECK(to_cpu < apart);
      CHECK(to_gpu < apart);
    }
  }
}

// The GPU-cached expert tests' MoE kinds, steps (40 one-token steps over different rows, a
// 6-token step, one more token) and backend (block 0 cached, 3 slots of 16 experts).
std::vector<moe_case> cached_moe_cases() {
  using gguf::type_id;
  return {{"softmax top-2 of 16, Q4_K/Q6_K", graph::moe_gating::softmax, graph::moe_weighting::output, 16, 2, 1, type_id::q4_k,
           type_id::q6_k},
          {"sigmoid top-1 of 16 (weighted input), Q8_0", graph::moe_gating::sigmoid, graph::moe_weighting::input, 16, 1, 1,
           type_id::q8_0, type_id::q8_0}};
}
std::vector<vkt::batch_data> cached_moe_steps() {
  std::vector<vkt::batch_data> steps;
  for (std::int32_t i = 0; i < 40; ++i) steps.push_back(vkt::batch_data::rows(1, (i * 7) % 24));
  steps.push_back(vkt::batch_data::rows(6, 30));
  steps.push_back(vkt::batch_data::rows(1, 5));
  return steps;
}
gpu::backend_options cached_moe_options() {
  gpu::backend_options o;
  o.cached_expert_layers = {0};
  o.expert_slots = 3;
  o.cpu_threads = 2;
  return o;
}

// Memory tiers: the experts of block 0 GPU-cached (host memory, 3 slots of 16 experts on the
// GPU, SLRU), the split form (STRATA_VK_CACHE_LOOKUP=0): each step's routed ids come to the host, missed experts are uploaded into their
// slots and the same expert matvecs read the slots, so a step routing at most 3 experts gives
// exactly the all-GPU result. 40 one-token steps over different rows make the cache miss, hit
// and evict across replays of one recording; a 6-token step routes more experts than slots and
// is computed on the CPU (the hand-off's kernels: the CPU backend's result, tolerance as above).
TEST_CASE("vulkan ops: moe_ffn with GPU-cached experts equals the all-GPU result, overflow steps equal the CPU") {
  if (!vkt::available()) return;
  const auto cases = cached_moe_cases();
  std::mt19937 rng(99);
  for (const auto& c : cases) {
    CAPTURE(c.name);
    moe_model m;
    make_model(m, c, rng);
    const std::vector<vkt::batch_data> steps = cached_moe_steps();
    const gpu::backend_options o = cached_moe_options();
    const test::scoped_env split("STRATA_VK_CACHE_LOOKUP", "0");
    gpu::backend cached(o), all;
    const auto got = run_moe_steps(cached, c, m, steps);
    const auto want = run_moe_steps(all, c, m, steps);
    vkt::cpu_backend cb;
    const auto cpu = run_moe_steps(cb, c, m, steps);
    const gpu::expert_cache_stats st = cached.expert_cache();
    MESSAGE(std::string(c.name) << ": hits " << st.hits << ", misses " << st.misses << ", evictions " << st.evictions << ", uploaded "
                   << st.bytes_uploaded << " B, CPU block-steps " << st.cpu_blocks);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      CAPTURE(i);
      if (steps[i].tokens.size() == 1) CHECK(got[i] == want[i]);
      else CHECK(test::nmse(got[i], cpu[i]) <= 1e-10);
    }
    CHECK(st.layers == 1);
    CHECK(st.slots == 3);
    CHECK(st.cpu_blocks >= 1);
    CHECK(st.gpu_blocks + st.cpu_blocks == steps.size());
    CHECK(st.tokens == 47);
    CHECK(st.hits > 0);
    CHECK(st.evictions > 0);
    CHECK(st.misses == st.evictions + 3);  // the first 3 misses fill free slots
    CHECK(st.bytes_uploaded == st.misses * (m.g.bytes.size() + m.u.bytes.size() + m.d.bytes.size()) / 16);
    CHECK(cached.memory_use().weights < all.memory_use().weights);  // 3 of 16 experts on the GPU
    CHECK(cached.description().find("3 GPU expert slots") != std::string::npos);
  }
}

// The lookup form (the default): the expert kernels map the routed experts through the block's
// slot map themselves and read a missed expert from the host copy, so every step, the 6-token one
// too, runs the all-GPU kernels on the same bytes: bit for bit the all-GPU result, no CPU step.
// With 3 slots of 16 and no admission margin, after-step admissions fill, evict and upload.
TEST_CASE("vulkan ops: moe_ffn with GPU-cached experts read through the slot map equals the all-GPU result") {
  if (!vkt::available()) return;
  const auto cases = cached_moe_cases();
  std::mt19937 rng(99);
  const test::scoped_env margin("STRATA_VK_CACHE_MARGIN", "0");
  for (const auto& c : cases) {
    CAPTURE(c.name);
    moe_model m;
    make_model(m, c, rng);
    const std::vector<vkt::batch_data> steps = cached_moe_steps();
    const gpu::backend_options o = cached_moe_options();
    gpu::backend cached(o), all;
    const auto got = run_moe_steps(cached, c, m, steps);
    const auto want = run_moe_steps(all, c, m, steps);
    const gpu::expert_cache_stats st = cached.expert_cache();
    MESSAGE(std::string(c.name) << ": hits " << st.hits << ", misses " << st.misses << ", evictions " << st.evictions << ", uploaded "
                   << st.bytes_uploaded << " B, read from host memory " << st.host_read_bytes << " B");
    for (std::size_t i = 0; i < steps.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i] == want[i]);
    }
    const std::uint64_t expert_bytes = (m.g.bytes.size() + m.u.bytes.size() + m.d.bytes.size()) / 16;
    CHECK(st.lookup);
    CHECK(st.lookup_blocks == steps.size());
    CHECK(st.gpu_blocks == steps.size());
    CHECK(st.cpu_blocks == 0);
    CHECK(st.tokens == 47);
    CHECK(st.hits > 0);
    CHECK(st.misses > 0);
    CHECK(st.host_read_bytes == st.misses * expert_bytes);  // each miss read once, whole
    CHECK(st.evictions > 0);
    CHECK(st.bytes_uploaded == (st.evictions + 3) * expert_bytes);  // the slots start empty: 3 admissions evict nothing
    CHECK(cached.memory_use().weights < all.memory_use().weights);
  }
}

// The expert cache's misses on the CPU with the GPU's share of a miss (expert_cache_misses.cpp,
// STRATA_VK_CACHE_SLICE): in a one-token step of a top-1 block, the GPU computes the first columns
// of the routed expert from the host copy when no slot holds it (MISS_ONLY), the CPU the columns
// after them, and every miss goes to the CPU. A hit computes nothing in the share (the step equals
// the all-GPU result bit for bit, as without it); a miss lies between the CPU's and the GPU's own
// results (a share counted twice, or counted after a hit, is far from both).
TEST_CASE("vulkan ops: moe_ffn with GPU-cached experts, misses on the CPU and the GPU's share of each miss") {
  if (!vkt::available()) return;
  using gguf::type_id;
  const moe_case cases[] = {
      {"sigmoid top-1 of 16 (weighted input), Q4_K/Q4_K, 1024 wide", graph::moe_gating::sigmoid, graph::moe_weighting::input, 16, 1,
       1, type_id::q4_k, type_id::q4_k, 1024},
      {"softmax top-1 of 16, Q4_K/Q6_K, 1024 wide", graph::moe_gating::softmax, graph::moe_weighting::output, 16, 1, 1,
       type_id::q4_k, type_id::q6_k, 1024},
  };
  std::mt19937 rng(93);
  const test::scoped_env margin("STRATA_VK_CACHE_MARGIN", "0");
  for (const auto& c : cases) {
    CAPTURE(c.name);
    moe_model m;
    make_model(m, c, rng);
    const std::vector<vkt::batch_data> steps = cached_moe_steps();
    gpu::backend_options o = cached_moe_options();
    o.expert_cpu_misses = 1.0f;
    std::vector<std::vector<float>> alone, shared, all_gpu;
    {
      const test::scoped_env off("STRATA_VK_CACHE_SLICE", "0");
      gpu::backend be(o);
      alone = run_moe_steps(be, c, m, steps);
      CHECK(be.expert_cache().share_blocks == 0);
      CHECK(be.expert_cache().miss_slice_percent == 0);
    }
    {
      gpu::backend be;
      all_gpu = run_moe_steps(be, c, m, steps);
    }
    gpu::expert_cache_stats st;
    {
      const test::scoped_env slice("STRATA_VK_CACHE_SLICE", "25");
      gpu::backend be(o);
      shared = run_moe_steps(be, c, m, steps);
      st = be.expert_cache();
    }
    {
      // The fence path (a submit and a wait a part) runs the share before the host's work: the same sums.
      const test::scoped_env slice("STRATA_VK_CACHE_SLICE", "25");
      const test::scoped_env fence("STRATA_VK_HANDOFF_FENCE", "1");
      gpu::backend be(o);
      CHECK(run_moe_steps(be, c, m, steps) == shared);
    }
    std::vector<float> miss_alone, miss_shared, miss_gpu;
    std::uint32_t hits = 0;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      CAPTURE(i);
      if (steps[i].tokens.size() != 1) {  // no share in longer steps
        CHECK(shared[i] == alone[i]);
        continue;
      }
      if (alone[i] == all_gpu[i]) {  // a hit: the slot's expert on the GPU's kernels, the share computing nothing
        ++hits;
        CHECK(shared[i] == alone[i]);
        continue;
      }
      miss_alone.insert(miss_alone.end(), alone[i].begin(), alone[i].end());
      miss_shared.insert(miss_shared.end(), shared[i].begin(), shared[i].end());
      miss_gpu.insert(miss_gpu.end(), all_gpu[i].begin(), all_gpu[i].end());
    }
    const double apart = test::nmse(miss_alone, miss_gpu), to_cpu = test::nmse(miss_shared, miss_alone),
                 to_gpu = test::nmse(miss_shared, miss_gpu);
    MESSAGE(std::string(c.name) << ": " << hits << " one-token hits, " << miss_alone.size() / n_embd << " misses; share blocks "
                   << st.share_blocks << "; NMSE of the shared misses vs the CPU alone " << to_cpu << ", vs the GPU " << to_gpu
                   << " (those two apart: " << apart << ")");
    CHECK(hits > 0);
    REQUIRE(!miss_alone.empty());
    CHECK(st.share_blocks == miss_alone.size() / n_embd);  // every one-token miss: the CPU's, with the share
    CHECK(st.miss_slice_percent == 25);
    CHECK(to_cpu < apart);
    CHECK(to_gpu < apart);
  }
}

TEST_CASE("vulkan ops: the expert cache refuses zero slots and more slots than experts") {
  if (!vkt::available()) return;
  std::mt19937 rng(5);
  const moe_case c{"softmax top-2 of 16", graph::moe_gating::softmax, graph::moe_weighting::output, 16, 2, 1,
                   gguf::type_id::q8_0, gguf::type_id::q8_0};
  moe_model m;
  make_model(m, c, rng);
  gpu::backend_options o;
  o.cached_expert_layers = {0};
  o.expert_slots = 0;
  CHECK_THROWS_WITH_AS(gpu::backend{o}, doctest::Contains("at least one slot"), error);
  o.expert_slots = 17;
  gpu::backend be(o);
  CHECK_THROWS_WITH_AS(be.load(*m.gate), doctest::Contains("'blk.0.ffn_gate_exps.weight' has 16 experts; the slots per layer must be 1..16"),
                       error);
}

#endif

}  // namespace
