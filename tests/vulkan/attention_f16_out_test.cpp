// The decode attention writing the f16 copy of its output beside it (attn_f16_out.glsl) in steps
// of 5+ tokens, where the output projection reads f16 activations on tensor cores: the
// projection's result must equal, bit for bit, the one through a copy_rows dispatch
// (STRATA_VK_MM_FUSE=0), with one dispatch fewer, and agree with the CPU backend. Steps of many
// sequences take each decode attention kernel that writes the copy: 8 tokens at short contexts
// (the per-head kernel, unsplit), 16 tokens (the grouped kernel, attention_dec), and 8 tokens with
// one sequence past the short-context length (split, the COMBINE dispatch writes it).
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "support/scoped_env.hpp"
#include "vulkan/vk_harness.hpp"

namespace {
namespace attention_f16_out {  // its own names in a unity build

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

constexpr std::uint32_t H = 8, Hkv = 2, D = 128, QW = H * D, n_seqs = 16, table_rows = 256;

vkt::seq_tokens each_sequence(std::uint32_t seqs, std::uint32_t tokens) {
  vkt::seq_tokens st;
  for (std::uint32_t s = 0; s < seqs; ++s) st.emplace_back(s, tokens);
  return st;
}

// Prompts of 9 tokens for every sequence; decode steps of 8 and 16 sequences; sequence 0 to 300
// keys; a decode step of 8 sequences again, now split.
const std::vector<vkt::seq_tokens> steps = {
    each_sequence(n_seqs, 9), each_sequence(8, 1), each_sequence(n_seqs, 1), {{0, 290}}, each_sequence(8, 1),
};

template <class Backend>
std::vector<std::vector<float>> run(Backend& be, const vkt::weight_store::infos& t, const gguf::tensor_info& wo,
                                    std::vector<std::uint32_t>* dispatches) {
  kv::kv_config cfg;
  cfg.n_layer = 1;
  cfg.n_head_kv = Hkv;
  cfg.head_dim = D;
  cfg.n_ctx = 1280;
  cfg.n_seq = n_seqs;
  cfg.block_size = 16;
  cfg.type_k = kv::kv_type::f16;
  cfg.type_v = kv::kv_type::f16;
  return vkt::run_attention_steps(be, cfg, {H, Hkv, D, 0, 1.0f / std::sqrt(float(D))}, t, table_rows, steps, &wo, dispatches);
}

TEST_CASE("vulkan ops: decode attention's f16 output copy feeds the output projection as copy_rows would") {
  if (!vkt::available()) return;
  std::mt19937 rng(4242);
  vkt::weight_store store;
  const vkt::weight_store::infos t = {
      &store.add_f32("test.q", vkt::normal_floats(std::size_t(table_rows) * QW, rng, 1.5f), QW, table_rows),
      &store.add_f32("test.k", vkt::normal_floats(std::size_t(table_rows) * Hkv * D, rng, 1.5f), Hkv * D, table_rows),
      &store.add_f32("test.v", vkt::normal_floats(std::size_t(table_rows) * Hkv * D, rng), Hkv * D, table_rows)};
  const auto w = vkt::make_weight(gguf::type_id::q4_k, QW, QW, rng, 0.05f);
  const auto& wo = store.add("blk.0.attn_output.weight", gguf::type_id::q4_k, w.bytes, QW, QW);
  std::vector<std::vector<float>> fused, plain, cpu;
  std::vector<std::uint32_t> n_fused, n_plain;
  std::vector<bool> f16_path;
  {
    gpu::backend be;
    fused = run(be, t, wo, &n_fused);
    for (const auto& st : steps) {  // multi-sequence steps the tensor-core matmuls take (prompt-sized: the f16 GEMM)
      std::uint32_t n = 0;
      for (const auto& [seq, count] : st) n += count;
      f16_path.push_back(st.size() > 1 && (n <= 64 ? be.register_fragment_matmul(gguf::type_id::q4_k, QW, n)
                                                   : be.tensor_core_matmul(gguf::type_id::q4_k, QW, n)));
    }
  }
  {
    const test::scoped_env off("STRATA_VK_MM_FUSE", "0");
    gpu::backend be;
    plain = run(be, t, wo, &n_plain);
  }
  {
    vkt::cpu_backend be;
    cpu = run(be, t, wo, nullptr);
  }
  REQUIRE(n_fused.size() == steps.size());
  REQUIRE(n_plain.size() == steps.size());
  for (std::size_t s = 0; s < steps.size(); ++s) {
    CAPTURE(s);
    const double e = test::nmse(fused[s], plain[s]), c = test::nmse(fused[s], cpu[s]);
    MESSAGE("step " << s << " (" << fused[s].size() / QW << " tokens): " << n_fused[s] << " dispatches, " << n_plain[s]
                    << " with the copy (f16 copy beside the attention: " << f16_path[s] << "); NMSE vs the copy " << e
                    << ", vs CPU " << c);
    CHECK(fused[s] == plain[s]);
    CHECK(c <= vkt::tol_matmul_cpu);
    if (f16_path[s]) CHECK(n_fused[s] + 1 == n_plain[s]);
    else CHECK(n_fused[s] == n_plain[s]);
  }
}

#endif

}  // namespace attention_f16_out
}  // namespace
