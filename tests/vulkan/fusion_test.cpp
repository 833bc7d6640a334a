// The decoder's dense FFN block, x += W_down (silu(W_gate a) * (W_up a)) with a = rms_norm(x) * w,
// recorded as the decoder records it, so the GPU's recording-time fusion applies (the norm
// folded into the gate/up matvec, gate + up + SwiGLU in one dispatch, the residual add folded
// into the down matvec; in larger steps on mul_mm_reg, the norm and SwiGLU writing the f16 copy
// the matmuls read and the residual add in the down matmul's store). Gate: float64 on the
// dequantized weights, with fusion on and off (STRATA_VK_FUSE=0), at decode and prefill token counts.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/scoped_env.hpp"
#include "vulkan/vk_harness.hpp"

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

constexpr std::uint32_t E = 512, F = 768, fusion_table_rows = 32;
// 160: a prompt-sized step (the f16 GEMM; gate, up and SwiGLU as one, mm3_swiglu_ok).
constexpr std::uint32_t fusion_token_counts[] = {1, 2, 3, 8, 17, 160};
constexpr std::uint32_t prompt_step = 160;
constexpr float eps = 1e-5f;

struct ffn_model {
  vkt::weight_store store;
  std::vector<float> xs, norm_w;
  vkt::random_weight g, u, d;
  const gguf::tensor_info *x, *norm, *gate, *up, *down;
};

std::vector<std::int32_t> fusion_rows_for(std::uint32_t n) {
  std::vector<std::int32_t> r(n);
  for (std::uint32_t i = 0; i < n; ++i) r[i] = std::int32_t((5 * i + n) % fusion_table_rows);
  return r;
}

// Outputs per token count; `dispatches` gets the dispatch counts of the 1-, 8- and 160-token steps.
std::vector<std::vector<float>> run_ffn(gpu::backend& be, const ffn_model& m, std::uint32_t (&dispatches)[3]) {
  const auto xt = be.load(*m.x), nw = be.load(*m.norm), gate = be.load(*m.gate), up = be.load(*m.up),
             down = be.load(*m.down);
  const std::uint32_t B = prompt_step;
  const auto x = be.alloc(B, E), a = be.alloc(B, E), o = be.alloc(B, E), g = be.alloc(B, F), u = be.alloc(B, F);
  be.reserve(B, 0);
  auto kv = be.make_kv(vkt::small_kv());
  std::vector<std::vector<float>> out;
  for (const std::uint32_t n : fusion_token_counts) {
    auto b = vkt::batch_data::rows(n);
    b.tokens = fusion_rows_for(n);
    out.push_back(vkt::run_step(be, b, [&] {
      const auto xv = x.view(n), av = a.view(n), ov = o.view(n), gv = g.view(n), uv = u.view(n);
      be.embed(xt, xv);
      be.rms_norm(xv, &nw, eps, av);
      be.matmul(gate, av, gv);
      be.matmul(up, av, uv);
      be.swiglu(gv, uv, gv);
      be.matmul(down, gv, ov);
      be.add(xv, ov, xv);
      return xv;
    }));
    if (n == 1) dispatches[0] = be.dispatches_per_step();
    if (n == 8) dispatches[1] = be.dispatches_per_step();
    if (n == prompt_step) dispatches[2] = be.dispatches_per_step();
  }
  return out;
}

// int8: the integer matvec's view, a and h quantized to int8 blocks (vkt::q8_activations).
std::vector<double> reference(const ffn_model& m, std::uint32_t n, bool int8) {
  const auto rows = fusion_rows_for(n);
  std::vector<double> out(std::size_t(n) * E);
  for (std::uint32_t t = 0; t < n; ++t) {
    const float* x = m.xs.data() + std::size_t(rows[t]) * E;
    double ss = 0;
    for (std::uint32_t i = 0; i < E; ++i) ss += double(x[i]) * x[i];
    const double s = 1.0 / std::sqrt(ss / E + eps);
    std::vector<double> a(E), h(F);
    for (std::uint32_t i = 0; i < E; ++i) a[i] = x[i] * s * m.norm_w[i];
    if (int8) a = vkt::q8_activations(std::vector<float>(a.begin(), a.end()));
    for (std::uint32_t r = 0; r < F; ++r) {
      double gs = 0, us = 0;
      for (std::uint32_t i = 0; i < E; ++i) {
        gs += double(m.g.dequant[std::size_t(r) * E + i]) * a[i];
        us += double(m.u.dequant[std::size_t(r) * E + i]) * a[i];
      }
      h[r] = gs / (1.0 + std::exp(-gs)) * us;
    }
    if (int8) h = vkt::q8_activations(std::vector<float>(h.begin(), h.end()));
    for (std::uint32_t r = 0; r < E; ++r) {
      double ys = 0;
      for (std::uint32_t i = 0; i < F; ++i) ys += double(m.d.dequant[std::size_t(r) * F + i]) * h[i];
      out[std::size_t(t) * E + r] = x[r] + ys;
    }
  }
  return out;
}

TEST_CASE("vulkan fusion: dense FFN block (norm -> gate/up -> SwiGLU -> down + residual) vs float64, fused and not") {
  if (!vkt::available()) return;
  // The dispatch counts below are the fusions' (gate/up/SwiGLU as one GEMM over the scratch or the
  // weights read in place): no f16 weight copies, which a backend makes by default where it has room.
  const test::scoped_env no_copies("STRATA_VK_F16_COPIES", "0");
  std::mt19937 rng(31337);
  ffn_model m;
  m.xs = vkt::normal_floats(std::size_t(fusion_table_rows) * E, rng);
  m.norm_w = vkt::normal_floats(E, rng, 0.3f);
  for (auto& v : m.norm_w) v += 1.0f;
  m.g = vkt::make_weight(gguf::type_id::q4_k, F, E, rng, 0.05f);
  m.u = vkt::make_weight(gguf::type_id::q4_k, F, E, rng, 0.05f);
  m.d = vkt::make_weight(gguf::type_id::q6_k, E, F, rng, 0.05f);
  m.x = &m.store.add_f32("test.x", m.xs, E, fusion_table_rows);
  m.norm = &m.store.add_f32("blk.0.ffn_norm.weight", m.norm_w, E);
  // Gate and up next to each other, as in a model file (the fused SwiGLU binds both at once).
  m.gate = &m.store.add("blk.0.ffn_gate.weight", gguf::type_id::q4_k, m.g.bytes, E, F);
  m.up = &m.store.add("blk.0.ffn_up.weight", gguf::type_id::q4_k, m.u.bytes, E, F);
  m.down = &m.store.add("blk.0.ffn_down.weight", gguf::type_id::q6_k, m.d.bytes, F, E);
  std::uint32_t dispatches[2][3] = {};  // fused, unfused: 1, 8 and 160 tokens
  bool reg8 = false;                     // the 8-token step's matmuls run on mul_mm_reg
  bool gemm_swiglu = false;              // the 160-token step's gate/up/SwiGLU is one f16 GEMM
  for (const bool fuse : {true, false}) {
    CAPTURE(fuse);
    std::vector<std::vector<float>> got;
    std::vector<bool> int8(std::size(fusion_token_counts));
    double tol = 0;
    {
      const char* old = std::getenv("STRATA_VK_FUSE");
      const std::string saved = old ? old : "";
      if (fuse) ::unsetenv("STRATA_VK_FUSE");
      else ::setenv("STRATA_VK_FUSE", "0", 1);
      gpu::backend be;  // reads STRATA_VK_FUSE when it is built
      if (old) ::setenv("STRATA_VK_FUSE", saved.c_str(), 1);
      else ::unsetenv("STRATA_VK_FUSE");
      got = run_ffn(be, m, dispatches[fuse ? 0 : 1]);
      if (fuse) reg8 = be.register_fragment_matmul(gguf::type_id::q4_k, E, 8) && be.register_fragment_matmul(gguf::type_id::q6_k, F, 8);
      if (fuse) gemm_swiglu = be.fused_swiglu_gemm(gguf::type_id::q4_k, E, F, prompt_step);
      tol = vkt::matmul_f64_tolerance(be.is_cpu_device());
      for (std::size_t c = 0; c < std::size(fusion_token_counts); ++c)
        int8[c] = be.int8_activations(gguf::type_id::q4_k, E, fusion_token_counts[c]) &&
                  be.int8_activations(gguf::type_id::q6_k, F, fusion_token_counts[c]);
    }
    for (std::size_t c = 0; c < std::size(fusion_token_counts); ++c) {
      CAPTURE(fusion_token_counts[c]);
      const double e = vkt::nmse_f64(got[c], reference(m, fusion_token_counts[c], int8[c]));
      MESSAGE(std::string(fuse ? "fused" : "unfused") << ", " << fusion_token_counts[c] << " tokens: NMSE vs float64 " << e);
      CHECK(e <= tol);
    }
  }
  // The fused decode step must really have fused something (norm, SwiGLU, residual).
  MESSAGE("single-token step: " << dispatches[0][0] << " dispatches fused, " << dispatches[1][0] << " unfused");
  CHECK(dispatches[0][0] < dispatches[1][0]);
  // On mul_mm_reg the 8-token step loses the two copies to f16, the residual add, and gate, up
  // and SwiGLU are one dispatch.
  MESSAGE("8-token step: " << dispatches[0][1] << " dispatches fused, " << dispatches[1][1] << " unfused (mul_mm_reg: " << reg8 << ")");
  if (reg8) CHECK(dispatches[0][1] + 5 == dispatches[1][1]);
  // In the prompt step up and the SwiGLU join the gate GEMM, whose store writes the f16 copy; the
  // norm writes its own f16 copy and the residual add joins the down GEMM's store.
  MESSAGE("160-token step: " << dispatches[0][2] << " dispatches fused, " << dispatches[1][2] << " unfused (one GEMM: " << gemm_swiglu << ")");
  if (gemm_swiglu) CHECK(dispatches[0][2] + 5 == dispatches[1][2]);
  // Those fusions change no bit: the same steps with them off (STRATA_VK_MM_FUSE=0: copy_rows, the
  // SwiGLU and add dispatches, gate and up apart) give the same outputs.
  if (reg8 || gemm_swiglu) {
    std::vector<std::vector<float>> fused, plain;
    std::uint32_t unused[3] = {};
    {
      gpu::backend be;
      fused = run_ffn(be, m, unused);
    }
    // The SwiGLU GEMM in parts (record_mm3_swiglu): six of 256 rows; 1,024 + 512 rows.
    std::vector<std::vector<float>> parts[2];
    for (int i = 0; i < 2; ++i) {
      const test::scoped_env small_parts("STRATA_VK_SWIGLU_PART_KB", i == 0 ? "100" : "300");
      gpu::backend be;
      parts[i] = run_ffn(be, m, unused);
    }
    {
      const test::scoped_env off("STRATA_VK_MM_FUSE", "0");
      gpu::backend be;
      plain = run_ffn(be, m, unused);
    }
    for (std::size_t c = 0; c < std::size(fusion_token_counts); ++c) {
      CAPTURE(fusion_token_counts[c]);
      std::uint32_t differ = 0, first = ~0u, last = 0;  // tokens whose rows differ
      for (std::uint32_t t = 0; t < fusion_token_counts[c]; ++t)
        if (!std::equal(fused[c].begin() + t * E, fused[c].begin() + (t + 1) * E, plain[c].begin() + t * E)) {
          ++differ;
          first = std::min(first, t);
          last = t;
        }
      if (differ) MESSAGE(differ << " tokens differ, " << first << " .. " << last);
      CHECK(fused[c] == plain[c]);
      CHECK(parts[0][c] == plain[c]);
      CHECK(parts[1][c] == plain[c]);
    }
  }
}

// The attention input projections: one weighted norm read by three matmuls of different
// formats (the norm is folded into each: into the int8 quantization of the input for the
// integer matvec, else into the f32 matvec's 64-element units or dequant16), and of one format
// (8+-token steps on mul_mm_reg reading the norm's f16 copy). Step i reads projection i % 3 (a
// step reads one tensor back).
void qkv_case(const std::array<gguf::type_id, 3>& types);

TEST_CASE("vulkan fusion: one norm read by Q/K/V matmuls of three formats and of one format vs float64") {
  if (!vkt::available()) return;
  using gguf::type_id;
  for (const auto& types : {std::array{type_id::q4_k, type_id::q6_k, type_id::q8_0}, std::array{type_id::q4_k, type_id::q4_k, type_id::q4_k}})
    qkv_case(types);
}

void qkv_case(const std::array<gguf::type_id, 3>& types) {
  std::mt19937 rng(4711);
  constexpr std::uint32_t Q = 512, KV = 256, B = 17;
  const std::uint32_t widths[3] = {Q, KV, KV};
  vkt::weight_store store;
  const auto xs = vkt::normal_floats(std::size_t(fusion_table_rows) * E, rng);
  auto norm_w = vkt::normal_floats(E, rng, 0.3f);
  for (auto& v : norm_w) v += 1.0f;
  std::vector<vkt::random_weight> w;
  std::vector<const gguf::tensor_info*> wi;
  const auto& xi = store.add_f32("test.x", xs, E, fusion_table_rows);
  const auto& ni = store.add_f32("blk.0.attn_norm.weight", norm_w, E);
  const char* names[3] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"};
  for (int i = 0; i < 3; ++i) {
    w.push_back(vkt::make_weight(types[i], widths[i], E, rng, 0.05f));
    wi.push_back(&store.add(names[i], types[i], w.back().bytes, E, widths[i]));
  }
  gpu::backend be;
  const auto xt = be.load(xi), nw = be.load(ni);
  const gpu::weight proj[3] = {be.load(*wi[0]), be.load(*wi[1]), be.load(*wi[2])};
  const auto x = be.alloc(B, E), a = be.alloc(B, E), q = be.alloc(B, Q), k = be.alloc(B, KV), v = be.alloc(B, KV);
  be.reserve(B, 0);
  auto kv = be.make_kv(vkt::small_kv());
  const double tol = vkt::matmul_f64_tolerance(be.is_cpu_device());
  const std::uint32_t counts[] = {1, 2, 3, 8, 16, 17};
  for (std::uint32_t i = 0; i < std::size(counts); ++i) {
    const std::uint32_t n = counts[i];
    CAPTURE(n);
    auto b = vkt::batch_data::rows(n);
    b.tokens = fusion_rows_for(n);
    const auto got = vkt::run_step(be, b, [&] {
      be.embed(xt, x.view(n));
      be.rms_norm(x.view(n), &nw, eps, a.view(n));
      be.matmul(proj[0], a.view(n), q.view(n));
      be.matmul(proj[1], a.view(n), k.view(n));
      be.matmul(proj[2], a.view(n), v.view(n));
      return i % 3 == 0 ? q.view(n) : i % 3 == 1 ? k.view(n) : v.view(n);
    });
    const std::uint32_t p = i % 3, N = widths[p];
    std::vector<double> ref(std::size_t(n) * N);
    for (std::uint32_t t = 0; t < n; ++t) {
      const float* xr = xs.data() + std::size_t(b.tokens[t]) * E;
      double ss = 0;
      for (std::uint32_t i = 0; i < E; ++i) ss += double(xr[i]) * xr[i];
      const double s = 1.0 / std::sqrt(ss / E + eps);
      std::vector<double> a(E);
      for (std::uint32_t i = 0; i < E; ++i) a[i] = xr[i] * s * norm_w[i];
      if (be.int8_activations(types[p], E, n)) a = vkt::q8_activations(std::vector<float>(a.begin(), a.end()));
      for (std::uint32_t r = 0; r < N; ++r) {
        double acc = 0;
        for (std::uint32_t i = 0; i < E; ++i) acc += double(w[p].dequant[std::size_t(r) * E + i]) * a[i];
        ref[std::size_t(t) * N + r] = acc;
      }
    }
    const double e = vkt::nmse_f64(got, ref);
    MESSAGE(std::string(names[p]) << " (" << gguf::name_of(types[p]) << "), " << n << " tokens: NMSE vs float64 " << e);
    CHECK(e <= tol);
  }
}

// The norm between two matvecs, three ways: x += W_o a (a: a copy of x, as the attention output
// is another buffer than the residual), then h = rms_norm(x) * w and q = W_q h.
//  - tail (STRATA_VK_TAIL): the residual matvec's last workgroup writes h (f32 and int8);
//  - split (the default, NORM_OUT / RMS_IN): the residual matvec writes x * w as int8 codes and
//    block sums of x^2, q's matvec applies 1 / rms;
//  - plain (STRATA_VK_NORM_OUT=0): a quantize dispatch normalises between them.
// In 5+-token steps on mul_mm_reg the residual add joins W_o's store and the norm writes h's f16
// copy for q's matmul, in every mode but the fourth (STRATA_VK_MM_FUSE=0: add and copy dispatches).
// The same float64 reference for all (the int8 codes of h are quantize_q8's).
TEST_CASE("vulkan fusion: the norm between residual matvec and matvec (tail, split, plain) vs float64") {
  if (!vkt::available()) return;
  std::mt19937 rng(2718);
  constexpr std::uint32_t Q = 256;
  vkt::weight_store store;
  const auto xs = vkt::normal_floats(std::size_t(fusion_table_rows) * E, rng);
  auto w2 = vkt::normal_floats(E, rng, 0.3f);
  for (auto& v : w2) v += 1.0f;
  const auto wo = vkt::make_weight(gguf::type_id::q6_k, E, E, rng, 0.05f);
  const auto wq = vkt::make_weight(gguf::type_id::q4_k, Q, E, rng, 0.05f);
  const auto& xi = store.add_f32("test.x", xs, E, fusion_table_rows);
  const auto& n2 = store.add_f32("blk.0.ffn_norm.weight", w2, E);
  const auto& oi = store.add("blk.0.attn_output.weight", gguf::type_id::q6_k, wo.bytes, E, E);
  const auto& qi = store.add("blk.1.attn_q.weight", gguf::type_id::q4_k, wq.bytes, E, Q);
  constexpr std::uint32_t counts[] = {1, 2, 5, 8, 16, 17}, B = 17;
  const char* const modes[] = {"tail", "split", "plain", "no 5+-token fusion"};
  std::uint32_t dispatches[4] = {}, dispatches8[4] = {};
  bool reg8 = false;
  for (int mode = 0; mode < 4; ++mode) {
    CAPTURE(modes[mode]);
    const auto with_env = [](const char* name, const char* value, auto&& make) {
      const char* old = std::getenv(name);
      const std::string saved = old ? old : "";
      ::setenv(name, value, 1);
      auto r = make();
      if (old) ::setenv(name, saved.c_str(), 1);
      else ::unsetenv(name);
      return r;
    };
    // The backend reads both variables when it is built.
    auto bep = with_env("STRATA_VK_TAIL", mode == 0 ? "8" : "0", [&] {
      return with_env("STRATA_VK_NORM_OUT", mode == 2 ? "0" : "1", [&] {
        return with_env("STRATA_VK_MM_FUSE", mode == 3 ? "0" : "2", [] { return std::make_unique<gpu::backend>(); });
      });
    });
    gpu::backend& be = *bep;
    const auto xt = be.load(xi), nw2 = be.load(n2), o = be.load(oi), q = be.load(qi);
    const auto x = be.alloc(B, E), a = be.alloc(B, E), y = be.alloc(B, E), h = be.alloc(B, E), qo = be.alloc(B, Q);
    be.reserve(B, 0);
    auto kv = be.make_kv(vkt::small_kv());
    const double tol = vkt::matmul_f64_tolerance(be.is_cpu_device());
    for (const std::uint32_t n : counts) {
      CAPTURE(n);
      auto b = vkt::batch_data::rows(n);
      b.tokens = fusion_rows_for(n);
      // Some steps read h (the tail's f32 rows), the others q (from its int8 or f16 rows).
      const bool read_h = n == 2 || n == 8;
      const auto got = vkt::run_step(be, b, [&] {
        be.embed(xt, x.view(n));
        be.embed(xt, a.view(n));
        be.matmul(o, a.view(n), y.view(n));
        be.add(x.view(n), y.view(n), x.view(n));
        be.rms_norm(x.view(n), &nw2, eps, h.view(n));
        be.matmul(q, h.view(n), qo.view(n));
        return read_h ? h.view(n) : qo.view(n);
      });
      if (n == 1) dispatches[mode] = be.dispatches_per_step();
      if (n == 8) dispatches8[mode] = be.dispatches_per_step();
      if (mode == 1) reg8 = be.register_fragment_matmul(gguf::type_id::q6_k, E, 8) && be.register_fragment_matmul(gguf::type_id::q4_k, E, 8);
      const bool int8 = be.int8_activations(gguf::type_id::q6_k, E, n) && be.int8_activations(gguf::type_id::q4_k, E, n);
      const std::uint32_t N = read_h ? E : Q;
      std::vector<double> ref(std::size_t(n) * N);
      for (std::uint32_t t = 0; t < n; ++t) {
        const float* xr = xs.data() + std::size_t(b.tokens[t]) * E;
        const auto norm = [&](const std::vector<double>& v, const std::vector<float>& w) {
          double ss = 0;
          for (const double e : v) ss += e * e;
          const double s = 1.0 / std::sqrt(ss / E + eps);
          std::vector<double> r(E);
          for (std::uint32_t i = 0; i < E; ++i) r[i] = v[i] * s * w[i];
          return r;
        };
        std::vector<double> av(xr, xr + E);
        if (int8) av = vkt::q8_activations(std::vector<float>(xr, xr + E));
        std::vector<double> x2(E);
        for (std::uint32_t r = 0; r < E; ++r) {
          double acc = 0;
          for (std::uint32_t i = 0; i < E; ++i) acc += double(wo.dequant[std::size_t(r) * E + i]) * av[i];
          x2[r] = xr[r] + acc;
        }
        auto hv = norm(x2, w2);
        if (read_h) {
          for (std::uint32_t i = 0; i < E; ++i) ref[std::size_t(t) * E + i] = hv[i];
          continue;
        }
        if (int8) hv = vkt::q8_activations(std::vector<float>(hv.begin(), hv.end()));
        for (std::uint32_t r = 0; r < Q; ++r) {
          double acc = 0;
          for (std::uint32_t i = 0; i < E; ++i) acc += double(wq.dequant[std::size_t(r) * E + i]) * hv[i];
          ref[std::size_t(t) * Q + r] = acc;
        }
      }
      const double e = vkt::nmse_f64(got, ref);
      MESSAGE(std::string(modes[mode]) << ", " << n << " tokens (" << (read_h ? "h" : "q") << "): NMSE vs float64 " << e);
      CHECK(e <= tol);
    }
  }
  MESSAGE("single-token step: " << dispatches[0] << " dispatches with the tail, " << dispatches[1] << " split, "
                                  << dispatches[2] << " plain");
  // Gone with the tail: the norm folded into q's quantize dispatch, and the f32 norm the step
  // records at its end because h is never overwritten here (a reader may still want it). Split:
  // the quantize dispatch only (the f32 norm is still recorded at the end).
  CHECK(dispatches[0] + 2 == dispatches[2]);
  CHECK(dispatches[1] + 1 == dispatches[2]);
  CHECK(dispatches[3] == dispatches[1]);  // STRATA_VK_MM_FUSE leaves single-token steps alone
  // 8 tokens on mul_mm_reg: the residual add in W_o's dispatch, h's copy to f16 in the norm's.
  MESSAGE("8-token step: " << dispatches8[1] << " dispatches, " << dispatches8[3] << " without its fusions (mul_mm_reg: " << reg8 << ")");
  if (reg8) CHECK(dispatches8[1] + 2 == dispatches8[3]);
}

#endif

}  // namespace
