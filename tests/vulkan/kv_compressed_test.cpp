// Compressed KV caches (q8_0, TurboQuant tq4/tq3/tq2, mixed K/V types) on the Vulkan backend
// against the CPU backend: (1) quantize-on-append: the packed bytes kv_store_q writes vs
// kernels::cpu::kv_codec::encode on random head vectors; (2) kv_store + attention over several
// sequences, positions over many KV blocks, prefill and decode (the split decode path at
// n_ctx 512), head dims 64 and 128, without a full-precision window and with a window whose
// f16 ring wraps (window 16 + max_batch 160 rows, positions up to 191).
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "strata/kernels/cpu/kv_storage.hpp"
#include "vulkan/vk_harness.hpp"

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

// Bytes of the GPU cache buffer `id` (floats copied bit for bit by read(), in a step of its own).
std::vector<std::uint8_t> read_bytes(gpu::backend& be, const vkt::batch_data& b, std::uint32_t id, std::size_t bytes,
                                     std::uint32_t cols) {
  const std::uint32_t rows = std::uint32_t((bytes + 4 * cols - 1) / (4 * cols));
  std::vector<float> f(std::size_t(rows) * cols);
  be.begin(graph::step_inputs{b.view()});
  be.read(gpu::tensor{id, 0, rows, cols, cols}, f);
  be.finish();
  std::vector<std::uint8_t> out(bytes);
  std::memcpy(out.data(), f.data(), bytes);
  return out;
}

TEST_CASE("vulkan ops: compressed KV quantize-on-append matches the CPU codec byte for byte") {
  if (!vkt::available()) return;
  using kv::kv_type;
  struct store_case {
    kv_type k, v;
    std::uint32_t D;
  };
  const store_case cases[] = {{kv_type::tq3, kv_type::q8_0, 128}, {kv_type::tq4, kv_type::tq2, 128},
                              {kv_type::tq3, kv_type::tq4, 64},   {kv_type::q8_0, kv_type::tq2, 64},
                              {kv_type::tq3, kv_type::f16, 96}};
  constexpr std::uint32_t Hkv = 2, n_tok = 48, table = 64;
  std::mt19937 rng(5);
  for (const auto& c : cases) {
    CAPTURE(kv::name_of(c.k));
    CAPTURE(kv::name_of(c.v));
    CAPTURE(c.D);
    const std::uint32_t W = Hkv * c.D;
    vkt::weight_store store;
    auto kx = vkt::normal_floats(std::size_t(table) * W, rng, 1.5f), vx = vkt::normal_floats(std::size_t(table) * W, rng);
    for (std::uint32_t i = 0; i < c.D; ++i) kx[i] = i == 3 ? 7.0f : 0.0f;  // one-hot row, row 1 all zero
    for (std::uint32_t i = 0; i < W; ++i) kx[W + i] = 0.0f;
    const auto& kt = store.add_f32("k", kx, W, table);
    const auto& vt = store.add_f32("v", vx, W, table);
    gpu::backend be;
    const auto k = be.load(kt), v = be.load(vt);
    const auto kb = be.alloc(n_tok, W), vb = be.alloc(n_tok, W), big = be.alloc(64, 1024);
    be.reserve(n_tok, 0);
    kv::kv_config cfg;
    cfg.n_layer = 1;
    cfg.n_head_kv = Hkv;
    cfg.head_dim = c.D;
    cfg.n_ctx = 64;
    cfg.block_size = 16;
    cfg.type_k = c.k;
    cfg.type_v = c.v;
    cfg.max_batch = n_tok;
    auto kv = be.make_kv(cfg);
    kv::block_table table(cfg);
    const auto b = vkt::batch_data::rows(n_tok);
    table.reserve_step(b.seq_ids, b.positions);
    const kernels::cpu::kv_codec kc(c.k, c.D), vc(c.v, c.D);
    const std::size_t n_slots = 64;
    be.begin(graph::step_inputs{b.view(), &table});
    be.embed(k, kb.view(n_tok));
    be.embed(v, vb.view(n_tok));
    be.kv_store(kv, 0, kb.view(n_tok), vb.view(n_tok));
    be.finish();
    // Two step shapes: a recorded step is replayed for a shape it has seen.
    const auto gk = read_bytes(be, vkt::batch_data::rows(1), kv.k_buffer(0), n_slots * Hkv * kc.head_bytes(), 1024);
    const auto gv = read_bytes(be, vkt::batch_data::rows(2), kv.v_buffer(0), n_slots * Hkv * vc.head_bytes(), 1024);
    (void)big;
    std::vector<float> scratch(c.D);
    for (int side = 0; side < 2; ++side) {
      const auto& codec = side == 0 ? kc : vc;
      const auto& x = side == 0 ? kx : vx;
      const auto& g = side == 0 ? gk : gv;
      std::size_t rows_differ = 0, idx_differ = 0, scale_differ = 0, n_idx = 0;
      std::vector<std::uint8_t> ref(codec.head_bytes());
      for (std::uint32_t t = 0; t < n_tok; ++t)
        for (std::uint32_t h = 0; h < Hkv; ++h) {
          codec.encode(x.data() + std::size_t(t) * W + h * c.D, ref.data(), scratch.data());
          const std::uint8_t* got = g.data() + (std::size_t(table.slot(0, t)) * Hkv + h) * codec.head_bytes();
          if (std::memcmp(got, ref.data(), ref.size()) == 0) {
            n_idx += c.D;
            continue;
          }
          ++rows_differ;
          if (const auto* f = codec.turboquant()) {  // count differing codes and scales
            for (const auto& sg : f->segments()) {
              std::vector<std::uint8_t> a(sg.n), r(sg.n);
              turboquant::unpack_indices(got + sg.byte_offset, sg.n, f->bits(), a.data());
              turboquant::unpack_indices(ref.data() + sg.byte_offset, sg.n, f->bits(), r.data());
              for (std::uint32_t i = 0; i < sg.n; ++i) idx_differ += a[i] != r[i];
              const int sa = got[sg.byte_offset] | got[sg.byte_offset + 1] << 8;
              const int sr = ref[sg.byte_offset] | ref[sg.byte_offset + 1] << 8;
              scale_differ += sa != sr;
              CHECK(std::abs(sa - sr) <= 1);  // at most one fp16 ulp
            }
          } else {
            CHECK(false);  // q8_0, f16 and f32 rows must match exactly
          }
          n_idx += c.D;
        }
      MESSAGE(kv::name_of(side == 0 ? c.k : c.v) << " D " << c.D << ": " << rows_differ << " of " << n_tok * Hkv
                                                << " head rows differ; codes differing " << idx_differ << " of " << n_idx
                                                << ", scales " << scale_differ);
      // Codes can differ only for a coordinate within float rounding of a cell boundary (the CPU
      // sums the norm in double, the GPU in float-float): bound it at 1 in 2000.
      CHECK(idx_differ * 2000 <= n_idx);
    }
  }
}

struct kvq_attn_case {
  const char* name;
  std::uint32_t H, Hkv, D, window;
  kv::kv_type k, v;
  std::uint32_t chunk = 0;  // chunked attention (Llama 4): keys from the query's chunk only
};

constexpr std::uint32_t kvq_table_rows = 256;

const std::vector<vkt::seq_tokens> kvq_steps = {
    {{0, 100}, {1, 37}, {2, 5}},
    {{1, 60}, {0, 90}, {2, 1}},
    {{0, 1}, {1, 1}, {2, 1}},
    {{0, 1}, {1, 1}, {2, 1}},
};

// One sequence a step: prompt steps of 16+ tokens take the tensor-core kernel where the device has
// one (attention_mma.glsl; the second and fourth steps start inside the first's window band).
const std::vector<vkt::seq_tokens> prefill_steps = {{{0, 100}}, {{0, 70}}, {{0, 1}}, {{0, 33}}};

template <class Backend>
std::vector<std::vector<float>> run_attention(Backend& be, const kvq_attn_case& c, const vkt::weight_store::infos& t,
                                              const std::vector<vkt::seq_tokens>& plan) {
  kv::kv_config cfg;
  cfg.n_layer = 1;
  cfg.n_head_kv = c.Hkv;
  cfg.head_dim = c.D;
  cfg.n_ctx = 512;
  cfg.n_seq = 3;
  cfg.block_size = 16;
  cfg.type_k = c.k;
  cfg.type_v = c.v;
  cfg.full_precision_window = c.window;
  cfg.max_batch = 160;  // the f16 ring holds window + max_batch rows per sequence
  return vkt::run_attention_steps(be, cfg, {c.H, c.Hkv, c.D, c.chunk, 1.0f / std::sqrt(float(c.D))}, t, kvq_table_rows, plan);
}

const kvq_attn_case attn_cases[] = {
    {"q8_0, D 128, window 16", 4, 2, 128, 16, kv::kv_type::q8_0, kv::kv_type::q8_0},
    {"tq4, D 128, window 0", 4, 2, 128, 0, kv::kv_type::tq4, kv::kv_type::tq4},
    {"tq3, D 64, window 16", 8, 2, 64, 16, kv::kv_type::tq3, kv::kv_type::tq3},
    {"tq3, D 128, window 0", 4, 1, 128, 0, kv::kv_type::tq3, kv::kv_type::tq3},
    {"tq2, D 64, window 0", 4, 2, 64, 0, kv::kv_type::tq2, kv::kv_type::tq2},
    {"K q8_0 + V tq3, D 128, window 16", 4, 2, 128, 16, kv::kv_type::q8_0, kv::kv_type::tq3},
    {"K tq4 + V tq3, D 64, window 0", 4, 2, 64, 0, kv::kv_type::tq4, kv::kv_type::tq3},
    {"K tq4 + V tq3, D 128, window 128", 4, 2, 128, 128, kv::kv_type::tq4, kv::kv_type::tq3},
    {"K f16 + V tq3, D 64, window 16", 4, 2, 64, 16, kv::kv_type::f16, kv::kv_type::tq3},
    {"K tq3 + V f32, D 128, window 16", 4, 2, 128, 16, kv::kv_type::tq3, kv::kv_type::f32},
    {"tq3, D 128, window 16, chunk 64", 4, 2, 128, 16, kv::kv_type::tq3, kv::kv_type::tq3, 64},
};

// Every case of attn_cases through `plan` on the GPU and the CPU backend.
void check_attention_cases(const std::vector<vkt::seq_tokens>& plan) {
  std::mt19937 rng(91);
  for (const auto& c : attn_cases) {
    CAPTURE(std::string(c.name));
    vkt::weight_store store;
    const vkt::weight_store::infos t = {
        &store.add_f32("test.q", vkt::normal_floats(std::size_t(kvq_table_rows) * c.H * c.D, rng, 1.5f), c.H * c.D, kvq_table_rows),
        &store.add_f32("test.k", vkt::normal_floats(std::size_t(kvq_table_rows) * c.Hkv * c.D, rng, 1.5f), c.Hkv * c.D, kvq_table_rows),
        &store.add_f32("test.v", vkt::normal_floats(std::size_t(kvq_table_rows) * c.Hkv * c.D, rng), c.Hkv * c.D, kvq_table_rows)};
    std::vector<std::vector<float>> g, cpu;
    std::vector<double> tol(plan.size(), vkt::tol_attention_compressed);
    {
      // The decode kernel's float key scores (its int8 ones, the default for tq2/tq3 keys, are
      // kv_decode_test's, against their own tolerance).
      ::setenv("STRATA_VK_QDEC_IDOT", "0", 1);
      gpu::backend be;
      ::unsetenv("STRATA_VK_QDEC_IDOT");
      g = run_attention(be, c, t, plan);
      for (std::size_t s = 0; s < plan.size(); ++s)
        if (plan[s].size() == 1 && be.tensor_core_attention(plan[s][0].second, c.D, c.k, c.v))
          tol[s] = vkt::tol_attention_compressed_f16;
    }
    {
      vkt::cpu_backend be;
      cpu = run_attention(be, c, t, plan);
    }
    for (std::size_t s = 0; s < plan.size(); ++s) {
      CAPTURE(s);
      const double e = test::nmse(g[s], cpu[s]);
      MESSAGE(std::string(c.name) << ", step " << s << " (" << g[s].size() / (c.H * c.D) << " tokens): NMSE GPU vs CPU " << e
                                  << std::string(tol[s] != vkt::tol_attention_compressed ? " (tensor cores)" : ""));
      CHECK(e <= tol[s]);
    }
  }
}

TEST_CASE("vulkan ops: kv_store + attention with compressed KV (q8_0, tq4/3/2, mixed, window ring) vs CPU") {
  if (!vkt::available()) return;
  check_attention_cases(kvq_steps);
}

TEST_CASE("vulkan ops: compressed KV prompt attention of one sequence (tensor cores where present) vs CPU") {
  if (!vkt::available()) return;
  check_attention_cases(prefill_steps);
}

#endif

}  // namespace
