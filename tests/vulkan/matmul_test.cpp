// GPU matmul (shaders/matvec.glsl over every dequantizer) for every weight format, at token
// counts that run every NT variant with and without leftover tokens, on strided input and output
// views (the decoder narrows its scratch with first_cols). The gate is a float64 product of the
// C++-dequantized weights with the float activations: the GPU multiplies float activations, so
// only its float accumulation differs (for the integer matvec, with the activations replaced by
// the int8 values it multiplies, vkt::q8_activations). The CPU backend is compared too, loosely: it quantizes
// activations to the format's act type (Q8_0, Q8_1, Q8_K, F16, BF16) first, as ggml does.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "strata/quant/all.hpp"
#include "support/scoped_env.hpp"
#include "vulkan/vk_harness.hpp"

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

constexpr std::uint32_t K = 2304;  // 9 super-blocks; 144 16-element parts: some threads take two
// Rows of 16 super-blocks: Q6_K's rows are then stored in groups of 8 blocks on the GPU
// (quant_layout.hpp), as Q8_0's already are at K (72 blocks); at K, Q6_K's 9 blocks are not.
constexpr std::uint32_t K_grouped = 4096;
constexpr std::uint32_t N = 67;    // odd: the last workgroup has a row past the end
constexpr std::uint32_t mm_table_rows = 96;
constexpr std::uint32_t mm_token_counts[] = {1, 2, 3, 4, 5, 8, 9, 17, 64};
constexpr std::uint32_t mm_max_tokens = 64;

template <class... F, class G>
void for_each_mm_format(quant::type_list<F...>, G&& g) {
  (g(F{}), ...);
}

std::vector<std::int32_t> mm_rows_for(std::uint32_t n) {
  std::vector<std::int32_t> r(n);
  for (std::uint32_t i = 0; i < n; ++i) r[i] = std::int32_t((7 * i + n) % mm_table_rows);
  return r;
}

// One step per token count; inputs rows of an F32 table, input stride K + 48, output stride N + 5.
template <class Backend>
std::vector<std::vector<float>> run_matmuls(Backend& be, const gguf::tensor_info& w_info, const gguf::tensor_info& x_info) {
  const auto K = std::uint32_t(w_info.ne[0]);
  const auto w = be.load(w_info);
  const auto xt = be.load(x_info);
  const auto xb = be.alloc(mm_max_tokens, K + 48);
  const auto yb = be.alloc(mm_max_tokens, N + 5);
  be.reserve(mm_max_tokens, 0);
  auto kv = be.make_kv(vkt::small_kv());
  std::vector<std::vector<float>> out;
  for (const std::uint32_t n : mm_token_counts) {
    auto b = vkt::batch_data::rows(n);
    b.tokens = mm_rows_for(n);
    out.push_back(vkt::run_step(be, b, [&] {
      const auto x = xb.view(n).first_cols(K), y = yb.view(n).first_cols(N);
      be.embed(xt, x);
      be.matmul(w, x, y);
      return y;
    }));
  }
  return out;
}

// N x K weight rows quantized by the reference quantizer from weight-like floats.
template <class Fmt>
std::vector<typename Fmt::block> weight_like_blocks(std::mt19937& rng, std::uint32_t K) {
  std::vector<typename Fmt::block> blocks(std::size_t(N) * K / Fmt::block_elems);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(std::size_t(N) * K);
  for (auto& v : w) v = nd(rng);
  for (std::uint32_t r = 0; r < N; ++r)
    quant::quantize_row<Fmt>(w.data() + std::size_t(r) * K, blocks.data() + std::size_t(r) * K / Fmt::block_elems, K);
  return blocks;
}

// Normal activations, K per table row, none of them halfway between two int8 codes of its
// 32-element block: there the GPU's float rounding of x / d and the reference's may differ
// (x / d = 54.5 at K_grouped), which is not what these tests are about.
std::vector<float> untied_activations(std::uint32_t K, std::mt19937& rng) {
  auto x = vkt::normal_floats(std::size_t(mm_table_rows) * K, rng);
  for (std::size_t b = 0; b < x.size(); b += 32) {
    float amax = 0.0f;
    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.0f;
    for (std::size_t i = 0; i < 32; ++i) {
      const float q = std::fabs(x[b + i]) / d;
      if (std::fabs(q - std::trunc(q) - 0.5f) < 0.01f) x[b + i] += (x[b + i] < 0 ? -0.05f : 0.05f) * d;
    }
  }
  return x;
}

// Every token count of Fmt's K-wide rows against float64 and the CPU backend. Returns whether
// one-token steps took the integer matvec (int8 activations).
template <class Fmt>
bool check_format(std::uint32_t K, std::mt19937& rng, const std::vector<float>& x) {
  using B = typename Fmt::block;
  CAPTURE(Fmt::name);
  CAPTURE(K);
  const std::vector<B> blocks = weight_like_blocks<Fmt>(rng, K);
  std::vector<float> wdq(std::size_t(N) * K);
  for (std::uint32_t r = 0; r < N; ++r)
    quant::dequant_row<Fmt>(blocks.data() + std::size_t(r) * K / Fmt::block_elems, wdq.data() + std::size_t(r) * K, K);
  vkt::weight_store store;
  const auto& wi = store.add_blocks("blk.0.ffn_up.weight", Fmt::gguf_type, blocks, K, N);
  const auto& xi = store.add_f32("test.inputs", x, K, mm_table_rows);
  std::vector<std::vector<float>> gpu_out, cpu_out;
  std::vector<bool> int8(std::size(mm_token_counts));
  double tol = 0;
  {
    gpu::backend be;
    gpu_out = run_matmuls(be, wi, xi);
    tol = vkt::matmul_f64_tolerance(be.is_cpu_device());
    for (std::size_t c = 0; c < std::size(mm_token_counts); ++c)
      int8[c] = be.int8_activations(Fmt::gguf_type, K, mm_token_counts[c]);
  }
  {
    vkt::cpu_backend be;
    cpu_out = run_matmuls(be, wi, xi);
  }
  double worst_f64 = 0, worst_cpu = 0;
  for (std::size_t c = 0; c < std::size(mm_token_counts); ++c) {
    const std::uint32_t n = mm_token_counts[c];
    CAPTURE(n);
    const auto rows = mm_rows_for(n);
    std::vector<double> ref(std::size_t(n) * N);
    for (std::uint32_t t = 0; t < n; ++t) {
      const std::span<const float> xs(x.data() + std::size_t(rows[t]) * K, K);
      std::vector<double> xr(xs.begin(), xs.end());
      if (int8[c]) xr = vkt::q8_activations(xs);  // what the integer matvec multiplies
      for (std::uint32_t r = 0; r < N; ++r) {
        const float* wr = wdq.data() + std::size_t(r) * K;
        double s = 0;
        for (std::uint32_t k = 0; k < K; ++k) s += double(wr[k]) * xr[k];
        ref[std::size_t(t) * N + r] = s;
      }
    }
    const double e64 = vkt::nmse_f64(gpu_out[c], ref);
    const double ecpu = test::nmse(gpu_out[c], cpu_out[c]);
    worst_f64 = std::max(worst_f64, e64);
    worst_cpu = std::max(worst_cpu, ecpu);
    CHECK(e64 <= tol);
    CHECK(ecpu <= vkt::tol_matmul_cpu);
  }
  MESSAGE((std::string(Fmt::name) + (int8[0] ? " (int8 activations below 16 tokens)" : "")) << " K " << K << ": NMSE vs float64 " << worst_f64 << ", vs CPU backend " << worst_cpu << " (worst token count)");
  return int8[0];
}

// The formats with an integer matvec unit (shaders/quant/<fmt>.glsl MMVQ; runtime/vulkan
// tuning.hpp has_mmvq), and those of them STRATA_VK_MMVQ_MORE=0 returns to the f32 matvec.
bool has_int8_unit(gguf::type_id t) {
  using enum gguf::type_id;
  return t == q4_k || t == q5_k || t == q6_k || t == q8_0 || t == q4_0 || t == iq4_xs;
}
bool mmvq_more_format(gguf::type_id t) {
  using enum gguf::type_id;
  return t == q5_k || t == q4_0 || t == iq4_xs;
}

TEST_CASE("vulkan matmul: every format and token count vs float64 on the dequantized weights") {
  if (!vkt::available()) return;
  std::mt19937 rng(99);
  const auto x = untied_activations(K, rng);
  for_each_mm_format(quant::all{}, [&](auto fmt) {
    using Fmt = decltype(fmt);
    if (!gpu::gpu_supports(Fmt::gguf_type)) return;  // activation-only formats (dequant_test checks which)
    CHECK(check_format<Fmt>(K, rng, x) == has_int8_unit(Fmt::gguf_type));  // the integer matvec ran
  });
}

// STRATA_VK_MMVQ_MORE=0: the formats whose units came last take the f32 matvec again (the A/B
// switch), the others keep the integer one.
TEST_CASE("vulkan matmul: STRATA_VK_MMVQ_MORE=0 returns the newer integer matvec formats to the f32 matvec") {
  if (!vkt::available()) return;
  std::mt19937 rng(13);
  const auto x = untied_activations(K, rng);
  const test::scoped_env env("STRATA_VK_MMVQ_MORE", "0");
  for_each_mm_format(quant::all{}, [&](auto fmt) {
    using Fmt = decltype(fmt);
    const auto t = Fmt::gguf_type;
    if (!gpu::gpu_supports(t) || !has_int8_unit(t)) return;
    if (!mmvq_more_format(t) && t != gguf::type_id::q4_k) return;  // one of the first three suffices
    CHECK(check_format<Fmt>(K, rng, x) == !mmvq_more_format(t));
  });
}

// The formats stored in row groups on the GPU, at rows that are grouped (Q6_K at K_grouped,
// Q8_0 at both) and rows that are not (Q6_K at K): every kernel reads both layouts.
TEST_CASE("vulkan matmul: Q6_K and Q8_0 rows in the GPU's row groups") {
  if (!vkt::available()) return;
  std::mt19937 rng(5);
  const auto x = untied_activations(K_grouped, rng);
  CHECK(gpu::grouped_rows(gguf::type_id::q6_k, K_grouped));
  CHECK_FALSE(gpu::grouped_rows(gguf::type_id::q6_k, K));
  CHECK(gpu::grouped_rows(gguf::type_id::q8_0, K));
  check_format<quant::q6_k>(K_grouped, rng, x);
  check_format<quant::q8_0>(K_grouped, rng, x);
}


// One format's matmuls at every token count, with the backend's defaults and again with one
// STRATA_VK_* switch set, and which token counts took int8 activations.
struct switch_runs {
  std::vector<std::vector<float>> base, switched;
  std::vector<bool> int8, reg;  // the base run's path per token count: int8 activations, mul_mm_reg
};
template <class Fmt>
switch_runs runs_with_switch(std::mt19937& rng, const std::vector<float>& x, const char* name, const char* value) {
  const auto blocks = weight_like_blocks<Fmt>(rng, K);
  vkt::weight_store store;
  const auto& wi = store.add_blocks("blk.0.ffn_up.weight", Fmt::gguf_type, blocks, K, N);
  const auto& xi = store.add_f32("test.inputs", x, K, mm_table_rows);
  switch_runs r;
  r.int8.resize(std::size(mm_token_counts));
  r.reg.resize(std::size(mm_token_counts));
  {
    gpu::backend be;
    r.base = run_matmuls(be, wi, xi);
    for (std::size_t c = 0; c < std::size(mm_token_counts); ++c) {
      r.int8[c] = be.int8_activations(Fmt::gguf_type, K, mm_token_counts[c]);
      r.reg[c] = be.register_fragment_matmul(Fmt::gguf_type, K, mm_token_counts[c]);
    }
  }
  {
    const test::scoped_env env(name, value);
    gpu::backend be;
    r.switched = run_matmuls(be, wi, xi);
  }
  return r;
}

// STRATA_VK_MMVQ_UNROLL=1 only hints the driver to unroll the integer matvec's loops over tokens
// and rows: the products and their order are the default's.
TEST_CASE("vulkan matmul: the integer matvec with its loops unrolled (STRATA_VK_MMVQ_UNROLL) equals the default") {
  if (!vkt::available()) return;
  std::mt19937 rng(7);
  const auto x = vkt::normal_floats(std::size_t(mm_table_rows) * K, rng);
  const auto check = [&](auto fmt) {
    using Fmt = decltype(fmt);
    CAPTURE(Fmt::name);
    const auto r = runs_with_switch<Fmt>(rng, x, "STRATA_VK_MMVQ_UNROLL", "1");
    bool any_int8 = false;
    for (std::size_t c = 0; c < std::size(mm_token_counts); ++c) {
      CAPTURE(mm_token_counts[c]);
      any_int8 = any_int8 || r.int8[c];
      CHECK(test::nmse(r.switched[c], r.base[c]) <= 1e-12);
    }
    CHECK(any_int8);  // the matvec ran for some token count
  };
  check(quant::q4_0{});
  check(quant::iq4_xs{});
  check(quant::q4_k{});
  check(quant::q5_k{});
  check(quant::q6_k{});
  check(quant::q8_0{});
}

// The integer matvec's multi-token form (mmvq.glsl MMVQ_MT: each unit unpacked once per row, each
// token's activations once per unit) computes the one-token form's sums with the scale products
// associated differently: 2-8 token steps agree with STRATA_VK_MMVQ_MT=0 to rounding.
TEST_CASE("vulkan matmul: the integer matvec's multi-token form equals its one-token form") {
  if (!vkt::available()) return;
  std::mt19937 rng(11);
  const auto x = vkt::normal_floats(std::size_t(mm_table_rows) * K, rng);
  const auto check = [&](auto fmt) {
    using Fmt = decltype(fmt);
    CAPTURE(Fmt::name);
    const auto r = runs_with_switch<Fmt>(rng, x, "STRATA_VK_MMVQ_MT", "0");
    std::uint32_t multi_steps = 0;
    for (std::size_t c = 0; c < std::size(mm_token_counts); ++c) {
      const std::uint32_t n = mm_token_counts[c];
      CAPTURE(n);
      if (r.int8[c] && n > 1 && n <= 8) ++multi_steps;  // runtime/vulkan: has_mmvq_mt, mmvq_mt_max_tokens
      CHECK(test::nmse(r.base[c], r.switched[c]) <= 1e-12);
    }
    CHECK(multi_steps >= 3);  // 2, 3 and 4 tokens took the matvec (5 and 8 do too unless mul_mm_small takes them)
  };
  check(quant::q4_0{});
  check(quant::iq4_xs{});
  check(quant::q4_k{});
  check(quant::q5_k{});
  check(quant::q6_k{});
}

// mul_mm_small's N8 form (steps of at most 8 tokens as weights x tokens 16x8x16 products) sums the
// same f16 products as its 16 x 16 tiles: 5- and 8-token steps agree with STRATA_VK_MMS_N8=0 to
// f32 rounding. A device without the 16x8x16 shape (or without tensor cores) runs neither.
TEST_CASE("vulkan matmul: mul_mm_small's 8-token form equals its 16-token tiles") {
  if (!vkt::available()) return;
  std::mt19937 rng(12);
  const auto x = vkt::normal_floats(std::size_t(mm_table_rows) * K, rng);
  const test::scoped_env on("STRATA_VK_MMS_N8", "1");
  const auto check = [&](auto fmt) {
    using Fmt = decltype(fmt);
    CAPTURE(Fmt::name);
    const auto r = runs_with_switch<Fmt>(rng, x, "STRATA_VK_MMS_N8", "0");
    for (std::size_t c = 0; c < std::size(mm_token_counts); ++c) {
      CAPTURE(mm_token_counts[c]);
      CHECK(test::nmse(r.base[c], r.switched[c]) <= 1e-10);
    }
  };
  check(quant::q4_k{});
  check(quant::q6_k{});
  check(quant::q8_0{});
}

// mul_mm_reg (the weights' fragments built in registers, the 64 k of a step permuted alike for
// weights and activations) sums the same f16 products as the kernels it replaces: mul_mm_small
// at 5-32 tokens (the same f16 weights: NMSE at f32 rounding) and the split f16 tiles at 64 (whose
// weights round once from f32: within f16 rounding). Runs where the driver's fragments are of
// the quad form it builds (H200); elsewhere nothing takes it. The path is asked of the backend
// that ran the base steps: only its reserve() probes the fragments.
TEST_CASE("vulkan matmul: mul_mm_reg equals the kernels it replaces") {
  if (!vkt::available()) return;
  std::mt19937 rng(13);
  const auto x = vkt::normal_floats(std::size_t(mm_table_rows) * K, rng);
  const test::scoped_env on("STRATA_VK_MMR", "1");
  const auto r4 = runs_with_switch<quant::q4_k>(rng, x, "STRATA_VK_MMR", "0");
  if (std::none_of(r4.reg.begin(), r4.reg.end(), [](bool b) { return b; })) {
    MESSAGE("no quad-form 16x8x16 f16 fragments on this device: mul_mm_reg not run");
    return;
  }
  for (std::size_t c = 0; c < std::size(mm_token_counts); ++c) {
    const std::uint32_t n = mm_token_counts[c];
    CAPTURE(n);
    CHECK(r4.reg[c] == (n >= 5));  // steps of mms_min (5) to 64 tokens
    CHECK(test::nmse(r4.base[c], r4.switched[c]) <= (n > 32 ? 1e-6 : 1e-10));
  }
  // Q6_K's weights round twice here (d sc to f16, then its product with q - 32) against once there.
  const auto r6 = runs_with_switch<quant::q6_k>(rng, x, "STRATA_VK_MMR", "0");
  for (std::size_t c = 0; c < std::size(mm_token_counts); ++c) {
    CAPTURE(mm_token_counts[c]);
    CHECK(r6.reg[c] == (mm_token_counts[c] >= 5));
    CHECK(test::nmse(r6.base[c], r6.switched[c]) <= 1e-6);
  }
}

#endif

}  // namespace
