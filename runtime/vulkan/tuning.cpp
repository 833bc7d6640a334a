// The tuning switches read from STRATA_VK_* environment variables (tuning.hpp).
//
// Every switch is strict: a value that is set but malformed stops the backend with an error naming
// the switch, the value and what it must be, never a silent default, clamp or prefix. One style:
// env_bool (exactly 0 or 1), env_uint (decimal digits in a range), choice (one of a list), and
// the shape parsers of read_env for the tile switches.
#include "tuning.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "strata/core/error.hpp"

namespace strata::gpu {
namespace {

// The switches' error: "NAME='value' must be <must>".
[[noreturn]] void refuse(const char* name, std::string_view value, const std::string& must) {
  throw error(std::string(name) + "='" + std::string(value) + "' must be " + must);
}

// A 0 / 1 switch (nullopt: not set); anything else is refused. `off` / `on`: what 0 and 1 mean.
std::optional<bool> env_bool(const char* name, const char* off = nullptr, const char* on = nullptr) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  if (const std::string_view s(v); s == "0" || s == "1") return s == "1";
  refuse(name, v, off && on ? "0 (" + std::string(off) + ") or 1 (" + on + ")" : std::string("0 or 1"));
}

// A 0 / 1 switch into `out`, left as it is when not set.
void flag(const char* name, bool& out) {
  if (const auto f = env_bool(name)) out = *f;
}

// An unsigned decimal switch from lo to hi (nullopt: not set): digits only (no sign, space or
// text after them), else refused with `must`, by default "an integer from lo to hi (note)".
std::optional<std::uint32_t> env_uint(const char* name, std::uint32_t lo, std::uint32_t hi, std::string_view note = {},
                                      std::string_view must = {}) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  const std::string_view s(v);
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec == std::errc() && end == s.data() + s.size() && n >= lo && n <= hi) return std::uint32_t(n);
  if (!must.empty()) refuse(name, s, std::string(must));
  refuse(name, s, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                      (note.empty() ? std::string() : " (" + std::string(note) + ")"));
}

// An integer switch from lo to hi into `out` (an unsigned or int member), left as it is when not set.
template <class T>
void count(const char* name, std::uint32_t lo, std::uint32_t hi, T& out, std::string_view note = {}) {
  if (const auto n = env_uint(name, lo, hi, note)) out = T(*n);
}

// A switch that is one of `allowed` into `out`, left as it is when not set; `why` ends the error.
void choice(const char* name, std::initializer_list<std::uint32_t> allowed, std::uint32_t& out, std::string_view why = {}) {
  const char* v = std::getenv(name);
  if (!v) return;
  std::string list;
  for (const std::uint32_t a : allowed) {
    if (std::string_view(v) == std::to_string(a)) {
      out = a;
      return;
    }
    list += (list.empty() ? "" : ", ") + std::to_string(a);
  }
  refuse(name, v, "one of " + list + (why.empty() ? std::string() : " (" + std::string(why) + ")"));
}

// The upper bound of counts that had none but atoi's int (token thresholds, a K limit).
constexpr std::uint32_t int_max = 0x7FFFFFFF;

}  // namespace

std::uint32_t backend_tuning::qdec_min_split(std::uint32_t n_ctx, std::uint32_t n_head_kv, std::uint32_t rows,
                                             std::uint32_t max_splits, std::uint32_t sms) const {
  if (!tq_wave_split || !sms || !qdec_lanes_over(n_ctx, rows) || !max_splits) return tq_split;
  for (std::uint32_t min = tq_wave_split; min <= std::max(tq_wave_split, tq_wave_max); min += 64) {
    const std::uint32_t len = split_length(n_ctx, max_splits, min);
    const std::uint64_t wgs = std::uint64_t(detail::div_up(n_ctx, len) + (max_splits < 128)) * n_head_kv * rows;
    if (wgs <= std::uint64_t(qdec_lanes_wgs_per_sm) * sms) return min;
  }
  return tq_split;
}

void backend_tuning::read_env() {
  flag("STRATA_VK_FUSE", fuse);
  if (const char* v = std::getenv("STRATA_VK_MM_FUSE")) {
    const std::string_view m(v);
    if (m != "0" && m != "1" && m != "2")
      refuse("STRATA_VK_MM_FUSE", m, "0 (off), 1 (norm / SwiGLU copies, residual) or 2 (all)");
    mm_fuse = m != "0";
    mm_fuse_more = m == "2";
  }
  if (const auto kb = env_uint("STRATA_VK_SWIGLU_PART_KB", 0, 1u << 30, {}, "a size in KiB up to 2^30 (0: one dispatch)"))
    swiglu_part_bytes = *kb == 0 ? ~0ull >> 1 : std::uint64_t(*kb) << 10;
  if (const auto g = env_uint("STRATA_VK_STEP_GRANULE", 1, 4096, {}, "a token count from 1 (steps not fitted) to 4096"))
    step_granule = *g;
  const auto labels = [](const char* s, std::vector<std::string>& out) {
    for (std::string_view v(s ? s : ""); !v.empty();) {
      const auto c = v.find(',');
      if (const auto item = v.substr(0, c); !item.empty()) out.emplace_back(item);
      v = c == v.npos ? std::string_view{} : v.substr(c + 1);
    }
  };
  labels(std::getenv("STRATA_VK_SKIP"), skip_kernels);
  labels(std::getenv("STRATA_VK_REPEAT"), repeat_kernels);
  count("STRATA_VK_PAD_LEVELS", 0, 64, pad_levels, "dispatches after each attn_prep");
  if (!skip_kernels.empty() || !repeat_kernels.empty() || std::getenv("STRATA_VK_QDEC_SKIP") || std::getenv("STRATA_VK_TOPK_LAB"))
    std::fprintf(stderr, "strata: STRATA_VK_SKIP/REPEAT/QDEC_SKIP/TOPK_LAB is set: kernels left out or run twice, results are wrong (timing runs only)\n");
  flag("STRATA_VK_STEP_BUCKETS", step_buckets);
  flag("STRATA_VK_LAB_NO_BARRIER", lab_no_barrier);
  labels(std::getenv("STRATA_VK_LAB_NO_BARRIER_BEFORE"), lab_no_barrier_before);
  if (!lab_no_barrier_before.empty())
    std::fprintf(stderr, "strata: STRATA_VK_LAB_NO_BARRIER_BEFORE is set: kernels overlap the level before them, results are wrong (timing runs only)\n");
  flag("STRATA_VK_BARRIER_ALL", barrier_all);
  if (lab_no_barrier)
    std::fprintf(stderr, "strata: STRATA_VK_LAB_NO_BARRIER is set: no barriers between a step's kernels, results are wrong (timing runs only)\n");
  flag("STRATA_VK_OUTPUT_PART", output_part);
  flag("STRATA_VK_SPLIT_ATTN", split_attention);
  flag("STRATA_VK_QTILE_ATTN", tiled_attention);
  flag("STRATA_VK_GQA_ATTN", gqa_attention);
  flag("STRATA_VK_MULTI_GQA", multi_gqa);
  count("STRATA_VK_MULTI_GQA_MIN", 2, 4096, multi_gqa_min, "tokens");
  flag("STRATA_VK_DEC_LANES", dec_lanes);
  count("STRATA_VK_QDEC_LANES", 0, 2, qdec_lanes, "0: never, 1: always, 2: caches of up to 24,576 tokens");
  if (const auto wg = env_uint("STRATA_VK_DEC_LANES_WG", 32, 1024, "threads, rounded down to a power of two"))
    dec_lanes_wg = std::bit_floor(*wg);
  flag("STRATA_VK_FA", flash_attention);
  flag("STRATA_VK_FA_REGS", fa_regs);
  choice("STRATA_VK_FA_WARPS", {4, 8}, fa_warps);
  flag("STRATA_VK_QDEC_RING_SPLIT", qdec_ring_split);
  flag("STRATA_VK_QDEC_ONE_PASS", qdec_one_pass);
  choice("STRATA_VK_QDEC_HOIST", {0, 1, 2}, qdec_hoist);
  choice("STRATA_VK_QDEC_KIF", {1, 2, 4, 8, 16}, qdec_kif);
  choice("STRATA_VK_QDEC_WG", {64, 128, 256, 512, 1024}, qdec_wg);
  qdec_wg_every_step = std::getenv("STRATA_VK_QDEC_WG") != nullptr;
  flag("STRATA_VK_QDEC_KVEC", qdec_kvec);
  flag("STRATA_VK_QDEC_BLK_AHEAD", qdec_blk_ahead);
  flag("STRATA_VK_QDEC_WARP", qdec_warp);
  flag("STRATA_VK_QDEC_VAHEAD", qdec_vahead);
  flag("STRATA_VK_QDEC_VROW", qdec_vrow);
  flag("STRATA_VK_QDEC_IDOT", qdec_idot);
  flag("STRATA_VK_QDEC_VFOLD", qdec_vfold);
  choice("STRATA_VK_COMBINE_WG", {128, 256, 512, 1024}, combine_wg);
  choice("STRATA_VK_COMBINE_CIF", {4, 8, 16}, combine_cif);
  if (const auto bits = env_uint("STRATA_VK_QDEC_SKIP", 0, 4095, {}, "a bit mask from 0 to 4095 (attention_qdec.glsl QDEC_SKIP)"))
    qdec_skip = std::to_string(*bits);
  choice("STRATA_VK_FA_KEYS", {32, 64}, fa_keys);
  flag("STRATA_VK_FA_FASTMASK", fa_fast_mask);
  flag("STRATA_VK_MMA_DEC", mma_dec);
  count("STRATA_VK_TQ_GQA", 0, 2, tq_gqa, "0: never, 1: decode steps, 2: prompt steps too");
  if (const auto keys = env_uint("STRATA_VK_TQ_SPLIT", 64, 8192, "keys, rounded down to a multiple of 64"))
    tq_split = std::clamp<std::uint32_t>(*keys / 64, 1, 128) * 64;
  if (const auto keys = env_uint("STRATA_VK_TQ_WAVE", 0, 8192, "keys, rounded down to a multiple of 64; 0: off"))
    tq_wave_split = *keys / 64 * 64;
  flag("STRATA_VK_TQ_PREP", tq_prep);
  flag("STRATA_VK_ENCODE_BESIDE", encode_beside);
  // Only turns the tensor cores off: 1 leaves the device's support (set before read_env).
  if (const auto on = env_bool("STRATA_VK_COOPMAT"); on && !*on) coopmat = false;
  count("STRATA_VK_MV_NR", 1, 16, mv_rows, "rows a workgroup");
  count("STRATA_VK_MV_WG", 16, 512, mv_wg, "threads");
  flag("STRATA_VK_MMVQ", mmvq);
  flag("STRATA_VK_MMVQ_MORE", mmvq_more);
  flag("STRATA_VK_QUANT_OUT", quant_out);
  flag("STRATA_VK_MMVQ_PAIR", mmvq_pair);
  flag("STRATA_VK_MMVQ_STACK", mmvq_stack);
  flag("STRATA_VK_NORM_OUT", norm_out);
  flag("STRATA_VK_COMBINE_NORM_OUT", combine_norm_out);
  flag("STRATA_VK_ROUTER_NORM", router_norm);
  flag("STRATA_VK_TOPK_IN", topk_in);
  count("STRATA_VK_TOPK_LAB", 0, 1, topk_lab, "lab bits; results are then wrong");
  flag("STRATA_VK_TOPK_LEAN", topk_lean);
  flag("STRATA_VK_ROUTER_PARTS", router_parts);
  flag("STRATA_VK_ROUTER_PARTS_LAB", router_parts_lab);
  if (router_parts_lab)
    std::fprintf(stderr, "strata: STRATA_VK_ROUTER_PARTS_LAB is set: the router's parts are left out, results are wrong (timing runs only)\n");
  flag("STRATA_VK_ROUTER_PRODUCT", router_product);
  flag("STRATA_VK_TOPK_DIRECT", topk_direct);
  flag("STRATA_VK_BLOCK_NORM_OUT", block_norm_out);
  flag("STRATA_VK_MOE_BLOCK_TAIL", moe_block_tail);
  count("STRATA_VK_BT_LAB", 0, 3, moe_block_tail_lab, "lab bits; results are then wrong");
  count("STRATA_VK_MMVQ_SHORT_LPR", 0, 16, mmvq_short_lpr, "lanes a row; 0: a warp a row");
  count("STRATA_VK_SHORT_CTX", 0, 1u << 20, short_ctx_len, "tokens; 0: off");
  flag("STRATA_VK_ATTN_Q8", attn_q8);
  flag("STRATA_VK_V4", attn_v4);
  flag("STRATA_VK_HEAD_OPS", head_ops_attention);
  flag("STRATA_VK_HEAD_OPS_SPLIT", head_ops_split);
  choice("STRATA_VK_ATTN_DEC_WG", {128, 256, 512}, attn_dec_wg);
  choice("STRATA_VK_DEC_LPK", {8, 16, 32}, dec_lanes_lpk);
  flag("STRATA_VK_CHUNK_SLOTS", chunk_slots);
  choice("STRATA_VK_DEC_KC", {1, 2, 4, 8, 16}, dec_chunk_keys, "keys a chunk of the LANES decode forms");
  choice("STRATA_VK_QDEC_KC", {1, 2, 4, 8, 16}, qdec_chunk_keys, "keys a chunk of the compressed-KV LANES decode form");
  count("STRATA_VK_TAIL", 0, 8, tail_rows, "tokens; 0: off");
  flag("STRATA_VK_MOE_GROUPED", moe_grouped);
  count("STRATA_VK_MMVQ_MAX_TOKENS", detail::mm_min_tokens, 256, mmvq_max_tokens, "tokens");
  flag("STRATA_VK_MMA2", mma2);
  // BM:BN:WM:WN from a tensor-core tile switch (false: not set).
  const auto tile_env = [](const char* name, mma2_tile& out) {
    const char* v = std::getenv(name);
    if (!v) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    int used = 0;  // the whole value, nothing after WN
    if (std::sscanf(v, "%u:%u:%u:%u%n", &a, &b, &c, &d, &used) != 4 || v[used] != '\0' || !c || !d || a % c || b % d ||
        a % 16 || b % 16 || c % 16 || d % 16 || a / c * (b / d) * 32 > 1024)
      throw error(std::string(name) + " must be BM:BN:WM:WN (multiples of 16, at most 32 warps), got '" + v + "'");
    out = {a, b, c, d};
    return true;
  };
  if (tile_env("STRATA_VK_MMA2_SHAPE", mma2_shape)) mma2_forced = true;
  flag("STRATA_VK_MM3", mm3);
  count("STRATA_VK_MMQ", 0, 2, mmq, "0: through the scratch, 2: Q6_K in place for every batch");
  if (const auto ahead = env_bool("STRATA_VK_MM3_AHEAD", "one scratch slot", "expand the next GEMM's weights ahead")) {
    mm3_ahead = *ahead;
    if (!mm3_ahead) mm3_scratch_min = 1024;
  }
  if (const auto n = env_uint("STRATA_VK_MM3_SCRATCH_MIN", 0, int_max, "tokens; 0: never"))
    mm3_scratch_min = *n == 0 ? 0xFFFFFFFFu : *n;
  if (const auto n = env_uint("STRATA_VK_F16_COPY_MIN", 1, int_max, "tokens")) f16_copy_min_tokens = *n;
  f16_copies_env = env_bool("STRATA_VK_F16_COPIES", "no f16 weight copies", "copies where the memory holds them");
  step_spin_env = env_uint("STRATA_VK_STEP_SPIN_US", 0, 1000000, {}, "microseconds from 0 (no poll) to 1000000");
  if (const char* v = std::getenv("STRATA_VK_MM3_TOKFAST")) {
    const std::string_view m(v);
    if (m != "0" && m != "1" && m != "2")
      refuse("STRATA_VK_MM3_TOKFAST", m, "0 (rows fastest), 1 (token tiles fastest over f16 weights with K <= N) or 2 (always)");
    mm3_tok_fast = m[0] - '0';
  }
  if (const auto kb = env_uint("STRATA_VK_SCRATCH_SLOT_KB", 1, 128u << 10, {}, "a size in KiB from 1 to 131072"))
    scratch_slot_halves = std::uint64_t(*kb) << 9;
  count("STRATA_VK_MMQ2", 0, 2, mmq2, "0: never, 1: tiles of at most 64 rows, 2: always");
  flag("STRATA_VK_MMA_N8", mma_n8);
  count("STRATA_VK_MMS_H2", 0, 3, mms_h2, "bits: 1 mul_mm_f16's in-place tiles, 2 mul_mm_small's");
  flag("STRATA_VK_SPLITK", split_k);
  count("STRATA_VK_SPLITK_WGS", 1, 65535, split_target, "workgroups");
  if (const auto k = env_uint("STRATA_VK_SPLITK_MIN_K", 1, 65536, "elements of K, rounded up to a multiple of 64"))
    split_min_k = (*k + 63) / 64 * 64;
  if (const auto n = env_uint("STRATA_VK_MMK_SMALL", 0, int_max, "tokens; 0: never, 1: the default 33"))
    mmk_small_min = *n == 0 ? 0xFFFFFFFFu : *n == 1 ? 33 : *n;
  flag("STRATA_VK_MMS", mms);
  flag("STRATA_VK_MMS_MOE", mms_moe);
  choice("STRATA_VK_MMS_MOE_CHUNK", {16, 32, 64}, mms_moe_chunk, "pairs a chunk");
  flag("STRATA_VK_NARROW_GEMM", narrow_gemm);
  flag("STRATA_VK_MMQ_MOE", mmq_moe);
  // 0 off, 1 on, 16 .. 64 on from that many tokens (mmq_dense_min).
  constexpr const char* dense = "0 (off), 1 (on) or a token count from 16 to 64 (on from it)";
  if (const auto n = env_uint("STRATA_VK_MMQ_DENSE", 0, 64, {}, dense)) {
    if (*n > 1 && *n < 16) refuse("STRATA_VK_MMQ_DENSE", std::getenv("STRATA_VK_MMQ_DENSE"), dense);
    mmq_dense = *n != 0;
    if (*n > 1) mmq_dense_min = *n;
  }
  if (const auto k = env_uint("STRATA_VK_MMQ_DENSE_MAX_K", 64, int_max, "elements of K")) mmq_dense_max_k = *k;
  choice("STRATA_VK_MMQ_MOE_CHUNK", {16, 32, 64}, mmq_moe_chunk, "pairs a chunk");
  if (const char* v = std::getenv("STRATA_VK_MMQ_MOE_SHAPE")) {
    unsigned a = 0, b = 0, c = 0;
    // The chunks in use (one forced, else 16 .. 64) hold whole WN tiles, a thread per weight row
    // at the smallest and at most 1024 threads at the largest.
    const unsigned lo = mmq_moe_chunk ? mmq_moe_chunk : 16, hi = mmq_moe_chunk ? mmq_moe_chunk : 64;
    int used = 0;  // the whole value, nothing after WN
    if (std::sscanf(v, "%u:%u:%u%n", &a, &b, &c, &used) != 3 || v[used] != '\0' || !b || !c || a % b || lo % c ||
        a % 16 || b % 16 || c % 16 || a / b * (lo / c) * 32 < a || a / b * (hi / c) * 32 > 1024)
      throw error("STRATA_VK_MMQ_MOE_SHAPE must be BM:WM:WN (multiples of 16; chunks of " + std::to_string(lo) + ".." +
                  std::to_string(hi) + " tokens multiples of WN; BM <= 32 BM/WM x chunk/WN <= 1024 threads), got '" +
                  std::string(v) + "'");
    mmq_moe_shape = {a, lo, b, c};
  }
  count("STRATA_VK_MMS_MIN", 1, 4096, mms_min, "tokens");
  flag("STRATA_VK_MMVQ_MT", mmvq_mt);
  // WG:RPG:U from an integer-matvec shape switch (false: not set); whole warps when asked.
  const auto shape_env = [](const char* name, const char* example, bool whole_warps, mmvq_shape_t& out) {
    const char* v = std::getenv(name);
    if (!v) return false;
    unsigned a = 0, b = 0, c = 0;
    int used = 0;  // the whole value, nothing after U
    if (std::sscanf(v, "%u:%u:%u%n", &a, &b, &c, &used) != 3 || v[used] != '\0' || a < 32 || a > 1024 ||
        (whole_warps && a % 32) || b < 1 || b > 8 || c < 1 || c > 8)
      throw error(std::string(name) + " must be WG:RPG:U (e.g. " + example + "), got '" + v + "'");
    out = {a, b, c};
    return true;
  };
  mmvq_mt_shape_forced = shape_env("STRATA_VK_MMVQ_MT_SHAPE", "64:4:1", true, mmvq_mt_shape);
  mmvq_expert_forced = shape_env("STRATA_VK_MMVQ_EXPERT_SHAPE", "128:2:2", true, mmvq_expert);
  // A QUANT_OUT matvec's shape: as shape_env, and its workgroup owns 32 rows.
  const auto qout_env = [&](const char* name, const char* example, mmvq_shape_t& out) {
    const bool set = shape_env(name, example, true, out);
    if (out.wg / 32 * out.rpg != 32)
      throw error(std::string(name) + ": a QUANT_OUT or NORM_OUT workgroup owns 32 rows (WG / 32 x RPG = 32)");
    return set;
  };
  qout_env("STRATA_VK_MMVQ_MT_QOUT", "512:2:1", mmvq_mt_qout);
  mmvq_qout_forced = qout_env("STRATA_VK_MMVQ_QOUT", "256:4:1", mmvq_qout);
  mmvq_nout_forced = qout_env("STRATA_VK_MMVQ_NOUT", "512:2:1", mmvq_nout);  // NORM_OUT owns 32 rows too
  mmvq_stack_shape_forced = shape_env("STRATA_VK_MMVQ_STACK_SHAPE", "256:2:2", true, mmvq_stack_shape);
  count("STRATA_VK_MMS_MAX", 1, 4096, mms_max, "tokens");
  flag("STRATA_VK_MMS_XS", mms_xs);
  flag("STRATA_VK_MMS_N8", mms_n8);
  flag("STRATA_VK_MMR", mmr);
  if (const auto n = env_uint("STRATA_VK_MMR_MAX", 1, 64, {}, "a token count of 1-64")) mmr_max = *n;
  choice("STRATA_VK_MMR_WARPS", {2, 4, 8, 16}, mmr_warps, "mul_mm_reg runs 2, 4, 8 or 16 warps");
  if (const auto xa = env_bool("STRATA_VK_MMR_XA")) mmr_xa = *xa ? 1 : 0;
  flag("STRATA_VK_MMVQ_UNROLL", mmvq_unroll);
  flag("STRATA_VK_MM3_XF16", mm3_xf16);
  if (tile_env("STRATA_VK_MM3_SHAPE", mm3_shape)) mm3_forced = true;
  if (mmvq_shape_t forced{}; shape_env("STRATA_VK_MMVQ_SHAPE", "64:2:2", false, forced))
    mmvq_wg = forced.wg, mmvq_rpg = forced.rpg, mmvq_u = forced.u, mmvq_shape_forced = true;
}

}  // namespace strata::gpu
