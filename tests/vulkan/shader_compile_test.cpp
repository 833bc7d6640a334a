// Kernels that only a device with tensor cores runs (VK_NV_cooperative_matrix): lavapipe in CI
// cannot execute them, so at least every variant the backend may request must compile to SPIR-V
// here (glslang needs no device). Their numerics are checked on the GPU by vk_matvec_bench's
// float64 comparison and the fidelity tests.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "strata/runtime/engine.hpp"

#ifdef STRATA_HAS_VULKAN
#include "../../runtime/vulkan/pipelines.hpp"
#include "../../runtime/vulkan/shader_compiler.hpp"
#endif

namespace strata::test {
namespace {

#ifdef STRATA_HAS_VULKAN
void compiles(const gpu::pipeline_request& r) {
  gpu::shader_compiler c({}, "offline");  // no cache directory: compile every time
  CAPTURE(r.label());
  std::vector<std::uint32_t> spirv;
  CHECK_NOTHROW(spirv = c.compile(r.label(), gpu::assemble_source(r)));
  CHECK(spirv.size() > 5);
}
#endif

TEST_CASE("vulkan shaders: small-batch tensor-core matmul variants compile (every format, token tile, MoE mode)") {
#ifndef STRATA_HAS_VULKAN
  MESSAGE("this build has no Vulkan backend: shader compile test skipped");
#else
  using gguf::type_id;
  for (const auto t : {type_id::q4_k, type_id::q6_k, type_id::q8_0, type_id::q4_0, type_id::q5_k, type_id::iq4_xs,
                       type_id::f16})
    for (const char* tt : {"1", "4"}) {
      compiles({"mul_mm_small", t, {{"WG", "128"}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"TT", tt}}, 3});
      compiles({"mul_mm_small", t, {{"WG", "128"}, {"COOPMAT", "1"}, {"TT", tt}}, 3});  // dequant16 for every format
    }
  for (const char* tt : {"1", "4"})
    compiles({"mul_mm_small", type_id::q4_k, {{"WG", "128"}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"PRE_A", "1"}, {"TT", tt}}, 3});
  for (const char* tt : {"2", "3"})
    compiles({"mul_mm_small", type_id::q4_k, {{"WG", "128"}, {"COOPMAT", "1"}, {"TT", tt}}, 3});
  compiles({"mul_mm_small", type_id::q4_k, {{"WG", "128"}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"TT", "2"}, {"MOE_GROUPED", "1"}}, 4});
  compiles({"mul_mm_small", type_id::q4_k, {{"WG", "128"}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"TT", "2"}, {"MMS_H2", "1"}}, 3});
  compiles({"mul_mm_small", type_id::q6_k,
            {{"WG", "128"}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"TT", "4"}, {"MOE_GROUPED", "1"}, {"SCATTER", "1"}}, 4});
  // 8 warps where the partial sums fit (the backend's choice up to 32 tokens with STRATA_VK_MMS_XS=0);
  // beyond, a clear error.
  compiles({"mul_mm_small", type_id::q6_k, {{"WG", "256"}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"TT", "2"}, {"WARPS", "8"}}, 3});
  // Activations staged in shared memory (XS) at the warp counts the backend picks: dense at every
  // token tile (and 4 warps at 32 tokens for Q4_K), grouped experts at most 4, with and without SCATTER.
  for (const auto t : {type_id::q4_k, type_id::q6_k, type_id::q8_0})
    for (const auto& [tt, w, wg] : {std::tuple{"1", "7", "4"}, {"2", "5", "4"}, {"2", "4", "4"}, {"3", "4", "4"}, {"4", "3", "3"}}) {
      const auto wgs = [](const char* n) { return std::to_string(32 * std::stoi(n)); };
      compiles({"mul_mm_small", t, {{"WG", wgs(w)}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"TT", tt}, {"WARPS", w}, {"XS", "1"}}, 3});
      compiles({"mul_mm_small", t,
                {{"WG", wgs(wg)}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"TT", tt}, {"WARPS", wg}, {"MOE_GROUPED", "1"}, {"XS", "1"}}, 4});
      compiles({"mul_mm_small", t,
                {{"WG", wgs(wg)}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"TT", tt}, {"WARPS", wg}, {"MOE_GROUPED", "1"}, {"SCATTER", "1"}, {"XS", "1"}}, 4});
    }
  // N8: 8-token steps as weights x tokens 16x8x16 products, 8 warps (mm_small_xs_warps(1, true)).
  for (const auto t : {type_id::q4_k, type_id::q6_k, type_id::q8_0, type_id::iq4_xs})
    compiles({"mul_mm_small", t, {{"WG", "256"}, {"COOPMAT", "1"}, {"MM_SMALL", "1"}, {"TT", "1"}, {"WARPS", "8"}, {"XS", "1"}, {"N8", "1"}}, 3});
  {
    gpu::shader_compiler c({}, "offline");
    const gpu::pipeline_request r{"mul_mm_small", type_id::q4_k, {{"WG", "256"}, {"COOPMAT", "1"}, {"TT", "1"}, {"WARPS", "8"}, {"XS", "1"}}, 3};
    CHECK_THROWS_WITH(c.compile(r.label(), gpu::assemble_source(r)), doctest::Contains("XS"));
  }
  {
    gpu::shader_compiler c({}, "offline");
    const gpu::pipeline_request r{"mul_mm_small", type_id::q4_k, {{"WG", "256"}, {"COOPMAT", "1"}, {"TT", "4"}, {"WARPS", "8"}}, 3};
    CHECK_THROWS_WITH(c.compile(r.label(), gpu::assemble_source(r)), doctest::Contains("48 KiB"));
  }
  // mul_mm_reg: the fragments built in registers, at every tile count and warp count the backend
  // may request, with the f16 fragment layout the H200's driver reports (any quad-form order
  // compiles), and the probe that finds it.
  compiles({"mma_layout", std::nullopt, {{"WG", "32"}, {"COOPMAT", "1"}, {"F16_AB", "1"}}, 1});
  const std::pair<std::string, std::string> ar{"MMA_AR", "0,0,8,8,0,0,8,8"}, ac{"MMA_AC", "0,1,0,1,8,9,8,9"},
      bk{"MMA_BK", "0,1,8,9"};
  for (const auto t : {type_id::q4_k, type_id::q6_k}) {
    for (const auto& [nt8, w] : {std::pair{"1", "8"}, {"2", "8"}, {"4", "8"}, {"8", "8"}, {"8", "4"}, {"1", "16"}})
      compiles({"mul_mm_reg", t,
                {{"WG", std::to_string(32 * std::stoi(w))}, {"COOPMAT", "1"}, {"MM_REG", "1"}, {"NT8", nt8}, {"WARPS", w}, ar, ac, bk},
                3});
    // B through shared memory (a driver whose B fragments are not of the quad form: the H200's).
    for (const auto& [nt8, w] : {std::pair{"1", "16"}, {"2", "16"}, {"4", "8"}, {"8", "4"}}) {
      compiles({"mul_mm_reg", t,
                {{"WG", std::to_string(32 * std::stoi(w))}, {"COOPMAT", "1"}, {"MM_REG", "1"}, {"NT8", nt8}, {"WARPS", w}, ar, ac},
                3});
      compiles({"mul_mm_reg", t,
                {{"WG", std::to_string(32 * std::stoi(w))}, {"COOPMAT", "1"}, {"MM_REG", "1"}, {"NT8", nt8}, {"WARPS", w}, ar, ac, {"XA", "0"}},
                3});
      // The residual add in the store (a decoder's O and down projections).
      compiles({"mul_mm_reg", t,
                {{"WG", std::to_string(32 * std::stoi(w))}, {"COOPMAT", "1"}, {"MM_REG", "1"}, {"NT8", nt8}, {"WARPS", w}, ar, ac,
                 {"RESIDUAL", "1"}},
                4});
      // Gate and up in one dispatch with the SwiGLU and its f16 copy in the store.
      compiles({"mul_mm_reg", t,
                {{"WG", std::to_string(32 * std::stoi(w))}, {"COOPMAT", "1"}, {"MM_REG", "1"}, {"NT8", nt8}, {"WARPS", w}, ar, ac,
                 {"SWIGLU", "1"}},
                4});
    }
  }
  {
    gpu::shader_compiler c({}, "offline");
    const gpu::pipeline_request r{"mul_mm_reg", type_id::q4_k,
                                  {{"WG", "512"}, {"COOPMAT", "1"}, {"MM_REG", "1"}, {"NT8", "8"}, {"WARPS", "16"}, ar, ac, bk}, 3};
    CHECK_THROWS_WITH(c.compile(r.label(), gpu::assemble_source(r)), doctest::Contains("48 KiB"));
  }
  // The MoE path's gather of each pair's row as f16, in expert order.
  compiles({"copy_rows", std::nullopt, {{"WG", "128"}, {"TO_F16", "1"}, {"INDEXED", "1"}}, 4});
#endif
}

TEST_CASE("vulkan shaders: prefill GEMM variants compile (f16 scratch, weights in place, token-fast grid)") {
#ifndef STRATA_HAS_VULKAN
  MESSAGE("this build has no Vulkan backend: shader compile test skipped");
#else
  using gguf::type_id;
  // The backend's tiles (kernel_variants.hpp mm3_tiles): BM x BN, WM x WN per warp.
  const char* tiles[][4] = {{"128", "128", "32", "64"}, {"64", "64", "32", "32"}, {"64", "32", "32", "16"}, {"64", "16", "16", "16"}};
  for (const auto& t : tiles) {
    const std::string wg = std::to_string(std::stoi(t[0]) / std::stoi(t[2]) * (std::stoi(t[1]) / std::stoi(t[3])) * 32);
    std::vector<std::pair<std::string, std::string>> d{{"WG", wg},   {"COOPMAT", "1"}, {"BM", t[0]},   {"BN", t[1]},
                                                       {"WM", t[2]}, {"WN", t[3]},      {"X_F16", "1"}};
    auto f16 = d;
    f16.emplace_back("BK", "32");
    compiles({"mul_mm_f16", type_id::f16, f16, 3});
    {  // the residual add in the store, with either grid; over the scratch, gate/up/SwiGLU too
      auto r = f16;
      r.emplace_back("RESIDUAL", "1");
      compiles({"mul_mm_f16", type_id::f16, r, 4});
      r.emplace_back("TOK_FAST", "1");
      compiles({"mul_mm_f16", type_id::f16, r, 4});
      if (std::string(t[2]) == "32") {
        auto sw = f16;
        sw.insert(sw.end(), {{"SWIGLU", "1"}, {"TOK_FAST", "1"}});
        compiles({"mul_mm_f16", type_id::f16, sw, 4});
      }
    }
    for (const auto f : {type_id::q4_k, type_id::q6_k})
      for (const char* bk : {"32", "64"}) {
        if (std::string(bk) == "64" && std::string(t[1]) == "128") continue;  // over 48 KiB, below
        auto q = d;
        q.insert(q.end(), {{"BK", bk}, {"QW", "1"}, {"MM_SMALL", "1"}});
        compiles({"mul_mm_f16", f, q, 3});
        if (std::string(t[2]) == "32") {  // gate/up/SwiGLU in one GEMM (32-row warp tiles), one and two threads a row
          auto sw = q;
          sw.emplace_back("SWIGLU", "1");
          compiles({"mul_mm_f16", f, sw, 4});
          sw.emplace_back("QW2", "1");
          compiles({"mul_mm_f16", f, sw, 4});
        }
        q.emplace_back("TOK_FAST", "1");
        compiles({"mul_mm_f16", f, q, 3});
        q.emplace_back("SPLIT_K", "1");
        compiles({"mul_mm_f16", f, q, 3});
        q.emplace_back("QW2", "1");
        compiles({"mul_mm_f16", f, q, 3});
        q.emplace_back("MMA_N", "8");
        compiles({"mul_mm_f16", f, q, 3});
        if (f == type_id::q4_k) {  // the expansion in f16x2 arithmetic, with and without QW2
          q.emplace_back("MMS_H2", "1");
          compiles({"mul_mm_f16", f, q, 3});
          std::erase_if(q, [](const auto& kv) { return kv.first == "QW2"; });
          compiles({"mul_mm_f16", f, q, 3});
        }
      }
    f16.emplace_back("SPLIT_K", "1");
    compiles({"mul_mm_f16", type_id::f16, f16, 3});
  }
  // In place, a step is half or all of a 64-element unit per row, one row per thread; and two
  // tiles must fit the 48 KiB of shared memory every device offers.
  gpu::shader_compiler c({}, "offline");
  const std::pair<std::vector<std::pair<std::string, std::string>>, const char*> bad[] = {
      {{{"BK", "48"}, {"BM", "64"}, {"BN", "16"}, {"WG", "128"}}, "one row per thread"},
      {{{"BK", "32"}, {"BM", "128"}, {"BN", "16"}, {"WG", "64"}}, "one row per thread"},
      {{{"BK", "64"}, {"BM", "128"}, {"BN", "128"}, {"WG", "256"}}, "48 KiB"},
      {{{"BK", "32"}, {"BM", "128"}, {"BN", "16"}, {"WG", "128"}, {"QW2", "1"}}, "two threads per weight row"},
      {{{"BK", "32"}, {"BM", "64"}, {"BN", "16"}, {"WG", "128"}, {"SWIGLU", "1"}, {"SPLIT_K", "1"}}, "K not split"},
      {{{"BK", "32"}, {"BM", "64"}, {"BN", "16"}, {"WG", "128"}, {"RESIDUAL", "1"}, {"SPLIT_K", "1"}}, "a plain unsplit product"}};
  for (const auto& [defs, why] : bad) {
    std::vector<std::pair<std::string, std::string>> d{{"COOPMAT", "1"}, {"WM", "32"}, {"WN", "16"},
                                                       {"X_F16", "1"},   {"QW", "1"}, {"MM_SMALL", "1"}};
    d.insert(d.end(), defs.begin(), defs.end());
    const gpu::pipeline_request r{"mul_mm_f16", type_id::q4_k, d, 3};
    CHECK_THROWS_WITH(c.compile(r.label(), gpu::assemble_source(r)), doctest::Contains(why));
  }
#endif
}

TEST_CASE("vulkan shaders: int8 tensor-core GEMM variants compile (Q4_K and Q6_K units, MoE chunks, dense tiles)") {
#ifndef STRATA_HAS_VULKAN
  MESSAGE("this build has no Vulkan backend: shader compile test skipped");
#else
  using gguf::type_id;
  compiles({"mma_layout", std::nullopt, {{"WG", "32"}, {"COOPMAT", "1"}}, 1});
  // The accumulator offsets the H200's driver reports (mma_layout.cpp); any lane-uniform list compiles.
  const std::pair<std::string, std::string> dr{"MMA_DR", "0,0,0,0,8,8,8,8"}, dc{"MMA_DC", "0,1,8,9,0,1,8,9"};
  for (const auto t : {type_id::q4_k, type_id::q6_k}) {
    // Grouped experts at each chunk the backend may use (record_moe_mmq: BM 128, WM 32, BN = chunk).
    for (const auto& [bn, wn, wg] : {std::tuple{"16", "16", "128"}, {"32", "16", "256"}, {"64", "32", "256"}})
      compiles({"mul_mmq", t,
                {{"WG", wg}, {"COOPMAT", "1"}, {"MMQ", "1"}, {"BM", "128"}, {"BN", bn}, {"WM", "32"}, {"WN", wn}, dr, dc,
                 {"MOE_GROUPED", "1"}},
                5});
    // Dense tiles (vk_matvec_bench's iq variants); Q4_K's widest without the row padding.
    compiles({"mul_mmq", t, {{"WG", "256"}, {"COOPMAT", "1"}, {"MMQ", "1"}, {"BM", "128"}, {"BN", "64"}, {"WM", "32"}, {"WN", "32"}, dr, dc}, 4});
  }
  compiles({"mul_mmq", type_id::q4_k,
            {{"WG", "256"}, {"COOPMAT", "1"}, {"MMQ", "1"}, {"BM", "128"}, {"BN", "128"}, {"WM", "32"}, {"WN", "64"}, {"RS", "4"}, dr, dc},
            4});
  // Dense small batches (record_mmq_dense: 16, 32, 64-token tiles), whole and split over K.
  for (const auto t : {type_id::q4_k, type_id::q6_k})
    for (const auto& [bm, bn, wm, wn, wg] : {std::tuple{"64", "16", "16", "16", "128"}, {"64", "32", "32", "16", "128"},
                                             {"128", "64", "32", "32", "256"}})
      for (const bool split : {false, true}) {
        std::vector<std::pair<std::string, std::string>> d{
            {"WG", wg}, {"COOPMAT", "1"}, {"MMQ", "1"}, {"BM", bm}, {"BN", bn}, {"WM", wm}, {"WN", wn}, dr, dc};
        if (split) d.emplace_back("SPLIT_K", "1");
        compiles({"mul_mmq", t, d, 4});
      }
  // The lab's ablations (vk_matvec_bench "iq:...:LAB=bits"), each part left out alone.
  for (const char* lab : {"1", "2", "4", "8"})
    for (const auto t : {type_id::q4_k, type_id::q6_k})
      compiles({"mul_mmq", t,
                {{"WG", "256"}, {"COOPMAT", "1"}, {"MMQ", "1"}, {"BM", "128"}, {"BN", "64"}, {"WM", "32"}, {"WN", "32"}, dr, dc, {"LAB", lab}},
                4});
#endif
}

TEST_CASE("vulkan shaders: tensor-core attention variants compile (prefill and decode, f16, q8_0, TurboQuant, mixed, ring)") {
#ifndef STRATA_HAS_VULKAN
  MESSAGE("this build has no Vulkan backend: shader compile test skipped");
#else
  for (const char* d : {"64", "128"})
    for (const bool quad : {false, true}) {  // MMA_QUAD: the softmax in registers (mma.sync's layout)
      std::vector<std::pair<std::string, std::string>> defs{{"WG", "128"}, {"COOPMAT", "1"}, {"HEAD_D", d}};
      if (quad) defs.emplace_back("MMA_QUAD", "1");
      compiles({"attention_mma", std::nullopt, defs, 8});
      // The tile variants (tuning.hpp fa_warps / fa_keys / fa_fast_mask; 64 keys with MMA_QUAD only).
      for (const char* warps : {"4", "8"})
        for (const char* keys : {"32", "64"}) {
          if (!quad && std::string(keys) == "64") continue;
          auto v = defs;
          v[0].second = std::to_string(32 * std::stoi(warps));
          v.insert(v.end(), {{"FA_WARPS", warps}, {"FA_KEYS", keys}});
          if (quad) v.emplace_back("FA_FASTMASK", "1");
          compiles({"attention_mma", std::nullopt, v, 8});
        }
    }
  // The compressed sides as backend::impl::kvq_defs names them: kind 1 f16, 2 q8_0, 3 TurboQuant.
  struct side {
    const char* kind;
    const char* tq;  // TurboQuant bits, or nullptr
  };
  const side sides[] = {{"1", nullptr}, {"2", nullptr}, {"3", "4"}, {"3", "3"}, {"3", "2"}};
  for (const char* d : {"64", "128"})
    for (const side& k : sides)
      for (const side& v : sides)
        for (const bool ring : {false, true}) {
          if (std::string(k.kind) == "1" && std::string(v.kind) == "1") continue;  // attention_mma's f16 form above
          std::vector<std::pair<std::string, std::string>> defs{{"KV_D", d}, {"KV_K_KIND", k.kind}, {"KV_V_KIND", v.kind}};
          if (k.tq) defs.emplace_back("KV_K_TQ", k.tq);
          if (v.tq) defs.emplace_back("KV_V_TQ", v.tq);
          if (ring) defs.emplace_back("KV_RING", "1");
          auto dec = defs;
          defs.insert(defs.end(), {{"WG", "128"}, {"COOPMAT", "1"}, {"TQ_ROT_N", "16"}});
          compiles({"attention_mma", std::nullopt, defs, 11});
          defs.emplace_back("MMA_QUAD", "1");
          compiles({"attention_mma", std::nullopt, defs, 11});
          // Decode (attention_mma_dec.glsl) at the group sizes of the supported models.
          for (const char* g : {"4", "8"}) {
            auto dg = dec;
            dg.insert(dg.end(), {{"WG", "32"}, {"COOPMAT", "1"}, {"TQ_ROT_N", "16"}, {"GQA_G", g}, {"MAX_SPLIT", "256"}});
            compiles({"attention_mma_dec", std::nullopt, dg, 11});
          }
        }
#endif
}

}  // namespace
}  // namespace strata::test
