// The grouped attention over compressed KV (attention_qdec.glsl: one workgroup per KV head and
// token scores its whole query-head group) on random data: several sequences prefilled to odd
// lengths (kv_store only), a 37-token prompt step continuing one of them (through the grouped
// kernel where unsplit, as STRATA_VK_TQ_GQA=2 runs it), a 12-token prompt step continuing the
// other two (the grouped kernel, as steps of several sequences take it), then decode steps of one token per
// sequence; GQA groups 1, 3, 4, 6 and 8; tq2/tq3/tq4, q8_0, f16 and mixed sides; head dims 64,
// 96 (two TurboQuant segments) and 128; with and without the f16 window ring; chunked attention;
// split (n_ctx 2048: 128-key splits) and unsplit; some with Qwen3's head ops before the append
// (weighted RMS norm of q and k heads, NEOX RoPE),
// which the GPU folds into one attn_prep dispatch that also encodes K and V (with a window, a
// step within it writes the ring there and the codes in a second dispatch beside the attention).
// The grouped kernel runs in both forms: thread-a-key, and LANES where the group and the
// subgroup allow (STRATA_VK_QDEC_LANES=1; groups of 3 and 6 stay thread-a-key), and where a
// split decode has a window, both forms again with the window's keys as a split of their own
// (STRATA_VK_QDEC_RING_SPLIT=1). TurboQuant queries are rotated by attn_prep where it runs their
// head ops, and the split values rotated back by the merge where the splits allow it
// (STRATA_VK_QDEC_HOIST: the LANES runs and the first thread-a-key run).
// TurboQuant keys of 2 or 3 bits also run with int8 key scores (the default, STRATA_VK_QDEC_IDOT; the
// runs above keep float scores) in both forms, against the CPU within their own tolerance and
// against each other; one-segment TurboQuant values run with their scales folded into the weights
// (STRATA_VK_QDEC_VFOLD, the default) and without.
// Gated against the CPU backend's attention_compressed (the scalar reference) and against the
// per-head kernel attention_q with unfused ops and kv_store_q (STRATA_VK_TQ_GQA=0,
// STRATA_VK_FUSE=0): without head ops both store the same codes, so they agree far tighter.
#include <doctest/doctest.h>

#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "strata/hadamard/blocked.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/turboquant/format.hpp"
#include "vulkan/vk_harness.hpp"

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

// The grouped and per-head kernels read identical codes and differ only in the order of their
// float sums (and the subgroup reductions), a few ulp per output.
constexpr double tol_grouped_vs_per_head = 1e-10;

struct decode_case {
  const char* name;
  std::uint32_t H, Hkv, D, window, chunk, n_ctx;
  kv::kv_type k, v;
  bool head_ops;  // q/k norm + RoPE before the append
};

// Prefill lengths of the three sequences (odd, across 128-key split boundaries; the longest
// shorter where the cache is: the sequences share n_ctx slots, taken in blocks of 16), then decode.
constexpr std::uint32_t prefill_len[3] = {1, 129, 383};
std::uint32_t prefill_length(const decode_case& c, std::uint32_t seq) {
  return seq == 2 ? std::min(prefill_len[2], c.n_ctx - 203) : prefill_len[seq];
}
constexpr std::uint32_t decode_steps = 3;
constexpr std::uint32_t prompt_len = 37;  // the prompt step's tokens (sequence 0)
constexpr std::uint32_t decode_table_rows = 560;  // distinct q/k/v rows for every token of a run
constexpr std::uint32_t decode_max_tokens = 128;  // prefill chunk

// Runs the prefill (kv_store in chunks, no attention) and returns the attention output of the
// prompt steps (step 0: sequence 0; step 1: sequences 1 and 2) and of each decode step (all three
// sequences: steps 2 and 4; sequences 1 and 2: step 3). A backend replays the step it recorded for a batch size, so no step with
// attention has the size of a prefill chunk.
template <class Backend>
std::vector<std::vector<float>> run_decode(Backend& be, const decode_case& c, const vkt::weight_store::infos& t) {
  const std::uint32_t QW = c.H * c.D, KW = c.Hkv * c.D;
  const auto qt = be.load(*t[0]), kt = be.load(*t[1]), vt = be.load(*t[2]), qn = be.load(*t[3]), kn = be.load(*t[4]);
  graph::rope_params rp;
  rp.neox = true;
  rp.n_rot = c.D;
  rp.base = 1e6f;
  const auto q = be.alloc(decode_max_tokens, QW), k = be.alloc(decode_max_tokens, KW), v = be.alloc(decode_max_tokens, KW);
  const auto o = be.alloc(decode_max_tokens, QW);
  be.reserve(decode_max_tokens, 0);
  kv::kv_config cfg;
  cfg.n_layer = 1;
  cfg.n_head_kv = c.Hkv;
  cfg.head_dim = c.D;
  cfg.n_ctx = c.n_ctx;
  cfg.n_seq = 3;
  cfg.block_size = 16;
  cfg.type_k = c.k;
  cfg.type_v = c.v;
  cfg.full_precision_window = c.window;
  cfg.max_batch = decode_max_tokens;
  auto kv = be.make_kv(cfg);
  kv::block_table table(cfg);
  std::int32_t next_row = 0;
  // One batch of `count` tokens of each listed sequence; attention only when asked.
  auto step = [&](const vkt::seq_tokens& seqs, bool attend) {
    const auto b = vkt::continue_sequences(table, seqs, next_row, decode_table_rows);
    const std::uint32_t n = std::uint32_t(b.tokens.size());
    auto y = vkt::run_step(
        be, b,
        [&] {
          be.embed(qt, q.view(n));
          be.embed(kt, k.view(n));
          be.embed(vt, v.view(n));
          if (c.head_ops) {  // as graph::decoder records them for Qwen3
            const auto qh = q.view(n).split_rows(c.H), kh = k.view(n).split_rows(c.Hkv);
            be.rms_norm(qh, &qn, 1e-6f, qh);
            be.rms_norm(kh, &kn, 1e-6f, kh);
            be.rope(q.view(n), c.H, rp, nullptr);
            be.rope(k.view(n), c.Hkv, rp, nullptr);
          }
          be.kv_store(kv, 0, k.view(n), v.view(n));
          if (!attend) return v.view(n);
          be.attention(kv, 0, q.view(n), {c.H, c.Hkv, c.D, c.chunk, 1.0f / std::sqrt(float(c.D))}, o.view(n));
          return o.view(n);
        },
        &table);
    vkt::commit_sequences(table, seqs, b);
    return y;
  };
  for (std::uint32_t s = 0; s < 3; ++s)
    for (std::uint32_t done = 0; done < prefill_length(c, s); done += decode_max_tokens)
      step({{s, std::min(decode_max_tokens, prefill_length(c, s) - done)}}, false);
  std::vector<std::vector<float>> out;
  out.push_back(step({{0, prompt_len}}, true));
  out.push_back(step({{1, 7}, {2, 5}}, true));  // a prompt step of two sequences: the grouped kernel by default
  for (std::uint32_t i = 0; i < decode_steps; ++i)
    out.push_back(i == 1 ? step({{1, 1}, {2, 1}}, true) : step({{0, 1}, {1, 1}, {2, 1}}, true));
  return out;
}

// Every form of the grouped kernel on `cases`, against the per-head kernel and the CPU; returns
// whether the LANES form ran.
bool check_grouped_decode(std::span<const decode_case> cases) {
  std::mt19937 rng(2026);
  bool lanes_ran = false;  // attention_qdec's LANES form (groups of 4 and 8 on any subgroup of 4 or more)
  for (const auto& c : cases) {
    CAPTURE(std::string(c.name));
    vkt::weight_store store;
    const vkt::weight_store::infos t = {
        &store.add_f32("test.q", vkt::normal_floats(std::size_t(decode_table_rows) * c.H * c.D, rng, 1.5f), c.H * c.D, decode_table_rows),
        &store.add_f32("test.k", vkt::normal_floats(std::size_t(decode_table_rows) * c.Hkv * c.D, rng, 1.5f), c.Hkv * c.D, decode_table_rows),
        &store.add_f32("test.v", vkt::normal_floats(std::size_t(decode_table_rows) * c.Hkv * c.D, rng), c.Hkv * c.D, decode_table_rows),
        &store.add_f32("test.q_norm", vkt::normal_floats(c.D, rng, 0.5f), c.D),
        &store.add_f32("test.k_norm", vkt::normal_floats(c.D, rng, 0.5f), c.D)};
    std::vector<std::vector<float>> grouped, lanes, lanes_lab, per_head, cpu;
    bool case_lanes = false;  // this case's LANES run took the LANES form (the device's subgroups and the head allow it)
    std::vector<std::vector<float>> ring_split[2];  // thread-a-key, LANES; where the case has a window and splits
    // The runs below score keys in float (STRATA_VK_QDEC_IDOT=0), against the CPU's tight tolerance; the int8
    // scores (the default for tq2/tq3 keys) have runs of their own further down.
    ::setenv("STRATA_VK_QDEC_IDOT", "0", 1);
    gpu::backend_options profiled;
    profiled.profile = true;  // to see which kernel ran
    // These two runs stay on these kernels where the device has tensor cores too (the prompt
    // steps' attention_mma is kv_compressed_test's; attention_mma_dec the third run's below).
    ::setenv("STRATA_VK_FA", "0", 1);
    ::setenv("STRATA_VK_MMA_DEC", "0", 1);
    const bool splits = c.n_ctx > 256;
    for (const bool ring_split_form : {false, true})
    for (const bool lanes_form : {false, true}) {
      // (Groups of 3 and 6 run the LANES request in the thread-a-key form: one ring-split run.)
      if (ring_split_form && (!(c.window > 0 && splits) || (lanes_form && c.H / c.Hkv % 4 != 0))) continue;
      // Unsplit, the prompt step runs the decode steps' pipeline: through attention_qdec too.
      if (!splits) ::setenv("STRATA_VK_TQ_GQA", "2", 1);
      ::setenv("STRATA_VK_QDEC_LANES", lanes_form ? "1" : "0", 1);
      ::setenv("STRATA_VK_QDEC_RING_SPLIT", ring_split_form ? "1" : "0", 1);
      // The rotations hoisted where the LANES form runs (the default) and in the thread-a-key form's
      // first run (STRATA_VK_QDEC_HOIST=2).
      const bool hoist_all = !lanes_form && !ring_split_form;
      if (hoist_all) ::setenv("STRATA_VK_QDEC_HOIST", "2", 1);
      // The LANES form's ring-split run takes two forms other than the defaults: every key's cache slot
      // from its own block-table read (STRATA_VK_CHUNK_SLOTS=0; the default reads one a chunk of 16-slot
      // blocks), and chunks of one key (STRATA_VK_QDEC_KC: G (key, head) pairs for LPK lanes; where LPK
      // is the group, as lavapipe's 8 lanes for a group of 8, already so).
      const bool lab_forms = lanes_form && ring_split_form;
      // The first thread-a-key run and the LANES lab runs keep one-segment TurboQuant values' scales out of the
      // weights (STRATA_VK_QDEC_VFOLD=0; the default folds them): the same products in another order.
      if (hoist_all || lab_forms) ::setenv("STRATA_VK_QDEC_VFOLD", "0", 1);
      // The first run takes workgroups of 128 threads, tiles of 128 keys (the default of steps of several tokens,
      // as these), the others 256 (the default of one-token steps) in every step (STRATA_VK_QDEC_WG).
      ::setenv("STRATA_VK_QDEC_WG", hoist_all ? "128" : "256", 1);
      // The first run also reads key rows as 4-byte words, each tile's block-table entries at the tile and the
      // tile's softmax over the workgroup (STRATA_VK_QDEC_KVEC=0, _BLK_AHEAD=0, _WARP=0); the others 16-byte
      // words, the table a tile ahead and a softmax state a 32-thread unit.
      if (hoist_all) {
        ::setenv("STRATA_VK_QDEC_KVEC", "0", 1);
        ::setenv("STRATA_VK_QDEC_BLK_AHEAD", "0", 1);
        ::setenv("STRATA_VK_QDEC_WARP", "0", 1);
      }
      // They also merge the streams once (STRATA_VK_QDEC_ONE_PASS: every split runs one pass); the other LANES run,
      // with the window's keys among the codes' splits, merges them twice.
      if (lab_forms) {
        ::setenv("STRATA_VK_CHUNK_SLOTS", "0", 1);
        ::setenv("STRATA_VK_QDEC_KC", "1", 1);
        ::setenv("STRATA_VK_QDEC_ONE_PASS", "1", 1);
      }
      gpu::backend be(profiled);
      ::unsetenv("STRATA_VK_QDEC_HOIST");
      ::unsetenv("STRATA_VK_CHUNK_SLOTS");
      ::unsetenv("STRATA_VK_QDEC_KC");
      ::unsetenv("STRATA_VK_QDEC_ONE_PASS");
      ::unsetenv("STRATA_VK_TQ_GQA");
      ::unsetenv("STRATA_VK_QDEC_LANES");
      ::unsetenv("STRATA_VK_QDEC_RING_SPLIT");
      ::unsetenv("STRATA_VK_QDEC_VFOLD");
      ::unsetenv("STRATA_VK_QDEC_WG");
      ::unsetenv("STRATA_VK_QDEC_KVEC");
      ::unsetenv("STRATA_VK_QDEC_BLK_AHEAD");
      ::unsetenv("STRATA_VK_QDEC_WARP");
      (ring_split_form ? ring_split[lanes_form] : lanes_form ? lanes : grouped) = run_decode(be, c, t);
      CHECK(vkt::ran_kernel(be, "attention_qdec"));
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".RING_SPLIT") == ring_split_form);
      // The TurboQuant rotations outside the split workgroups (STRATA_VK_QDEC_HOIST): the queries
      // rotated by attn_prep where it runs their head ops, the values rotated back by the merge
      // where every split's partial is in one domain (no window, or the window's own split).
      const bool tq_k = kv::turboquant_bits(c.k) != 0, tq_v = kv::turboquant_bits(c.v) != 0;
      const bool hoisted = hoist_all || vkt::ran_kernel(be, "attention_qdec", ".LANES");
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QROT_IN") == (hoisted && tq_k && c.head_ops));
      CHECK(vkt::ran_kernel(be, "attention.", ".ROT_LATER") == (hoisted && splits && tq_v && (c.window == 0 || ring_split_form)));
      if (!lanes_form) CHECK_FALSE(vkt::ran_kernel(be, "attention_qdec", ".LANES"));
      // (256 threads: the wg256 run below, where the shared arrays fit lavapipe's 32 KiB.)
      if (hoist_all) CHECK_FALSE(vkt::ran_kernel(be, "attention_qdec", ".QDEC_WG"));
      else if (lanes_form) CHECK_FALSE(vkt::ran_kernel(be, "attention_qdec", ".QDEC_WG"));  // (a fallback keeps 128)
      const bool keys_form = !vkt::ran_kernel(be, "attention_qdec", ".LANES");
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_KVEC") == (keys_form && !hoist_all && kv::is_compressed(c.k)));
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_BLK_AHEAD") == (keys_form && !hoist_all));
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_WARP") == (keys_form && !hoist_all));
      // (Value rows ahead where the scales fold into the weights; on devices whose subgroups hold 32 lanes.)
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_VAHEAD") ==
            (keys_form && !hoist_all && vkt::ran_kernel(be, "attention_qdec", ".QDEC_VFOLD")));
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".CHUNK_SLOTS") == (!lab_forms && vkt::ran_kernel(be, "attention_qdec", ".LANES")));
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".LANES_ONE_PASS") == (lab_forms && vkt::ran_kernel(be, "attention_qdec", ".LANES")));
      // (Default chunks take CHUNK_KEYS=4 where a stream's lanes hold more: 32 lanes, not lavapipe's 8.)
      if (c.H == 4 * c.Hkv && lab_forms && vkt::ran_kernel(be, "attention_qdec", ".LANES"))
        CHECK(vkt::ran_kernel(be, "attention_qdec", ".CHUNK_KEYS"));
      if (lanes_form && !ring_split_form) case_lanes = vkt::ran_kernel(be, "attention_qdec", ".LANES");
      lanes_ran |= vkt::ran_kernel(be, "attention_qdec", ".LANES");
      CHECK(vkt::ran_kernel(be, "attn_prep"));
      // Decode steps within the window write their codes beside the attention (KV_PART 2).
      CHECK(vkt::ran_kernel(be, "attn_prep", ".KV_PART=2") == (c.window > 0));
      CHECK_FALSE(vkt::ran_kernel(be, "kv_store_q"));
    }
    if (c.window == 0 && case_lanes) {  // cases without a ring-split run: the lab forms above in the LANES run's place
      if (!splits) ::setenv("STRATA_VK_TQ_GQA", "2", 1);
      ::setenv("STRATA_VK_QDEC_LANES", "1", 1);
      ::setenv("STRATA_VK_CHUNK_SLOTS", "0", 1);
      ::setenv("STRATA_VK_QDEC_KC", "1", 1);
      ::setenv("STRATA_VK_QDEC_VFOLD", "0", 1);
      gpu::backend be(profiled);
      for (const char* v : {"STRATA_VK_TQ_GQA", "STRATA_VK_QDEC_LANES", "STRATA_VK_CHUNK_SLOTS", "STRATA_VK_QDEC_KC", "STRATA_VK_QDEC_VFOLD"})
        ::unsetenv(v);
      lanes_lab = run_decode(be, c, t);
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".LANES"));
      CHECK_FALSE(vkt::ran_kernel(be, "attention_qdec", ".CHUNK_SLOTS"));
      if (c.H == 4 * c.Hkv) CHECK(vkt::ran_kernel(be, "attention_qdec", ".CHUNK_KEYS"));
    }
    // Keys scored with int8 dot products (STRATA_VK_QDEC_IDOT, the thread-a-key form): TurboQuant keys
    // of 2 or 3 bits in whole 32-dim segments.
    ::unsetenv("STRATA_VK_QDEC_IDOT");
    std::vector<std::vector<float>> idot;
    if ((c.k == kv::kv_type::tq3 || c.k == kv::kv_type::tq2) && c.D % 32 == 0) {
      if (!splits) ::setenv("STRATA_VK_TQ_GQA", "2", 1);
      ::setenv("STRATA_VK_QDEC_LANES", "0", 1);
      ::setenv("STRATA_VK_QDEC_IDOT", "1", 1);
      ::setenv("STRATA_VK_QDEC_VFOLD", "1", 1);  // and values' scales in the weights, where one segment
      ::setenv("STRATA_VK_QDEC_RING_SPLIT", "0", 1);  // the ring's rows among the codes' (weights unscaled)
      // Queries rotated by attn_prep, as the LANES run below reads them: both quantize the same floats.
      ::setenv("STRATA_VK_QDEC_HOIST", "2", 1);
      // Tiles of 64 keys (STRATA_VK_QDEC_WG) in splits of several (STRATA_VK_TQ_SPLIT; the unsplit cases' steps
      // take several tiles too).
      ::setenv("STRATA_VK_QDEC_WG", "64", 1);
      ::setenv("STRATA_VK_TQ_SPLIT", "384", 1);
      gpu::backend be(profiled);
      for (const char* v : {"STRATA_VK_TQ_GQA", "STRATA_VK_QDEC_LANES", "STRATA_VK_QDEC_IDOT", "STRATA_VK_QDEC_VFOLD",
                            "STRATA_VK_QDEC_RING_SPLIT", "STRATA_VK_QDEC_HOIST", "STRATA_VK_QDEC_WG", "STRATA_VK_TQ_SPLIT"})
        ::unsetenv(v);
      idot = run_decode(be, c, t);
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_IDOT"));
      CHECK_FALSE(vkt::ran_kernel(be, "attention_qdec", ".LANES"));
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_WG=64"));
      const auto v_bits = kv::turboquant_bits(c.v);
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_VFOLD") == (v_bits && turboquant::format(c.D, v_bits).segments().size() == 1));
    }
    std::vector<std::vector<float>> idot_lanes;  // the same in the LANES form, where it runs
    if (!idot.empty() && case_lanes) {
      if (!splits) ::setenv("STRATA_VK_TQ_GQA", "2", 1);
      ::setenv("STRATA_VK_QDEC_LANES", "1", 1);
      ::setenv("STRATA_VK_QDEC_IDOT", "1", 1);
      ::setenv("STRATA_VK_QDEC_VFOLD", "1", 1);  // (the window's keys as a split of their own, the default)
      gpu::backend be(profiled);
      for (const char* v : {"STRATA_VK_TQ_GQA", "STRATA_VK_QDEC_LANES", "STRATA_VK_QDEC_IDOT", "STRATA_VK_QDEC_VFOLD"})
        ::unsetenv(v);
      // (LANES takes it where a lane's dims lie in one 32-dim query block, as D 128 on any subgroup of 4 or more.)
      idot_lanes = run_decode(be, c, t);
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".LANES"));
      if (c.D == 128) CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_IDOT"));
      if (c.D == 128) CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_VFOLD"));
      if (!vkt::ran_kernel(be, "attention_qdec", ".QDEC_IDOT")) idot_lanes.clear();
    }
    // Tiles of 64 keys (STRATA_VK_QDEC_WG) with float scores in 64-key splits (STRATA_VK_TQ_SPLIT), so a window's
    // keys take a split of their own (the int8 run above has several tiles a split).
    std::vector<std::vector<float>> wg64;
    if (kv::turboquant_bits(c.k) && kv::turboquant_bits(c.v)) {
      ::setenv("STRATA_VK_QDEC_LANES", "0", 1);
      ::setenv("STRATA_VK_QDEC_IDOT", "0", 1);
      ::setenv("STRATA_VK_QDEC_WG", "64", 1);
      ::setenv("STRATA_VK_TQ_SPLIT", "64", 1);
      gpu::backend be(profiled);
      for (const char* v : {"STRATA_VK_QDEC_LANES", "STRATA_VK_QDEC_IDOT", "STRATA_VK_QDEC_WG", "STRATA_VK_TQ_SPLIT"})
        ::unsetenv(v);
      wg64 = run_decode(be, c, t);
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_WG=64"));
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".RING_SPLIT") == (c.window > 0));
    }
    // Workgroups of 256 threads (the default of one-token steps; STRATA_VK_QDEC_WG in every step) with float scores
    // in splits of whole 256-key tiles, where the shared arrays fit lavapipe's 32 KiB (groups up to 4): eight
    // 32-thread units a tile, each with its softmax state.
    std::vector<std::vector<float>> wg256;
    if (kv::turboquant_bits(c.k) && kv::turboquant_bits(c.v) && c.H / c.Hkv <= 4 && splits) {
      ::setenv("STRATA_VK_QDEC_LANES", "0", 1);
      ::setenv("STRATA_VK_QDEC_IDOT", "0", 1);
      ::setenv("STRATA_VK_QDEC_WG", "256", 1);
      gpu::backend be(profiled);
      for (const char* v : {"STRATA_VK_QDEC_LANES", "STRATA_VK_QDEC_IDOT", "STRATA_VK_QDEC_WG"}) ::unsetenv(v);
      wg256 = run_decode(be, c, t);
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_WG=256"));
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_WARP"));
    }
    // Value rows staged by their keys' scoring threads (STRATA_VK_QDEC_VROW; one-segment TurboQuant values of at
    // most 50 bytes a row), float scores, the value scales in the weights, 128-thread workgroups.
    std::vector<std::vector<float>> vrow;
    if (kv::turboquant_bits(c.v)) {
      ::setenv("STRATA_VK_QDEC_LANES", "0", 1);
      ::setenv("STRATA_VK_QDEC_VROW", "1", 1);
      ::setenv("STRATA_VK_QDEC_IDOT", "0", 1);
      gpu::backend be(profiled);
      for (const char* v : {"STRATA_VK_QDEC_LANES", "STRATA_VK_QDEC_VROW", "STRATA_VK_QDEC_IDOT"}) ::unsetenv(v);
      vrow = run_decode(be, c, t);
      const auto segs = hadamard::split_into_segments(c.D).count;
      const bool fits = segs == 1 && turboquant::format(c.D, kv::turboquant_bits(c.v)).row_bytes() <= 50;
      CHECK(vkt::ran_kernel(be, "attention_qdec", ".QDEC_VROW") == fits);
      CHECK_FALSE(vkt::ran_kernel(be, "attention_qdec", ".QDEC_VAHEAD"));
      if (!fits) vrow.clear();
    }
    {
      ::setenv("STRATA_VK_TQ_GQA", "0", 1);
      ::setenv("STRATA_VK_FUSE", "0", 1);
      gpu::backend be(profiled);
      per_head = run_decode(be, c, t);
      ::unsetenv("STRATA_VK_TQ_GQA");
      ::unsetenv("STRATA_VK_FUSE");
      CHECK_FALSE(vkt::ran_kernel(be, "attention_qdec"));
      CHECK(vkt::ran_kernel(be, "kv_store_q"));
    }
    ::unsetenv("STRATA_VK_FA");
    ::unsetenv("STRATA_VK_MMA_DEC");
    std::vector<std::vector<float>> tensor_cores;  // attention_mma(_dec) where the device has them (opt-in)
    {
      ::setenv("STRATA_VK_MMA_DEC", "1", 1);
      ::setenv("STRATA_VK_QDEC_IDOT", "0", 1);  // steps the tensor cores do not take run attention_qdec's float scores
      gpu::backend be(profiled);
      ::unsetenv("STRATA_VK_MMA_DEC");
      ::unsetenv("STRATA_VK_QDEC_IDOT");
      if (be.tensor_core_attention(16, c.D, c.k, c.v)) {
        tensor_cores = run_decode(be, c, t);
        MESSAGE(std::string(c.name) << ": attention_mma_dec " << std::string(vkt::ran_kernel(be, "attention_mma_dec") ? "ran" : "did not run"));
      }
    }
    {
      vkt::cpu_backend be;
      cpu = run_decode(be, c, t);
    }
    for (std::size_t s = 0; s < grouped.size(); ++s) {
      CAPTURE(s);
      const double e_cpu = test::nmse(grouped[s], cpu[s]), e_old = test::nmse(grouped[s], per_head[s]);
      MESSAGE(std::string(c.name) << ", step " << s << " (" << grouped[s].size() / (c.H * c.D) << " tokens)" << ": NMSE vs CPU " << e_cpu << ", vs per-head kernel " << e_old);
      CHECK(e_cpu <= vkt::tol_attention_compressed);
      CHECK(test::nmse(per_head[s], cpu[s]) <= vkt::tol_attention_compressed);
      // With head ops the fused and unfused norms sum in different orders: a code at a cell
      // boundary may differ, so only the compressed-attention tolerance holds.
      CHECK(e_old <= (c.head_ops ? vkt::tol_attention_compressed : tol_grouped_vs_per_head));
      const double e_lanes = test::nmse(lanes[s], grouped[s]);  // the same codes, sums in another order
      MESSAGE("  LANES form: NMSE vs the thread-a-key form " << e_lanes);
      CHECK(e_lanes <= tol_grouped_vs_per_head);
      if (!lanes_lab.empty()) {  // the same codes, keys taken in smaller chunks
        const double e_lab = test::nmse(lanes_lab[s], lanes[s]);
        MESSAGE("  LANES form, one-key chunks and chunk slots: NMSE vs the default LANES form " << e_lab);
        CHECK(e_lab <= tol_grouped_vs_per_head);
      }
      for (const bool lanes_form : {false, true}) {
        if (ring_split[lanes_form].empty()) continue;
        // The ring's keys summed in a split of their own: the same values, merged in another order.
        const double e_ring = test::nmse(ring_split[lanes_form][s], lanes_form ? lanes[s] : grouped[s]);
        MESSAGE("  window split" << std::string(lanes_form ? " (LANES)" : "") << ": NMSE vs the one-split form " << e_ring);
        CHECK(e_ring <= tol_grouped_vs_per_head);
      }
      if (!idot.empty()) {
        const double e_idot = test::nmse(idot[s], cpu[s]);
        MESSAGE("  int8 key scores: NMSE vs CPU " << e_idot);
        CHECK(e_idot <= vkt::tol_attention_compressed_idot);
        if (!idot_lanes.empty()) {  // the same roundings, sums (and the window's split) in another order
          const double e_il = test::nmse(idot_lanes[s], idot[s]);
          MESSAGE("  int8 key scores, LANES form: NMSE vs the thread-a-key form " << e_il);
          CHECK(e_il <= tol_grouped_vs_per_head);
        }
      }
      if (!wg64.empty()) {  // the same codes and float scores, merged in another order
        const double e_64 = test::nmse(wg64[s], grouped[s]);
        MESSAGE("  64-key tiles and splits: NMSE vs the thread-a-key form " << e_64 << ", vs CPU " << test::nmse(wg64[s], cpu[s]));
        CHECK(e_64 <= tol_grouped_vs_per_head);
        CHECK(test::nmse(wg64[s], cpu[s]) <= vkt::tol_attention_compressed);
      }
      if (!wg256.empty()) {  // the same codes and float scores, merged in another order
        const double e_256 = test::nmse(wg256[s], grouped[s]);
        MESSAGE("  256-thread workgroups: NMSE vs the thread-a-key form " << e_256 << ", vs CPU " << test::nmse(wg256[s], cpu[s]));
        CHECK(e_256 <= tol_grouped_vs_per_head);
        CHECK(test::nmse(wg256[s], cpu[s]) <= vkt::tol_attention_compressed);
      }
      if (!vrow.empty()) {  // the same codes and float scores, the values' scales in the weights
        const double e_vrow = test::nmse(vrow[s], grouped[s]);
        MESSAGE("  value rows staged: NMSE vs the thread-a-key form " << e_vrow << ", vs CPU " << test::nmse(vrow[s], cpu[s]));
        CHECK(e_vrow <= tol_grouped_vs_per_head);
        CHECK(test::nmse(vrow[s], cpu[s]) <= vkt::tol_attention_compressed);
      }
      if (!tensor_cores.empty()) {
        const double e_tc = test::nmse(tensor_cores[s], cpu[s]);
        MESSAGE("  tensor cores: NMSE vs CPU " << e_tc);
        CHECK(e_tc <= vkt::tol_attention_compressed_f16);
      }
    }
  }
  return lanes_ran;
}

// Few cases, each covering several features: every case compiles its own pipelines, and
// lavapipe's LLVM compile of them dominates the test's cost in a clean CI run. Two test cases,
// so that CTest runs them side by side and the sanitizer pass (.ci/run) can take the first: the
// TurboQuant cache with and without head ops, window and split.
TEST_CASE("vulkan ops: grouped compressed-KV decode attention vs the per-head kernel and the CPU: tq3, window, split and unsplit") {
  if (!vkt::available()) return;
  using kv::kv_type;
  const decode_case cases[] = {
      {"tq3, GQA 16/4, D 128, window 0, split, head ops", 16, 4, 128, 0, 0, 2048, kv_type::tq3, kv_type::tq3, true},
      {"tq3, GQA 16/2, D 128, window 200, split", 16, 2, 128, 200, 0, 2048, kv_type::tq3, kv_type::tq3, false},
      {"tq3, GQA 8/2, D 96, window 16, unsplit, head ops", 8, 2, 96, 16, 0, 256, kv_type::tq3, kv_type::tq3, true},
  };
  CHECK(check_grouped_decode(cases));  // groups of 4 and 8: LANES on any subgroup of 4 or more
}

TEST_CASE("vulkan ops: grouped compressed-KV decode attention vs the per-head kernel and the CPU: mixed sides, MHA, chunked") {
  if (!vkt::available()) return;
  using kv::kv_type;
  const decode_case cases[] = {
      {"K q8_0 + V tq3, GQA 6/2, D 128, window 16, split, head ops", 6, 2, 128, 16, 0, 2048, kv_type::q8_0,
       kv_type::tq3, true},
      // (tq2 keys: the int8 scores' 2-bit table; tq4 keys are kv_compressed_test's.)
      {"tq2, MHA 2/2, D 64, window 0, chunk 96, split", 2, 2, 64, 0, 96, 2048, kv_type::tq2, kv_type::tq2,
       false},
      {"K f16 + V tq4, GQA 12/2, D 64, window 16, split", 12, 2, 64, 16, 0, 2048, kv_type::f16, kv_type::tq4, false},
  };
  check_grouped_decode(cases);
}

#endif

}  // namespace
