// Which pipeline variant (shader, format, defines, bindings) each recorded op uses, and the
// workgroup shapes measured for them.
#include "backend_impl.hpp"
#include "mul_mm_small_shape.hpp"
#include "quant_layout.hpp"

#include <string>

#include "strata/kv/kv_config.hpp"
#include "strata/hadamard/blocked.hpp"
#include "strata/turboquant/block.hpp"
#include "strata/turboquant/format.hpp"

namespace strata::gpu {
namespace {

std::uint32_t kv_kind(kv::kv_type t) {
  return t == kv::kv_type::f32 ? 0 : t == kv::kv_type::f16 ? 1 : t == kv::kv_type::q8_0 ? 2 : 3;
}

}  // namespace

using namespace detail;

kernel_variants::mmvq_shape_t kernel_variants::mmvq_shape(gguf::type_id t, std::uint64_t n_rows) const {
  if (mmvq_shape_forced) return {mmvq_wg, mmvq_rpg, mmvq_u};
  const bool tall = n_rows >= 4096;
  if (t == gguf::type_id::q8_0) return {128, 1, 2};
  if (t == gguf::type_id::q6_k) return tall ? mmvq_shape_t{64, 4, 1} : mmvq_shape_t{64, 2, 2};
  // Q4_0's unit is one 18-byte block (five 4-byte loads, 5 registers): 4 units in flight a row
  // keep about Q4_K's bytes in flight (tall 144 a lane against 192, else 72 against 96) at 40 /
  // 20 registers; RPG 2 on tall matrices for NORM_OUT (norm_out_fits). Not yet measured on a GPU.
  if (t == gguf::type_id::q4_0) return tall ? mmvq_shape_t{64, 2, 4} : mmvq_shape_t{128, 1, 4};
  // Q4_K's shapes; Q5_K's unit (four 16-byte loads, 16 registers against Q4_K's 12) keeps them:
  // 4 units in flight a lane on tall matrices (64 registers of weights, Q6_K's 60 at 64:4:1), and
  // RPG 2 there so NORM_OUT's 32-row workgroups fit (norm_out_fits). IQ4_XS's (five 8-byte loads,
  // 10 registers, 40 bytes) too. Not yet measured on a GPU.
  return tall ? mmvq_shape_t{64, 2, 2} : mmvq_shape_t{128, 1, 2};
}

pipeline_request backend::impl::mmvq_req(gguf::type_id t, std::uint32_t nt, std::uint64_t n_cols, std::uint64_t n_rows, bool swiglu, bool residual,
                                         bool ids, bool qout, bool grouped, bool tail, bool norm_out,
                                         std::uint32_t rms_in_k) const {
  const bool mt = uses_mmvq_mt(t, nt);
  auto [wgs, rpg, u] = qout ? (mt ? mmvq_mt_qout : qout_shape(t, n_rows))  // QUANT_OUT: 32 rows a workgroup
                            : (mt ? (n_rows >= 4096 || mmvq_mt_shape_forced ? mmvq_mt_shape : mmvq_shape_t{64, 2, 1})
                                  : mmvq_shape(t, n_rows));
  // Dense Q8_0 matvecs (Q/K/V, O and down with NORM_OUT, the output): 1,024 threads of one row and
  // one block a lane group, in one-token steps. H100, qwen3-8b Q8_0 tg128, 1024:1:1 against 128:1:2 (five pairs in
  // three processes): 253.50 / 257.77 / 259.78 / 256.81 / 260.21 against 245.14 / 247.24 / 255.96 /
  // 252.77 / 257.49 t/s (bench/RESULTS.md session 62). Experts keep theirs (not measured).
  if (t == gguf::type_id::q8_0 && nt == 1 && !ids && !qout && !mmvq_shape_forced) wgs = 1024, rpg = 1, u = 1;
  if (norm_out && !qout && t == gguf::type_id::q6_k) rpg = 2, u = 2;  // as Q4_K: 512 threads (norm_out_fits)
  if (norm_out && !qout && mmvq_nout_forced) rpg = mmvq_nout.rpg, u = mmvq_nout.u;  // (WG follows: 32 rows)
  if (norm_out && !qout) wgs = 32 * (32 / rpg);  // 32 rows a workgroup too (norm_out_fits: rpg 2, 512 threads)
  std::vector<std::pair<std::string, std::string>> d{{"MMVQ", "1"}, {"NEED_DOT4", "1"}, {"WG", std::to_string(wgs)},
                                                     {"LPR", "32"}, {"RPG", std::to_string(rpg)},
                                                     {"U", std::to_string(u)}, {"NT", std::to_string(nt)}};
  if (ctx.info().int_dot) d.emplace_back("HAS_DOT4", "1");
  if (ctx.info().subgroup_size == 32) d.emplace_back("SG_LPR", "1");
  if (swiglu) d.emplace_back("SWIGLU", "1");
  if (residual) d.emplace_back("ADD_RESIDUAL", "1");
  if (ids) d.emplace_back("MOE_IDS", "1");
  if (ids && grouped) d.emplace_back("MOE_GROUPED", "1");
  if (qout) d.emplace_back("QUANT_OUT", "1");
  if (tail) d.emplace_back("NORM_TAIL", "8");  // bindings 8-13 after the kernel's own
  if (norm_out) d.emplace_back("NORM_OUT", "1");  // bindings 8 (norm weight), 9 (sums of y^2)
  if (rms_in_k) d.emplace_back("RMS_IN", std::to_string(rms_in_k));  // binding 10 (sums of x^2)
  if (mmvq_unroll) d.emplace_back("UR", "1");
  if (nt > 1 && !mt) d.emplace_back("MT_OFF", "1");
  if (has_row_groups(t)) d.emplace_back("W_GROUPED", grouped_rows(t, n_cols) ? "1" : "0");  // common.glsl
  return req("mmvq", t, std::move(d), tail ? 14 : rms_in_k ? 11 : norm_out ? 10 : 8);
}

backend::impl::mmvq_shape_t backend::impl::qout_shape(gguf::type_id t, std::uint64_t n_rows) const {
  if (mmvq_qout_forced) return mmvq_qout;
  // Q8_0's unit is a whole 32-code block a row (9 registers): at 4 rows a lane group its loads
  // outrun what 256 threads keep in flight. H100, qwen3-8b Q8_0 tg128: 252.6 / 250.9 t/s with
  // 256:4:1, 261.4 with 512:2:1, 257.2 with 1024:1:2 (bench/RESULTS.md session 61).
  if (t == gguf::type_id::q8_0) return {512, 2, 1};
  const std::uint64_t sms = ctx.info().sm_count;
  if (!sms || div_up(n_rows, 32) <= qout_wave_per_sm * sms) return mmvq_qout;
  return {512, 2, 1};
}

bool kernel_variants::norm_out_fits(gguf::type_id t, std::uint64_t n_rows) const {
  // NORM_OUT's workgroup owns 32 rows. Formats tuned to 2 rows per lane group keep their per-warp
  // work at 512 threads. Q6_K (as 2 rows per group, 512 threads; 4 rows at 256 had run 29% slower
  // on the H100 in ggml's blocks) and Q8_0 (1 row, 1,024 threads) fuse since their rows are read in
  // 16-byte groups: qwen3-8b tg128 on the H200 Q8_0 272 -> 295 t/s, Q4_K_M 312 -> 329 (session 12).
  return mmvq_shape(t, n_rows).rpg == 2 || t == gguf::type_id::q6_k || t == gguf::type_id::q8_0 || mmvq_nout_forced;
}

std::uint32_t kernel_variants::mmvq_rows_per_wg(const pipeline_request& r) const {
  std::uint32_t wgs = 0, rpg = 0, lpr = 32;
  for (const auto& [k, v] : r.defines) {
    if (k == "WG") wgs = std::uint32_t(std::stoul(v));
    if (k == "RPG") rpg = std::uint32_t(std::stoul(v));
    if (k == "LPR") lpr = std::uint32_t(std::stoul(v));
  }
  return wgs / lpr * rpg;
}

void kernel_variants::set_mmvq_shape(pipeline_request& r, const mmvq_shape_t& s) {
  for (auto& [k, v] : r.defines) {
    if (k == "WG") v = std::to_string(s.wg);
    if (k == "RPG") v = std::to_string(s.rpg);
    if (k == "U") v = std::to_string(s.u);
  }
}

bool kernel_variants::use_mmvq(const weight& w, std::uint32_t n) const {
  return n < mmvq_max_tokens && has_int8_unit(w.type, w.ne[0]);  // as int8_activations()
}

bool backend::impl::small_matmul(std::uint64_t K, std::uint32_t n) const {
  return coopmat && mms && mm_xh && n >= mms_min && n <= mms_max && K % 64 == 0 && K <= mm_xh_cols && n <= max_rows;
}

bool backend::impl::small_experts(std::uint32_t pairs, std::uint32_t n_expert, std::uint64_t K, std::uint64_t F) const {
  const auto fits = [&](std::uint64_t k) { return k % 64 == 0 && k <= moe_xh_cols; };
  return moe_xh && moe_groups && grouped_experts(pairs, n_expert) && pairs <= max_q8_rows && fits(K) && fits(F);
}

pipeline_request backend::impl::mm_small_req(gguf::type_id t, std::uint32_t tokens, bool grouped, bool scatter) const {
  // Without XS: 8 warps split K where the partial sums fit shared memory (up to 32 tokens; H100
  // lab at 16 tokens: 15-25% faster than 4), else 4; grouped experts keep 4 (many small
  // workgroups: qwen3-30b-a3b pp512 4,912 with 8 vs 5,457 with 4).
  const std::uint32_t tt = mm_small_tokens(tokens) / 16;
  const bool n8 = mms_n8 && mms_xs && ctx.info().nv_coopmat_n8 && !grouped && tokens <= 8;
  std::uint32_t warps = tt <= 2 && !grouped ? 8 : 4;
  // XS: as many warps as 48 KiB holds (mm_small_xs_warps: 7 at 16 tokens, 5 at 32, 4 at 48, 3 at
  // 64). At 32 tokens
  // Q4_K runs faster on 4 (H200 lab: 4096 x 4096 22.6 vs 24.0 us, 12288 x 4096 57.8 vs 62.7),
  // Q6_K on 5 (35.2 vs 43.2, 99.3 vs 120.7).
  if (mms_xs) {
    warps = std::min(warps, mm_small_xs_warps(tt, n8));
    if (tt == 2 && t == gguf::type_id::q4_k) warps = std::min<std::uint32_t>(warps, 4);
  }
  std::vector<std::pair<std::string, std::string>> d{{"WG", std::to_string(32 * warps)},
                                                     {"COOPMAT", "1"},
                                                     {"MM_SMALL", "1"},
                                                     {"TT", std::to_string(tt)},
                                                     {"WARPS", std::to_string(warps)}};
  if (grouped) d.emplace_back("MOE_GROUPED", "1");
  if (scatter) d.emplace_back("SCATTER", "1");
  if (mms_xs) d.emplace_back("XS", "1");
  if (n8) d.emplace_back("N8", "1");
  if ((mms_h2 & 2) && t == gguf::type_id::q4_k) d.emplace_back("MMS_H2", "1");
  return req("mul_mm_small", t, std::move(d), grouped ? 4 : 3);
}

pipeline_request kernel_variants::mm_reg_req(gguf::type_id t, std::uint32_t tokens, std::uint64_t n_rows, bool residual,
                                           bool swiglu) const {
  const std::uint32_t nt8 = mm_reg_tiles(tokens);
  // Warps split K: 16 where the rows give few workgroups (H200 lab at 8 tokens, Q4_K 12288 x 4096:
  // 29.1 us with 8, 23.0 with 16; 4096 x 1024 22.2 / 18.0), 8 on wide matrices (4096 x 12288: 19.6
  // / 24.7). What 48 KiB holds caps them (mul_mm_reg.glsl): 16 warps' partial sums of 64 tokens
  // need 64 KiB even folded; B tiles through shared memory take 1,152 bytes a warp per 8 tokens.
  const bool b_regs = !mmr_layout->b_ks.empty();
  const std::uint32_t want = mmr_warps ? mmr_warps : n_rows >= 8192 ? 8 : 16;
  const std::uint32_t warps = std::min<std::uint32_t>(want, b_regs ? (nt8 == 8 ? 8 : 16) : 32 / nt8);
  std::vector<std::pair<std::string, std::string>> d{{"WG", std::to_string(32 * warps)}, {"COOPMAT", "1"},
                                                     {"MM_REG", "1"},  {"NT8", std::to_string(nt8)},
                                                     {"WARPS", std::to_string(warps)}, {"MMA_AR", mmr_layout->a_rows},
                                                     {"MMA_AC", mmr_layout->a_cols}};
  if (b_regs) d.emplace_back("MMA_BK", mmr_layout->b_ks);
  // Q4_K's 64-token form loads each step's activations just before staging them (H200 lab, 64
  // tokens: 4096 x 12288 84.2 -> 77.5 us, 12288 x 4096 80.3 -> 75.2; at 8-32 tokens and for
  // Q6_K no better or worse).
  const bool xa = mmr_xa >= 0 ? mmr_xa == 1 : !(t == gguf::type_id::q4_k && nt8 == 8);
  if (!b_regs && !xa) d.emplace_back("XA", "0");
  if (residual) d.emplace_back("RESIDUAL", "1");
  if (swiglu) d.emplace_back("SWIGLU", "1");
  return req("mul_mm_reg", t, std::move(d), residual || swiglu ? 4 : 3);
}

pipeline_request kernel_variants::quantize_req(bool norm) const {
  std::vector<std::pair<std::string, std::string>> d{{"WG", "128"}};
  if (norm) d.emplace_back("NORM", "1");
  return req("quantize_q8", {}, std::move(d), 4);
}

mma2_tile kernel_variants::mma2_tile_for(std::uint64_t n_rows, std::uint32_t tokens) const {
  if (mma2_forced) return mma2_shape;
  for (const mma2_tile t : {mma2_tile{128, 128, 64, 32}, mma2_tile{128, 64, 64, 32}, mma2_tile{64, 64, 32, 32}})
    if (std::uint64_t(div_up(n_rows, t.bm)) * div_up(tokens, t.bn) >= 256) return t;
  return {64, 64, 32, 32};
}

pipeline_request kernel_variants::mma2_req(gguf::type_id t, const mma2_tile& s) const {
  return req("mul_mm", t,
             {{"WG", std::to_string(s.bm / s.wm * (s.bn / s.wn) * 32)}, {"COOPMAT", "1"}, {"MMA2", "1"},
              {"BM", std::to_string(s.bm)}, {"BN", std::to_string(s.bn)}, {"WM", std::to_string(s.wm)},
              {"WN", std::to_string(s.wn)}},
             3);
}

pipeline_request kernel_variants::mul_mm_req(gguf::type_id t) const {
  if (coopmat && f16_operands_ok(t)) return req("mul_mm", t, {{"WG", "128"}, {"COOPMAT", "1"}}, 3);
  return req("mul_mm", t, {{"WG", "128"}}, 3);
}

mma2_tile kernel_variants::mm3_tile_for(std::uint32_t tokens) const {
  if (mm3_forced) return mm3_shape;
  // 33-63 tokens take one partly empty 64-token tile: H200 lab, Q4_K at 48 tokens with 4 splits,
  // 4096 x 4096 40 us against 71 with two 32-token tiles.
  for (const mma2_tile t : mm3_tiles)
    if (tokens >= t.bn || (t.bn == 64 && tokens > 32)) return t;
  return mm3_tiles[std::size(mm3_tiles) - 1];
}

pipeline_request kernel_variants::mm3_req(const mma2_tile& s, bool xf16, gguf::type_id qw, bool split, bool swiglu) const {
  const bool in_place = qw != gguf::type_id::f16;
  const std::uint32_t wg = s.bm / s.wm * (s.bn / s.wn) * 32;
  std::vector<std::pair<std::string, std::string>> d{
      {"WG", std::to_string(wg)}, {"COOPMAT", "1"}, {"BM", std::to_string(s.bm)},
      {"BN", std::to_string(s.bn)}, {"WM", std::to_string(s.wm)}, {"WN", std::to_string(s.wn)},
      {"BK", "32"}};
  if (xf16) d.emplace_back("X_F16", "1");
  if (in_place) {
    d.emplace_back("QW", "1");
    d.emplace_back("MM_SMALL", "1");
    if ((mmq2 >= 2 || (mmq2 == 1 && s.bm <= 64)) && 2 * s.bm <= wg) d.emplace_back("QW2", "1");
  }
  if (split) d.emplace_back("SPLIT_K", "1");
  if (mma_n8) d.emplace_back("MMA_N", "8");
  if ((mms_h2 & 1) && qw == gguf::type_id::q4_k) d.emplace_back("MMS_H2", "1");
  if (swiglu) d.emplace_back("SWIGLU", "1");
  return req("mul_mm_f16", qw, std::move(d), swiglu ? 4 : 3);
}

pipeline_request kernel_variants::matvec_req(gguf::type_id t, std::uint32_t nt, bool ids, std::uint64_t n_rows) const {
  std::vector<std::pair<std::string, std::string>> d{
      {"NR", std::to_string(rows_for(n_rows))}, {"NT", std::to_string(nt)}, {"WG", std::to_string(mv_wg)}};
  if (ids) d.emplace_back("MOE_IDS", "1");
  return req("matvec", t, std::move(d), ids ? 4 : 3);
}

pipeline_request kernel_variants::copy_req(bool indexed, bool add) {
  if (add) return req("copy_rows", {}, {{"ADD", "1"}}, 3);  // dst += src (not with INDEXED)
  return indexed ? req("copy_rows", {}, {{"INDEXED", "1"}}, 4) : req("copy_rows", {}, {}, 3);
}

pipeline_request kernel_variants::norm_req(bool weighted, bool f16_out) {
  // 512 threads a row: a 4,096-wide row is one batch of eight loads a thread per pass, one memory
  // latency each, where 128 threads waited out four (H200, 8-row steps: 17 us a call).
  if (f16_out) return req("rms_norm", {}, {{"WG", "512"}, {"HAS_NORM_WEIGHT", "1"}, {"F16_OUT", "1"}}, 5);
  if (weighted) return req("rms_norm", {}, {{"WG", "512"}, {"HAS_NORM_WEIGHT", "1"}}, 4);
  return req("rms_norm", {}, {{"WG", "512"}}, 3);
}

std::uint32_t backend::impl::topk_lean_slots(std::uint32_t n_expert, std::uint32_t k) const {
  const std::uint32_t s = ctx.info().subgroup_size;
  return topk_lean && n_expert && n_expert <= 256 && k <= s ? div_up(n_expert, s) : 0;
}

pipeline_request kernel_variants::moe_req(const char* stage, bool sigmoid, std::uint32_t topk_lean) {
  std::vector<std::pair<std::string, std::string>> d{{stage, "1"}};
  if (sigmoid) d.emplace_back("ROUTER_SIGMOID", "1");
  // MOE_TOPK's weights as the gate/up prologue's (tuning.hpp topk_lean)
  if (topk_lean) d.emplace_back("TOPK_LEAN", std::to_string(topk_lean));
  return req("moe", {}, std::move(d), 6);  // binding 5: COMBINE RESIDUAL
}

std::vector<std::pair<std::string, std::string>> kernel_variants::kv_defs(const kv::kv_config& c) {
  std::vector<std::pair<std::string, std::string>> d;
  if (c.type_k == kv::kv_type::f32) d.emplace_back("KV_K_F32", "1");
  if (c.type_v == kv::kv_type::f32) d.emplace_back("KV_V_F32", "1");
  return d;
}

std::uint32_t backend::impl::add_dec_lanes(std::vector<std::pair<std::string, std::string>>& d, std::uint32_t head_dim,
                                  std::uint32_t group, std::uint32_t chunk_keys, std::uint32_t fixed_bytes, std::uint32_t thread_bytes,
                                  std::uint32_t stream_floats) const {
  if (!dec_lanes || group == 0) return 0;
  // LPK lanes a key row (a power of two within a subgroup), a multiple of the group so the
  // halving exchanges end with a (key, head) pair a lane, at most 8 keys a chunk (registers).
  const std::uint32_t lpk = std::min({dec_lanes_lpk, head_dim / 4, ctx.info().subgroup_size});
  if (lpk < 4 || (lpk & (lpk - 1)) || lpk % group || lpk / group > 8 || head_dim % (4 * lpk)) return 0;
  // The widest workgroup up to dec_lanes_wg whose streams' sums fit shared memory.
  std::uint32_t wg = std::min(dec_lanes_wg, ctx.info().max_workgroup_threads);
  const auto shared = [&](std::uint32_t w) {
    return std::uint64_t(w / lpk) * (group * head_dim + lpk + 3 * group + stream_floats) * 4 + fixed_bytes + std::uint64_t(w) * thread_bytes;
  };
  while (wg > 32 && shared(wg) > ctx.info().max_shared_bytes) wg /= 2;
  if (wg % ctx.info().subgroup_size || wg < lpk || shared(wg) > ctx.info().max_shared_bytes) return 0;
  d.emplace_back("WG", std::to_string(wg));
  d.emplace_back("LANES", "1");
  d.emplace_back("LPK", std::to_string(lpk));
  if (chunk_keys && chunk_keys < lpk / group) d.emplace_back("CHUNK_KEYS", std::to_string(chunk_keys));
  if (chunk_slots) d.emplace_back("CHUNK_SLOTS", "1");
  return lpk;
}

namespace {
// attention_qdec's QDEC_IDOT form takes TurboQuant keys of 2 or 3 bits (a low-plane byte, and a
// high-plane nibble, hold four dims' codes) whose segments are whole 32-dim query blocks (segments are
// powers of two in decreasing order, so all of them are when head_dim is a multiple of 32).
bool idot_keys(const kv::kv_config& c) {
  const auto bits = kv::turboquant_bits(c.type_k);
  return (bits == 2 || bits == 3) && c.head_dim % 32 == 0;
}
// TurboQuant segments of a head vector (kv_config has checked head_dim when the cache was made).
std::uint32_t tq_segments(const kv::kv_config& c) { return hadamard::split_into_segments(c.head_dim).count; }
// attention_qdec's QDEC_VFOLD form takes TurboQuant values of one segment (one scale a row).
bool one_segment_values(const kv::kv_config& c) { return kv::turboquant_bits(c.type_v) && tq_segments(c) == 1; }
// attention_qdec_keys.glsl's QDEC_VROW stages value rows of at most four 16-byte words from an even byte.
bool staged_value_rows(const kv::kv_config& c) {
  const auto bits = kv::turboquant_bits(c.type_v);
  return bits && (turboquant::format(c.head_dim, bits).row_bytes() + 14 + 15) / 16 <= 4;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> backend::impl::qdec_defs(const kv_state& kv, std::uint32_t head_dim,
                                                                           std::uint32_t group, std::uint32_t rows, bool split,
                                                                           bool ring_split, bool merge_tail, bool rot_later,
                                                                           std::uint32_t qrot_at) const {
  auto d = kvq_defs(kv);
  d.emplace_back("GQA_G", std::to_string(group));
  d.emplace_back("TQ_ROT_N", std::to_string(group));
  if (!qdec_skip.empty()) d.emplace_back("QDEC_SKIP", qdec_skip);  // lab: wrong results
  if (split) d.emplace_back("SPLIT", "1");
  if (ring_split) d.emplace_back("RING_SPLIT", "1");
  const auto& c = kv.config();
  std::uint32_t lpk = 0;  // lanes a key row where the LANES form is taken
  if (!qdec_lanes_over(c.n_ctx, rows)) {
    if (qdec_kif != 8) d.emplace_back("QDEC_KIF", std::to_string(qdec_kif));
    const std::uint32_t wg = qdec_keys_wg(c, group, head_dim, rows);
    if (wg != 128)  // (QDEC_WG only names it in the pipeline's label, which leaves WG out)
      d.insert(d.end(), {{"WG", std::to_string(wg)}, {"QDEC_WG", std::to_string(wg)}});
  } else {  // shared memory beside the streams' sums: rot, centroids, the merge tail and the merge's maxima;
             // tq_xch a thread; the merge's two weights a (stream, head)
    const bool tq = kv::turboquant_bits(c.type_k) || kv::turboquant_bits(c.type_v);
    const std::uint32_t idot_tables =  // kc8 and kstep: 2 KB and a float a segment (an upper bound: LANES may leave them out)
        (qdec_idot && idot_keys(c) ? 2052 * tq_segments(c) : 0) +
        (qdec_vfold && one_segment_values(c) ? 2048 : 0);  // and QDEC_VFOLD's centroid pairs
    lpk = add_dec_lanes(d, head_dim, group, qdec_chunk_keys,
                        group * head_dim * 4 + 2048 + (merge_tail ? 8 * 1024 + 64 : 0) + group * 4 + idot_tables, tq ? 16 : 0, 2 * group);
    if (lpk && qdec_one_pass && (!kv.window_ring().rows || ring_split)) d.emplace_back("LANES_ONE_PASS", "1");
  }
  if (lpk == 0) {  // the thread-a-key form (also where the LANES form does not fit)
    if (qdec_kvec && kv_kind(c.type_k) >= 2) d.emplace_back("QDEC_KVEC", "1");
    if (qdec_blk_ahead) d.emplace_back("QDEC_BLK_AHEAD", "1");
    if (qdec_warp) d.emplace_back("QDEC_WARP", "1");
    if (staged_values(c)) d.emplace_back("QDEC_VROW", "1");
    else if (qdec_warp && qdec_vahead && qdec_vfold && one_segment_values(c)) d.emplace_back("QDEC_VAHEAD", "1");
  }
  // Either form; LANES where a lane's dims lie in one 32-dim query block (its lanes share the block's maximum).
  if (qdec_idot && idot_keys(kv.config()) && (lpk == 0 || 32 % (head_dim / lpk) == 0)) {
    d.emplace_back("QDEC_IDOT", "1");
    d.emplace_back("NEED_DOT4", "1");
    if (ctx.info().int_dot) d.emplace_back("HAS_DOT4", "1");
  }
  if (qdec_vfold && one_segment_values(kv.config())) d.emplace_back("QDEC_VFOLD", "1");
  if (merge_tail) d.emplace_back("SPLIT_COMBINE", "11");
  if (rot_later) d.emplace_back("ROT_LATER", "1");  // attention.glsl's COMBINE rotates the values back
  if (qrot_at) d.emplace_back("QROT_IN", std::to_string(qrot_at));  // attn_prep rotated the queries (Q_ROT)
  return d;
}

bool backend::impl::staged_values(const kv::kv_config& c) const {
  return qdec_vrow && qdec_warp && qdec_vfold && one_segment_values(c) && staged_value_rows(c);
}

std::uint32_t backend::impl::qdec_keys_shared(const kv::kv_config& c, std::uint32_t group, std::uint32_t head_dim, bool plain_queries,
                                              bool merge_tail, std::uint32_t wg) const {
  // attention_qdec_keys.glsl's shared arrays at a workgroup of wg threads, an upper bound (some are left out by its
  // defines): the queries (rotated, plain, int8 and their steps), the rotation buffer, the tile's weights, slots, ring
  // rows and reductions (a float a subgroup of at least 4), the exchange buffer, the centroids and int8 / pair tables.
  const std::uint32_t segs = tq_segments(c), gv = (group + 3) / 4;
  return (1 + plain_queries) * group * head_dim * 4 + group * head_dim + group * (head_dim / 32) * 4 + group * head_dim * 4 +
         wg * gv * 16 + wg * 8 + group * wg + wg * 16 + 2 * segs * 16 * 4 + 2052 * segs + 2048 + (merge_tail ? 8 * 1024 + 64 : 0) +
         wg / 32 * group * 8 +  // QDEC_WARP's units' states
         (staged_values(c) ? wg * 64 : 0);  // and QDEC_VROW's value rows
}

std::uint32_t backend::impl::qdec_keys_wg(const kv::kv_config& c, std::uint32_t group, std::uint32_t head_dim, std::uint32_t rows) const {
  // (The shared arrays' bound with both optional ones, the plain queries and the merge's tail, so the split length
  // attention.cpp takes from it holds whichever the dispatch has.)
  // (Measured with TurboQuant keys and values in one-token steps; other caches and steps keep 128 unless asked.)
  const bool measured = rows == 1 && kv::turboquant_bits(c.type_k) && kv::turboquant_bits(c.type_v);
  if ((!measured && !qdec_wg_every_step) || qdec_wg == 128 || qdec_wg > ctx.info().max_workgroup_threads) return 128;
  return qdec_keys_shared(c, group, head_dim, true, true, qdec_wg) <= ctx.info().max_shared_bytes ? qdec_wg : 128;
}

bool backend::impl::qdec_hoists(const kv_state& kv, std::uint32_t head_dim, std::uint32_t group, std::uint32_t rows) const {
  if (qdec_hoist != 1) return qdec_hoist == 2;
  // The thread-a-key form hoists in one-token steps over caches past qdec_lanes_ctx, where its splits are longest.
  if (!qdec_lanes_over(kv.config().n_ctx, rows)) return rows == 1 && kv.config().n_ctx > qdec_lanes_ctx;
  const auto d = qdec_defs(kv, head_dim, group, rows, true, false, false, false, 0);  // the form the request takes
  return std::any_of(d.begin(), d.end(), [](const auto& e) { return e.first == "LANES"; });
}

std::vector<std::pair<std::string, std::string>> kernel_variants::kvq_defs(const kv_state& kv) {
  const auto& c = kv.config();
  std::vector<std::pair<std::string, std::string>> d{{"KV_D", std::to_string(c.head_dim)},
                                                     {"KV_K_KIND", std::to_string(kv_kind(c.type_k))},
                                                     {"KV_V_KIND", std::to_string(kv_kind(c.type_v))}};
  if (const auto b = kv::turboquant_bits(c.type_k)) d.emplace_back("KV_K_TQ", std::to_string(b));
  if (const auto b = kv::turboquant_bits(c.type_v)) d.emplace_back("KV_V_TQ", std::to_string(b));
  if (kv.window_ring().rows) d.emplace_back("KV_RING", "1");
  return d;
}

std::vector<std::pair<std::string, std::string>> kernel_variants::kv_encode_defs(const kv_state& kv) {
  auto d = kvq_defs(kv);
  d.emplace_back("KV_ENCODE", "1");
  return d;
}

bool backend::int8_activations(gguf::type_id t, std::uint64_t K, std::uint32_t tokens) const {
  return (tokens < p_->mmvq_max_tokens && p_->has_int8_unit(t, K) && !p_->small_matmul(K, tokens)) ||
         p_->mmq_dense_ok(t, K, tokens);
}

bool backend::tensor_core_matmul(gguf::type_id t, std::uint64_t K, std::uint32_t tokens) const {
  return impl::f16_operands_ok(t) && !p_->mmq_dense_ok(t, K, tokens) &&
         (p_->small_matmul(K, tokens) || (p_->coopmat && p_->tiled_matmul(t, K, tokens)));
}

bool backend::fused_swiglu_gemm(gguf::type_id t, std::uint64_t K, std::uint64_t F, std::uint32_t tokens) const {
  return p_->mm3_swiglu_ok(t, K, F, tokens);
}

pipeline_request kernel_variants::narrow_req(gguf::type_id t) {
  return req("mul_mm", t, {{"WG", "128"}, {"NARROW", "1"}, {"SPLIT_K", "1"}}, 3);
}

// record_matmul's choice, for a plain matmul (no norm, no pair), of record_mul_mm_f16: directly
// (from mmk_small_min tokens where mul_mm_small would take it) or through record_mul_mm.
bool backend::impl::takes_f16_gemm(const weight& w, std::uint32_t n) const {
  if (fuse_step || takes_mm_reg(w, n) || use_narrow_gemm(w, n) || (w.ne[2] == 1 && mmq_dense_ok(w.type, w.ne[0], n)))
    return false;
  if (use_mm_small(w, n)) return mm_parts && n >= mmk_small_min && mm3 && mm3_in_place(w.type, w.ne[0], n);
  return tiled_matmul(w.type, w.ne[0], n) && coopmat && f16_operands_ok(w.type) && mm3 && w.ne[0] % 16 == 0 &&
         (mm_scratch || w.type == gguf::type_id::f16 || mm3_in_place(w.type, w.ne[0], n));
}

bool backend::impl::mm3_swiglu_ok(const weight& w, std::uint32_t n) const {
  return w.ne[2] == 1 && weights.at(w.id).stream < 0 && mm3_swiglu_ok(w.type, w.ne[0], w.ne[1], n);
}

bool backend::impl::mm3_swiglu_ok(gguf::type_id t, std::uint64_t K, std::uint64_t F, std::uint32_t n) const {
  if (!fuse || !mm_fuse || !mm_fuse_more || !coopmat || !mm3 || !mm_xh || !xh_swiglu_at || mma_n8) return false;
  // The path record_matmul gives the gate matmul alone: the f16 GEMM (record_mul_mm_f16), in place
  // or through the scratch, whose slot then takes parts of at least 64 rows of gate and up.
  if (n > xh_b_rows || n > max_rows || K % 64 || K > mm_xh_cols || F % 64 || F > mm_xh_cols || !f16_operands_ok(t) ||
      small_matmul(K, n) || !tiled_matmul(t, K, n) || mmq_dense_ok(t, K, n) ||
      !(mm3_in_place(t, K, n) || (mm_scratch && t != gguf::type_id::f16 && swiglu_part_rows(K, F) >= 64)))
    return false;
  // Fragment pairs of gate and up rows: 32-row warp tiles, K not split. Only the 128 x 128 tile
  // (128+ tokens), the one run on the H200; the 64-row tiles expand with two threads a row (QW2).
  const mma2_tile s = mm3_tile_for(n);
  return s.wm == 32 && s.bm == 128 && s.bn == 128 && k_splits(s, div_up(std::uint32_t(2 * F), s.bm) * div_up(n, s.bn), K) < 2;
}

bool backend::register_fragment_matmul(gguf::type_id t, std::uint64_t K, std::uint32_t tokens) const {
  return tensor_core_matmul(t, K, tokens) && p_->small_matmul(K, tokens) && p_->use_mm_reg(t, tokens);
}

bool backend::tensor_core_experts(std::uint32_t pairs, std::uint32_t n_expert, std::uint64_t K, std::uint64_t F) const {
  return p_->small_experts(pairs, n_expert, K, F);
}

bool backend::int8_tensor_core_experts(std::uint32_t pairs, std::uint32_t n_expert, std::uint64_t K, std::uint64_t F,
                                       gguf::type_id gate_up, gguf::type_id down) const {
  return p_->small_experts(pairs, n_expert, K, F) && pairs <= p_->max_q8_rows && p_->has_int8_unit(gate_up, K) &&
         p_->has_int8_unit(down, F) && p_->mmq_ok(gate_up, K) && p_->mmq_ok(down, F);
}

pipeline_request kernel_variants::flash_req(std::uint32_t head_dim, std::uint32_t tokens) const {
  const std::uint32_t warps = flash_warps(tokens);
  const std::uint32_t keys = fa_quad ? flash_keys(tokens) : 32;  // 64-key tiles need the softmax in registers
  std::vector<std::pair<std::string, std::string>> d{
      {"WG", std::to_string(32 * warps)}, {"COOPMAT", "1"}, {"HEAD_D", std::to_string(head_dim)}};
  if (fa_quad) d.emplace_back("MMA_QUAD", "1");
  if (warps != 4) d.emplace_back("FA_WARPS", std::to_string(warps));
  if (keys != 32) d.emplace_back("FA_KEYS", std::to_string(keys));
  if (fa_fast_mask && fa_quad) d.emplace_back("FA_FASTMASK", "1");
  return req("attention_mma", {}, std::move(d), 8);
}

bool backend::tensor_core_attention(std::uint32_t tokens, std::uint32_t head_dim, kv::kv_type k, kv::kv_type v) const {
  // f16, q8_0 and TurboQuant sides (attention_mma.glsl decodes codes to f16); f32 caches keep the
  // float kernels.
  const auto f16_operands = [](kv::kv_type t) { return t == kv::kv_type::f16 || kv::is_compressed(t); };
  return p_->coopmat && p_->flash_attention && tokens >= flash_min_tokens &&
         (head_dim == 64 || head_dim == 128) && f16_operands(k) && f16_operands(v);
}
}  // namespace strata::gpu
