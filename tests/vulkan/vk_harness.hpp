// Shared pieces of the Vulkan backend tests (llama.cpp test-backend-ops style): the skip rule
// (no Vulkan build or no device: say so, check nothing), host weights handed to the backends as
// gguf::tensor_info views, activation upload through embed() from an F32 table (the step's
// "tokens" are table rows; the backend needs no other upload op on its hot path), the step
// drivers every test shares, error metrics and the suite's tolerance table.
//
// A gpu::backend records a step once per batch shape and replays it afterwards, so every
// scenario here builds its own backend (one graph per backend, as in the decoder); SPIR-V and
// pipelines come from the on-disk caches after the first run.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "strata/gguf/tensor_info.hpp"
#include "strata/graph/backend_contract.hpp"
#include "strata/kv/block_table.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/kernels/cpu/backend.hpp"
#include "strata/quant/all.hpp"
#include "strata/runtime/cpu_kernels.hpp"
#include "strata/runtime/engine.hpp"
#include "support/fixtures.hpp"

// runtime/vulkan/ is private to strata_runtime; its backend header includes no Vulkan.
#ifdef STRATA_HAS_VULKAN
#include "../../runtime/vulkan/backend.hpp"
#include "../../runtime/vulkan/quant_layout.hpp"
#endif

namespace strata::test::vk {

// True when this build has the Vulkan backend and the loader offers a device (in CI: lavapipe).
inline bool available() {
  if (!rt::vulkan_compiled_in()) {
    MESSAGE("this build has no Vulkan backend: Vulkan tests skipped");
    return false;
  }
  static const bool has_device = !rt::vulkan_devices().empty();
  if (!has_device) MESSAGE("no Vulkan device (install mesa-vulkan-drivers for lavapipe): Vulkan tests skipped");
  return has_device;
}

#ifdef STRATA_HAS_VULKAN
// Whether a profiled backend (backend_options::profile) ran a kernel whose label starts with
// `prefix` and holds `part`.
inline bool ran_kernel(const gpu::backend& be, const std::string& prefix, const std::string& part = "") {
  for (const auto& k : be.profile())
    if (k.label.rfind(prefix, 0) == 0 && k.label.find(part) != std::string::npos) return true;
  return false;
}
#endif

// The fixture model as a 12-stream server runs it on the GPU (steps of up to 64 tokens, 12
// logits rows): the step-recording tests' model (step_buckets_test, step_cache_test).
inline rt::engine_options twelve_stream_options() {
  rt::engine_options eo;
  eo.backend = rt::backend_kind::vulkan;
  eo.threads = 2;
  eo.n_ctx = 512;
  eo.n_seq = 12;
  eo.n_batch = 64;
  eo.max_outputs = 12;
  return eo;
}

// Host bytes of test weights; the tensor_info views stay valid (deque) as long as the store,
// which must outlive the backends that loaded them.
class weight_store {
 public:
  using infos = std::vector<const gguf::tensor_info*>;

  const gguf::tensor_info& add(const std::string& name, gguf::type_id type, std::vector<std::byte> bytes,
                               std::uint64_t ne0, std::uint64_t ne1 = 1, std::uint64_t ne2 = 1) {
    auto& b = bytes_.emplace_back(std::move(bytes));
    auto& n = names_.emplace_back(name);
    auto& t = infos_.emplace_back();
    t.name = n;
    t.type = type;
    t.n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    t.ne = {ne0, ne1, ne2, 1};
    t.nbytes = b.size();
    t.data = std::span<const std::byte>(b);
    REQUIRE(t.row_bytes() * t.n_rows() == b.size());
    return t;
  }
  const gguf::tensor_info& add_f32(const std::string& name, std::span<const float> v, std::uint64_t ne0,
                                   std::uint64_t ne1 = 1, std::uint64_t ne2 = 1) {
    std::vector<std::byte> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return add(name, gguf::type_id::f32, std::move(b), ne0, ne1, ne2);
  }
  template <class Block>
  const gguf::tensor_info& add_blocks(const std::string& name, gguf::type_id type, const std::vector<Block>& blocks,
                                      std::uint64_t ne0, std::uint64_t ne1 = 1, std::uint64_t ne2 = 1) {
    std::vector<std::byte> b(blocks.size() * sizeof(Block));
    std::memcpy(b.data(), blocks.data(), b.size());
    return add(name, type, std::move(b), ne0, ne1, ne2);
  }

 private:
  std::deque<std::vector<std::byte>> bytes_;
  std::deque<std::string> names_;
  std::deque<gguf::tensor_info> infos_;
};

// Normal(0, sigma) floats with a fixed seed.
inline std::vector<float> normal_floats(std::size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// rows × K weights of type t quantized by the format's reference quantizer from normal(0, sigma)
// floats: the bytes, and their C++ dequantization (what a float64 reference multiplies).
struct random_weight {
  std::vector<std::byte> bytes;
  std::vector<float> dequant;
};
inline random_weight make_weight(gguf::type_id t, std::size_t rows, std::size_t K, std::mt19937& rng, float sigma) {
  random_weight w;
  const auto x = normal_floats(rows * K, rng, sigma);
  w.dequant.resize(rows * K);
  quant::visit(t, [&](auto fmt) {
    using Fmt = decltype(fmt);
    std::vector<typename Fmt::block> blocks(rows * K / Fmt::block_elems);
    quant::quantize_row<Fmt>(x.data(), blocks.data(), rows * K);
    quant::dequant_row<Fmt>(blocks.data(), w.dequant.data(), rows * K);
    w.bytes.resize(blocks.size() * sizeof(typename Fmt::block));
    std::memcpy(w.bytes.data(), blocks.data(), w.bytes.size());
  });
  return w;
}

// Normalised mean squared error Σ(a − ref)² / Σ ref² against a float64 reference (the float
// one is strata::test::nmse in support/fixtures.hpp), as test-backend-ops computes it.
inline double nmse_f64(std::span<const float> a, std::span<const double> ref) {
  REQUIRE(a.size() == ref.size());
  double err = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - ref[i];
    err += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? err / den : err;
}

// The arrays a graph::batch views: tokens (here: rows of the input tables), positions,
// sequence ids and logits flags.
struct batch_data {
  std::vector<std::int32_t> tokens, positions;
  std::vector<std::uint32_t> seq_ids;
  std::vector<std::uint8_t> logits;

  // n tokens reading table rows first_row.., at positions pos0.. of sequence 0.
  static batch_data rows(std::uint32_t n, std::int32_t first_row = 0, std::int32_t pos0 = 0) {
    batch_data b;
    for (std::uint32_t i = 0; i < n; ++i) {
      b.tokens.push_back(first_row + std::int32_t(i));
      b.positions.push_back(pos0 + std::int32_t(i));
      b.seq_ids.push_back(0);
      b.logits.push_back(1);
    }
    return b;
  }
  graph::batch view() const { return {tokens, positions, seq_ids, logits}; }
};

// A step of the KV tests: (sequence, count of new tokens) pairs.
using seq_tokens = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

// The batch that continues each listed sequence by its count of tokens (their cache slots
// reserved in `table`), reading table rows next_row, next_row + 1, ... modulo table_rows.
inline batch_data continue_sequences(kv::block_table& table, const seq_tokens& st, std::int32_t& next_row,
                                     std::uint32_t table_rows) {
  batch_data b;
  for (const auto& [seq, count] : st) {
    const std::uint32_t len = table.length(seq);
    table.reserve_append(seq, count);
    for (std::uint32_t i = 0; i < count; ++i) {
      b.tokens.push_back(next_row++ % std::int32_t(table_rows));
      b.positions.push_back(std::int32_t(len + i));
      b.seq_ids.push_back(seq);
      b.logits.push_back(0);
    }
  }
  return b;
}
// Commits a continue_sequences batch to the table once its step has run.
inline void commit_sequences(kv::block_table& table, const seq_tokens& st, const batch_data& b) {
  std::size_t at = 0;
  for (const auto& [seq, count] : st) {
    table.commit(seq, std::span(b.tokens).subspan(at, count));
    at += count;
  }
}

// The CPU backend the GPU is compared with (2 threads, the best kernel tier of this CPU).
struct cpu_backend : kernels::cpu::backend {
  cpu_backend() : kernels::cpu::backend(2, rt::select_kernel_table(rt::best_isa())) {}
};

// One step on either backend: begin, `ops()` (which uploads its inputs with embed() from F32
// tables and returns the tensor to read back), read, finish. kv: the block table of a step that
// stores or reads KV (its positions reserved).
template <class Backend, class Ops>
std::vector<float> run_step(Backend& be, const batch_data& b, Ops&& ops, const kv::block_table* kv = nullptr) {
  be.begin(graph::step_inputs{b.view(), kv});
  const auto out = ops();
  std::vector<float> y(std::size_t(out.rows) * out.cols);
  be.read(out, y);
  be.finish();
  return y;
}

// KV geometry for scenarios that need no cache (begin() on the GPU needs the step buffer
// make_kv() creates; make the cache, pass no block table).
inline kv::kv_config small_kv() {
  kv::kv_config c;
  c.n_layer = 1;
  c.n_head_kv = 1;
  c.head_dim = 16;
  c.n_ctx = 32;
  return c;
}

// The activations the GPU's integer matvec multiplies (quantize_q8.glsl, and mmvq.glsl's
// QUANT_OUT): per 32-element block d = max|x| / 127 and codes round(x / d), in float as the
// shader computes them; returned as d·code in double, the exact value each code stands for.
// near_tie(i): called for element i when x / d lies within q8_tie of k + 0.5, where the GPU's
// float rounding of x (its sums, its exp) may round the code the other way; true flips it.
inline constexpr float q8_tie = 2e-4f;
inline std::vector<double> q8_activations(std::span<const float> x, const std::function<bool(std::size_t)>& near_tie = {}) {
  std::vector<double> out(x.size());
  for (std::size_t b = 0; b + 32 <= x.size(); b += 32) {
    float amax = 0.0f;
    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (std::size_t i = 0; i < 32; ++i) {
      const float q = x[b + i] * id;
      float code = std::round(q);
      if (near_tie && std::fabs(std::fabs(q - std::trunc(q)) - 0.5f) < q8_tie && near_tie(b + i)) code += code > q ? -1.0f : 1.0f;
      out[b + i] = double(d) * double(code);
    }
  }
  return out;
}

// Q, K and V rows (tables t[0], t[1], t[2], each `table_rows` rows; token i of the run reads row
// i mod table_rows) through kv_store + attention on layer 0 of a cache of `cfg`, one step per
// entry of `steps`; returns each step's attention output. The KV bookkeeping is the engine's:
// one block table, reserved before and committed after each step.
// With wo, each step returns the output projection wo . o of the attention output instead (the
// matmul reading what the attention wrote), and `dispatches` gets each step's dispatch count.
template <class Backend>
std::vector<std::vector<float>> run_attention_steps(Backend& be, const kv::kv_config& cfg, const graph::attention_params& ap,
                                                    const std::vector<const gguf::tensor_info*>& t,
                                                    std::uint32_t table_rows, const std::vector<seq_tokens>& steps,
                                                    const gguf::tensor_info* wo = nullptr,
                                                    std::vector<std::uint32_t>* dispatches = nullptr) {
  std::uint32_t max_tokens = 0;
  for (const auto& st : steps) {
    std::uint32_t n = 0;
    for (const auto& [seq, count] : st) n += count;
    max_tokens = std::max(max_tokens, n);
  }
  const std::uint32_t QW = ap.n_head * ap.head_dim, KW = cfg.n_head_kv * cfg.head_dim;
  const auto qt = be.load(*t[0]), kt = be.load(*t[1]), vt = be.load(*t[2]);
  const auto q = be.alloc(max_tokens, QW), k = be.alloc(max_tokens, KW), v = be.alloc(max_tokens, KW);
  const auto o = be.alloc(max_tokens, QW);
  std::optional<std::remove_const_t<decltype(qt)>> ot;
  if (wo) ot = be.load(*wo);
  const auto y = be.alloc(max_tokens, wo ? std::uint32_t(wo->ne[1]) : 1);
  be.reserve(max_tokens, 0);
  auto kv = be.make_kv(cfg);
  kv::block_table table(cfg);
  std::vector<std::vector<float>> out;
  std::int32_t next_row = 0;
  for (const auto& st : steps) {
    const batch_data b = continue_sequences(table, st, next_row, table_rows);
    const std::uint32_t n = std::uint32_t(b.tokens.size());
    out.push_back(run_step(
        be, b,
        [&] {
          be.embed(qt, q.view(n));
          be.embed(kt, k.view(n));
          be.embed(vt, v.view(n));
          be.kv_store(kv, 0, k.view(n), v.view(n));
          be.attention(kv, 0, q.view(n), ap, o.view(n));
          if (!wo) return o.view(n);
          be.matmul(*ot, o.view(n), y.view(n));
          return y.view(n);
        },
        &table));
    if constexpr (requires { be.dispatches_per_step(); })
      if (dispatches) dispatches->push_back(be.dispatches_per_step());
    commit_sequences(table, st, b);
  }
  return out;
}

// --- tolerances (one table for the suite; NMSE unless said otherwise) ------------------------
// Elementwise ops (add, select_rows, kv_store + read): one float rounding or none on either
// side, so the results agree bit for bit in practice; 1e-12 leaves room for nothing but
// -0/+0 style differences.
inline constexpr double tol_exact = 1e-12;
// rms_norm, swiglu, llama4 temperature: sums in a different order (GPU: subgroup tree in float,
// CPU: double) and exp/sqrt from different libraries; a few ulp per element.
inline constexpr double tol_float_op = 1e-10;
// RoPE: the GPU computes theta = pos·base^(−2i/n_rot) with pow, the CPU by repeated float
// multiplication (ggml); at positions in the thousands the angles differ by a few ulp of the
// angle, and GPU sin/cos are not correctly rounded (NVIDIA reduces large angles in float:
// ~1e-4 rad at angle 8000). lavapipe: <= 1e-10.
inline constexpr double tol_rope = 1e-6;
// Attention: online softmax in float tiles vs. two-pass softmax with a double sum; f16 KV is
// rounded identically on both sides.
inline constexpr double tol_attention = 1e-9;
// Attention on tensor cores (attention_mma.glsl): the scaled queries and the softmax weights are
// rounded to f16 (unit roundoff u = 2^-11) before their products; two such roundings bound the
// relative error of an output by ~2u, an NMSE by (2u)^2 ~ 1e-6 (measured on the H100: 1e-7).
inline constexpr double tol_attention_f16 = 1e-6;
// Attention over compressed KV (q8_0, TurboQuant): the same codes on both sides up to a rare
// code at a cell boundary (kv_compressed_test counts them), dots over codes and the rotations
// summed in a different order.
inline constexpr double tol_attention_compressed = 1e-6;
// The same on tensor cores (attention_mma.glsl): the decoded keys and values are rounded to f16
// too, four f16 roundings (Q, K, P, V) instead of tol_attention_f16's two: (4u)^2 ~ 4e-6.
inline constexpr double tol_attention_compressed_f16 = 4e-6;
// Keys scored with int8 dot products (attention_qdec.glsl QDEC_IDOT): the scaled queries rounded to
// int8 a 32-dim block (u = 1/254 of the block's largest) and the centroids a segment (1/254 of the
// largest), so each score moves by ~1e-3 of its block terms' scale, far below the 3-bit codes' own
// error (NMSE ~3e-2 of a key). Measured: 2e-6 to 7.5e-5 on kv_decode_test's random cases (the
// integer sums are exact, so the roundings, not the device, set it); 2e-4 leaves ~2.5x.
inline constexpr double tol_attention_compressed_idot = 2e-4;
// GPU matmul vs a float64 product of the dequantized weights with the float activations: only
// the GPU's float accumulation error, ~sqrt(K)·u relative per output (lavapipe: ~2e-14).
inline constexpr double tol_matmul_f64 = 1e-10;
// The same on a real GPU, where prefill-sized matmuls may run the tensor-core tile product
// (mul_mm.glsl COOPMAT), which rounds weights and activations to f16 (2^-11 relative each).
inline constexpr double tol_matmul_f64_f16_tiles = 1e-6;
inline double matmul_f64_tolerance(bool cpu_device) { return cpu_device ? tol_matmul_f64 : tol_matmul_f64_f16_tiles; }
// The integer matvec (int8 activations) is gated against the same float64 product with the
// activations replaced by q8_activations(): the integer dots are exact, so again only float
// rounding of the scales remains, and tol_matmul_f64 applies.
// GPU matmul vs the CPU backend, which quantizes activations to the weight format's act type
// (Q8_0/Q8_1/Q8_K, ~1e-4 relative each) before the dot product: a sanity gate only.
inline constexpr double tol_matmul_cpu = 5e-3;
// MoE FFN vs float64 on the dequantized weights (same routing): float accumulation in three
// matmuls, the router's exp/sigmoid and SiLU.
inline constexpr double tol_moe_f64 = 1e-10;
// MoE FFN vs the CPU backend: three quantized matmuls per expert, each with activation
// quantization on the CPU side; a sanity gate only.
inline constexpr double tol_moe_cpu = 5e-3;

}  // namespace strata::test::vk
