// kv_store + attention on the GPU against the CPU backend: grouped-query heads, three sequences
// in one batch (interleaved, so their KV blocks interleave in the pool), positions spanning
// many 16-slot blocks and more than one 128-key tile of the online softmax, the chunked window
// of Llama 4, f16 and f32 K and V (also mixed), and decode steps that replay the recorded step
// with new positions, slots and block tables. Decode steps split the context (flash decoding):
// a 1,280-slot cache gives ten 128-key splits and a sequence of 1,200 keys fills them, so the
// merge's eight-split batches and its remainder both sum keys, with the COMBINE dispatch and as
// the split kernel's tail (STRATA_VK_TAIL), the COMBINE dispatch in its default form and its
// narrowest (several rounds of splits a thread, two passes over D 256's dims). The grouped decode
// kernel runs with lanes splitting each key row (LANES: the default where the subgroup and head
// shape allow) and a thread a key.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "support/scoped_env.hpp"
#include "vulkan/vk_harness.hpp"

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

struct attn_case {
  const char* name;
  std::uint32_t H, Hkv, D, chunk;
  kv::kv_type k, v;
  std::uint32_t n_ctx = 512;
  bool long_steps = false;  // long_steps below instead of steps
};

constexpr std::uint32_t table_rows = 256;

// (sequence, tokens appended) per step, in batch order; the last two steps have the same shape,
// so the GPU replays its recorded command buffer for the second one.
// Single-sequence steps of >= 16 tokens take the query-tiled prefill kernel (QTILE), with a
// partial last tile and positions crossing the chunk windows.
const std::vector<vkt::seq_tokens> steps = {
    {{0, 100}, {1, 37}, {2, 5}},
    {{1, 60}, {0, 90}, {2, 1}},
    {{2, 40}},
    {{2, 70}},
    {{0, 1}, {1, 1}, {2, 1}},
    {{0, 1}, {1, 1}, {2, 1}},
};

// One sequence to 1,202 keys (every split of a 1,280-slot cache), decode steps replayed.
const std::vector<vkt::seq_tokens> long_steps = {
    {{0, 700}, {1, 37}},
    {{0, 500}},
    {{0, 1}, {1, 1}},
    {{0, 1}, {1, 1}},
};

const std::vector<vkt::seq_tokens>& steps_of(const attn_case& c) { return c.long_steps ? long_steps : steps; }

template <class Backend>
std::vector<std::vector<float>> run_attention(Backend& be, const attn_case& c, const vkt::weight_store::infos& t,
                                              std::uint32_t block_size = 16) {
  kv::kv_config cfg;
  cfg.n_layer = 1;
  cfg.n_head_kv = c.Hkv;
  cfg.head_dim = c.D;
  cfg.n_ctx = c.n_ctx;
  cfg.n_seq = 3;
  cfg.block_size = block_size;
  cfg.type_k = c.k;
  cfg.type_v = c.v;
  return vkt::run_attention_steps(be, cfg, {c.H, c.Hkv, c.D, c.chunk, 1.0f / std::sqrt(float(c.D))}, t, table_rows, steps_of(c));
}

TEST_CASE("vulkan ops: kv_store + attention (GQA, several sequences, chunked, f16/f32 KV) vs CPU") {
  if (!vkt::available()) return;
  using kv::kv_type;
  const attn_case cases[] = {
      {"GQA 8/2, D 64, f16 KV, causal", 8, 2, 64, 0, kv_type::f16, kv_type::f16},
      {"GQA 6/2, D 128, f32 KV, chunk 48", 6, 2, 128, 48, kv_type::f32, kv_type::f32},
      {"MHA 4/4, D 256, f32 K + f16 V, causal", 4, 4, 256, 0, kv_type::f32, kv_type::f16},
      {"GQA 8/1, D 80, f16 K + f32 V, chunk 64", 8, 1, 80, 64, kv_type::f16, kv_type::f32},
      {"GQA 8/2, D 128, f16 KV, causal, 10 splits", 8, 2, 128, 0, kv_type::f16, kv_type::f16, 1280, true},
      {"GQA 8/2, D 128, f16 KV, chunk 256, 10 splits", 8, 2, 128, 256, kv_type::f16, kv_type::f16, 1280, true},
  };
  std::mt19937 rng(77);
  for (const auto& c : cases) {
    CAPTURE(c.name);
    vkt::weight_store store;
    const vkt::weight_store::infos t = {
        &store.add_f32("test.q", vkt::normal_floats(std::size_t(table_rows) * c.H * c.D, rng, 1.5f), c.H * c.D, table_rows),
        &store.add_f32("test.k", vkt::normal_floats(std::size_t(table_rows) * c.Hkv * c.D, rng, 1.5f), c.Hkv * c.D, table_rows),
        &store.add_f32("test.v", vkt::normal_floats(std::size_t(table_rows) * c.Hkv * c.D, rng), c.Hkv * c.D, table_rows)};
    std::vector<std::vector<float>> g, g_tiled, g_tail, g_thread, cpu;
    std::vector<std::vector<std::vector<float>>> g_fa;  // the tensor-core kernel's tile variants
    const std::size_t n_steps = steps_of(c).size();
    std::vector<double> tol(n_steps, vkt::tol_attention);
    bool tensor_core_steps = false;  // some step of the case ran the tensor-core kernel (attention_mma)
    {
      gpu::backend be;
      g = run_attention(be, c, t);
      for (std::size_t s = 0; s < n_steps; ++s)
        if (be.tensor_core_attention(std::uint32_t(g[s].size() / (c.H * c.D)), c.D, c.k, c.v)) {
          tol[s] = vkt::tol_attention_f16;
          tensor_core_steps = true;
        }
    }
    {  // the opt-in query-tiled prefill kernel (single-sequence steps of >= 16 tokens; tensor cores off),
       // and in its decode steps the LANES form's cache slots a chunk from one block-table read where
       // the chunk's keys share a block (the default): 9-slot blocks, so chunks of 2 keys and more take
       // both ways (chunks of one key the first). Where the keys' slots are does not change the results.
      const test::scoped_env qtile("STRATA_VK_QTILE_ATTN", "1"), fa("STRATA_VK_FA", "0"), slots("STRATA_VK_CHUNK_SLOTS", "1");
      gpu::backend_options profiled;
      profiled.profile = true;  // to see which kernel ran
      gpu::backend be(profiled);
      g_tiled = run_attention(be, c, t, 9);
      CHECK(vkt::ran_kernel(be, "attention_dec", ".CHUNK_SLOTS") == vkt::ran_kernel(be, "attention_dec", ".LANES"));
    }
    // The prompt attention's tiles (tuning.hpp fa_warps, fa_keys, fa_fast_mask): 128 query rows,
    // 64-key tiles, tiles inside every row's range unmasked (the chunked case's starts too). The
    // three switches name only the tensor-core kernel's pipeline (kernel_variants::flash_req): where
    // no step of the case runs it (no tensor cores, as on lavapipe; f32 sides; D 80 or 256) the
    // three runs would dispatch g's kernels again and give g bit for bit, so they run only where it does.
    if (tensor_core_steps)
      for (const auto& [warps, keys, fast] : {std::tuple{"8", "32", "0"}, {"4", "64", "1"}, {"8", "64", "1"}}) {
        const test::scoped_env w("STRATA_VK_FA_WARPS", warps), k("STRATA_VK_FA_KEYS", keys), f("STRATA_VK_FA_FASTMASK", fast);
        gpu::backend be;
        g_fa.push_back(run_attention(be, c, t));
      }
    else
      MESSAGE(c.name << ": no step on the tensor-core kernel, so no runs of its tile variants");
    {  // the split decode's merge as the split kernel's last workgroup (split_combine.glsl), and the LANES
       // form's streams in chunks of one key (CHUNK_KEYS: G of a chunk's (key, head) pairs for LPK lanes;
       // lavapipe's 8 lanes a key row make a group of 4's chunks 2 keys, a group of 8's one already), each
       // key's cache slot from its own block-table read (the default reads one a chunk)
      const test::scoped_env tail("STRATA_VK_TAIL", "8"), kc("STRATA_VK_DEC_KC", "1"), slots("STRATA_VK_CHUNK_SLOTS", "0");
      gpu::backend_options profiled;
      profiled.profile = true;
      gpu::backend be(profiled);
      g_tail = run_attention(be, c, t);
      if (c.H == 4 * c.Hkv) CHECK(vkt::ran_kernel(be, "attention_dec", ".CHUNK_KEYS") == vkt::ran_kernel(be, "attention_dec", ".LANES"));
      CHECK_FALSE(vkt::ran_kernel(be, "attention_dec", ".CHUNK_SLOTS"));
    }
    {  // grouped decode with a thread a key instead of lanes splitting the dims (attention_dec.glsl LANES),
       // every decode step split (no short-context switch), and the merge's narrowest form: 128
       // threads with 4 partials in flight, so it takes several rounds of splits (10 splits) and two
       // passes over the dims (D 256)
      const test::scoped_env lanes("STRATA_VK_DEC_LANES", "0"), short_ctx("STRATA_VK_SHORT_CTX", "0"),
          cwg("STRATA_VK_COMBINE_WG", "128"), cif("STRATA_VK_COMBINE_CIF", "4");
      gpu::backend be;
      g_thread = run_attention(be, c, t);
    }
    {
      vkt::cpu_backend be;
      cpu = run_attention(be, c, t);
    }
    for (std::size_t s = 0; s < n_steps; ++s) {
      CAPTURE(s);
      const double e = test::nmse(g[s], cpu[s]);
      MESSAGE(std::string(c.name) << ", step " << s << " (" << g[s].size() / (c.H * c.D) << " tokens): NMSE GPU vs CPU " << e);
      CHECK(e <= tol[s]);
      CHECK(test::nmse(g_tiled[s], cpu[s]) <= vkt::tol_attention);
      CHECK(test::nmse(g_tail[s], cpu[s]) <= tol[s]);
      CHECK(test::nmse(g_thread[s], cpu[s]) <= tol[s]);
      const auto& step = steps_of(c)[s];
      if (std::all_of(step.begin(), step.end(), [](const auto& st) { return st.second == 1; }))
        CHECK(g_tiled[s] == g[s]);  // decode: the same rows, read from other slots and summed the same way
      for (std::size_t v = 0; v < g_fa.size(); ++v) {
        CAPTURE(v);
        CHECK(test::nmse(g_fa[v][s], cpu[s]) <= tol[s]);
      }
    }
  }
}

#endif

}  // namespace
