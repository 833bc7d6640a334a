// The tuning switches read from STRATA_VK_* environment variables (tuning.hpp).
#include "tuning.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "strata/core/error.hpp"

namespace strata::gpu {
namespace {

// Whether environment variable `name` is set to exactly `value` (the switches' "0" / "1").
bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v && std::string_view(v) == value;
}

}  // namespace

void backend_tuning::read_env() {
  if (env_is("STRATA_VK_FUSE", "0")) fuse = false;
  if (const char* v = std::getenv("STRATA_VK_MM_FUSE")) {
    const std::string_view m(v);
    if (m != "0" && m != "1" && m != "2")
      throw error("STRATA_VK_MM_FUSE='" + std::string(v) + "' must be 0 (off), 1 (norm / SwiGLU copies, residual) or 2 (all)");
    mm_fuse = m != "0";
    mm_fuse_more = m == "2";
  }
  if (const char* v = std::getenv("STRATA_VK_SWIGLU_PART_KB")) {
    char* end = nullptr;
    const unsigned long long kb = std::strtoull(v, &end, 10);
    if (end == v || *end || *v == '-' || kb > (1ull << 30))
      throw error("STRATA_VK_SWIGLU_PART_KB='" + std::string(v) + "' must be a size in KiB up to 2^30 (0: one dispatch)");
    swiglu_part_bytes = kb == 0 ? ~0ull >> 1 : std::uint64_t(kb) << 10;
  }
  if (const char* v = std::getenv("STRATA_VK_STEP_GRANULE")) {
    char* end = nullptr;
    const unsigned long g = std::strtoul(v, &end, 10);
    if (end == v || *end || g < 1 || g > 4096)
      throw error("STRATA_VK_STEP_GRANULE='" + std::string(v) + "' must be a token count from 1 (steps not fitted) to 4096");
    step_granule = std::uint32_t(g);
  }
  const auto labels = [](const char* s, std::vector<std::string>& out) {
    for (std::string_view v(s ? s : ""); !v.empty();) {
      const auto c = v.find(',');
      if (const auto item = v.substr(0, c); !item.empty()) out.emplace_back(item);
      v = c == v.npos ? std::string_view{} : v.substr(c + 1);
    }
  };
  labels(std::getenv("STRATA_VK_SKIP"), skip_kernels);
  labels(std::getenv("STRATA_VK_REPEAT"), repeat_kernels);
  if (const char* v = std::getenv("STRATA_VK_PAD_LEVELS")) pad_levels = std::uint32_t(std::clamp(std::atoi(v), 0, 64));
  if (!skip_kernels.empty() || !repeat_kernels.empty() || std::getenv("STRATA_VK_QDEC_SKIP"))
    std::fprintf(stderr, "strata: STRATA_VK_SKIP/REPEAT/QDEC_SKIP is set: kernels left out or run twice, results are wrong (timing runs only)\n");
  if (env_is("STRATA_VK_STEP_BUCKETS", "0")) step_buckets = false;
  if (env_is("STRATA_VK_OUTPUT_PART", "0")) output_part = false;
  if (env_is("STRATA_VK_SPLIT_ATTN", "0")) split_attention = false;
  if (env_is("STRATA_VK_QTILE_ATTN", "1")) tiled_attention = true;
  if (env_is("STRATA_VK_GQA_ATTN", "0")) gqa_attention = false;
  if (env_is("STRATA_VK_MULTI_GQA", "0")) multi_gqa = false;
  if (const char* v = std::getenv("STRATA_VK_MULTI_GQA_MIN")) multi_gqa_min = std::uint32_t(std::clamp(std::atoi(v), 2, 4096));
  if (env_is("STRATA_VK_DEC_LANES", "0")) dec_lanes = false;
  if (const char* v = std::getenv("STRATA_VK_QDEC_LANES")) qdec_lanes = std::string_view(v) != "0";
  if (const char* v = std::getenv("STRATA_VK_DEC_LANES_WG")) dec_lanes_wg = std::bit_floor(std::uint32_t(std::clamp(std::atoi(v), 32, 1024)));
  if (env_is("STRATA_VK_FA", "0")) flash_attention = false;
  if (env_is("STRATA_VK_FA_REGS", "0")) fa_regs = false;
  const auto choice = [](const char* name, std::initializer_list<std::uint32_t> allowed, std::uint32_t& out) {
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
    throw error(std::string(name) + "='" + v + "' must be one of " + list);
  };
  choice("STRATA_VK_FA_WARPS", {4, 8}, fa_warps);
  std::uint32_t ring_split = qdec_ring_split;
  choice("STRATA_VK_QDEC_RING_SPLIT", {0, 1}, ring_split);
  qdec_ring_split = ring_split != 0;
  choice("STRATA_VK_QDEC_KIF", {1, 2, 4, 8, 16}, qdec_kif);
  if (const char* v = std::getenv("STRATA_VK_QDEC_SKIP")) {
    char* end = nullptr;
    const unsigned long bits = std::strtoul(v, &end, 10);
    if (end == v || *end || *v == '-' || bits > 511)
      throw error("STRATA_VK_QDEC_SKIP='" + std::string(v) + "' must be a bit mask from 0 to 511 (attention_qdec.glsl QDEC_SKIP)");
    qdec_skip = std::to_string(bits);
  }
  choice("STRATA_VK_FA_KEYS", {32, 64}, fa_keys);
  std::uint32_t fast_mask = fa_fast_mask;
  choice("STRATA_VK_FA_FASTMASK", {0, 1}, fast_mask);
  fa_fast_mask = fast_mask != 0;
  if (const char* c = std::getenv("STRATA_VK_MMA_DEC")) mma_dec = std::string_view(c) == "1";
  if (const char* c = std::getenv("STRATA_VK_TQ_GQA")) tq_gqa = std::clamp(std::atoi(c), 0, 2);
  if (const char* v = std::getenv("STRATA_VK_TQ_SPLIT")) tq_split = std::clamp(std::atoi(v) / 64, 1, 128) * 64;
  if (env_is("STRATA_VK_TQ_PREP", "0")) tq_prep = false;
  if (env_is("STRATA_VK_ENCODE_BESIDE", "0")) encode_beside = false;
  if (env_is("STRATA_VK_COOPMAT", "0")) coopmat = false;
  if (const char* v = std::getenv("STRATA_VK_MV_NR")) mv_rows = std::clamp(std::atoi(v), 1, 16);
  if (const char* v = std::getenv("STRATA_VK_MV_WG")) mv_wg = std::clamp(std::atoi(v), 16, 512);
  if (env_is("STRATA_VK_MMVQ", "0")) mmvq = false;
  if (env_is("STRATA_VK_QUANT_OUT", "0")) quant_out = false;
  if (env_is("STRATA_VK_NORM_OUT", "0")) norm_out = false;
  if (env_is("STRATA_VK_COMBINE_NORM_OUT", "0")) combine_norm_out = false;
  if (env_is("STRATA_VK_ROUTER_NORM", "0")) router_norm = false;
  if (env_is("STRATA_VK_TOPK_IN", "0")) topk_in = false;
  if (const char* v = std::getenv("STRATA_VK_MMVQ_SHORT_LPR")) mmvq_short_lpr = std::uint32_t(std::clamp(std::atoi(v), 0, 16));
  if (const char* v = std::getenv("STRATA_VK_SHORT_CTX")) short_ctx_len = std::uint32_t(std::clamp(std::atoi(v), 0, 1 << 20));
  if (env_is("STRATA_VK_ATTN_Q8", "0")) attn_q8 = false;
  if (env_is("STRATA_VK_V4", "0")) attn_v4 = false;
  if (const char* v = std::getenv("STRATA_VK_TAIL")) tail_rows = std::uint32_t(std::clamp(std::atoi(v), 0, 8));
  if (env_is("STRATA_VK_MOE_GROUPED", "0")) moe_grouped = false;
  if (const char* v = std::getenv("STRATA_VK_MMVQ_MAX_TOKENS")) mmvq_max_tokens = std::uint32_t(std::clamp(std::atoi(v), int(detail::mm_min_tokens), 256));
  if (const char* v = std::getenv("STRATA_VK_MMA2")) mma2 = std::string_view(v) != "0";
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
  if (env_is("STRATA_VK_MM3", "0")) mm3 = false;
  if (const char* v = std::getenv("STRATA_VK_MMQ")) mmq = std::clamp(std::atoi(v), 0, 2);
  if (const char* v = std::getenv("STRATA_VK_MM3_AHEAD")) {
    if (std::string_view(v) != "0" && std::string_view(v) != "1")
      throw error("STRATA_VK_MM3_AHEAD='" + std::string(v) + "' must be 0 (one scratch slot) or 1 (expand the next GEMM's weights ahead)");
    mm3_ahead = std::string_view(v) == "1";
    if (!mm3_ahead) mm3_scratch_min = 1024;
  }
  if (const char* v = std::getenv("STRATA_VK_MM3_SCRATCH_MIN")) {
    const int n = std::atoi(v);
    mm3_scratch_min = n <= 0 ? 0xFFFFFFFFu : std::uint32_t(n);
  }
  if (const char* v = std::getenv("STRATA_VK_MM3_TOKFAST")) {
    const std::string_view m(v);
    if (m != "0" && m != "1" && m != "2")
      throw error("STRATA_VK_MM3_TOKFAST='" + std::string(v) + "' must be 0 (rows fastest), 1 (token tiles fastest over f16 weights with K <= N) or 2 (always)");
    mm3_tok_fast = m[0] - '0';
  }
  if (const char* v = std::getenv("STRATA_VK_SCRATCH_SLOT_KB")) {
    char* end = nullptr;
    const unsigned long kb = std::strtoul(v, &end, 10);
    if (end == v || *end || kb < 1 || kb > (128ul << 10))
      throw error("STRATA_VK_SCRATCH_SLOT_KB='" + std::string(v) + "' must be a size in KiB from 1 to 131072");
    scratch_slot_halves = std::uint64_t(kb) << 9;
  }
  if (const char* v = std::getenv("STRATA_VK_MMQ2")) mmq2 = std::clamp(std::atoi(v), 0, 2);
  if (const char* v = std::getenv("STRATA_VK_MMA_N8")) mma_n8 = std::string_view(v) == "1";
  if (const char* v = std::getenv("STRATA_VK_MMS_H2")) mms_h2 = std::clamp(std::atoi(v), 0, 3);
  if (env_is("STRATA_VK_SPLITK", "0")) split_k = false;
  if (const char* v = std::getenv("STRATA_VK_SPLITK_WGS")) split_target = std::uint32_t(std::clamp(std::atoi(v), 1, 65535));
  if (const char* v = std::getenv("STRATA_VK_SPLITK_MIN_K")) split_min_k = std::uint32_t(std::clamp(std::atoi(v), 1, 65536) + 63) / 64 * 64;
  if (const char* v = std::getenv("STRATA_VK_MMK_SMALL")) {
    const int n = std::atoi(v);
    mmk_small_min = n <= 0 ? 0xFFFFFFFFu : std::uint32_t(n == 1 ? 33 : n);
  }
  if (env_is("STRATA_VK_MMS", "0")) mms = false;
  if (env_is("STRATA_VK_MMS_MOE", "0")) mms_moe = false;
  if (const char* v = std::getenv("STRATA_VK_MMS_MOE_CHUNK")) {
    const int c = std::atoi(v);
    if (c != 16 && c != 32 && c != 64) throw error("STRATA_VK_MMS_MOE_CHUNK must be 16, 32 or 64, got '" + std::string(v) + "'");
    mms_moe_chunk = std::uint32_t(c);
  }
  if (env_is("STRATA_VK_NARROW_GEMM", "0")) narrow_gemm = false;
  if (env_is("STRATA_VK_MMQ_MOE", "0")) mmq_moe = false;
  if (const char* v = std::getenv("STRATA_VK_MMQ_DENSE")) {
    const int n = std::atoi(v);
    mmq_dense = n != 0;
    if (n > 1) mmq_dense_min = std::uint32_t(std::clamp(n, 16, 64));
  }
  if (const char* v = std::getenv("STRATA_VK_MMQ_DENSE_MAX_K")) mmq_dense_max_k = std::uint32_t(std::max(64, std::atoi(v)));
  if (const char* v = std::getenv("STRATA_VK_MMQ_MOE_CHUNK")) {
    const int c = std::atoi(v);
    if (c != 16 && c != 32 && c != 64) throw error("STRATA_VK_MMQ_MOE_CHUNK must be 16, 32 or 64, got '" + std::string(v) + "'");
    mmq_moe_chunk = std::uint32_t(c);
  }
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
  if (const char* v = std::getenv("STRATA_VK_MMS_MIN")) mms_min = std::uint32_t(std::clamp(std::atoi(v), 1, 4096));
  if (const char* v = std::getenv("STRATA_VK_MMVQ_MT")) mmvq_mt = std::string_view(v) != "0";
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
  // A QUANT_OUT matvec's shape: as shape_env, and its workgroup owns 32 rows.
  const auto qout_env = [&](const char* name, const char* example, mmvq_shape_t& out) {
    const bool set = shape_env(name, example, true, out);
    if (out.wg / 32 * out.rpg != 32)
      throw error(std::string(name) + ": a QUANT_OUT workgroup owns 32 rows (WG / 32 x RPG = 32)");
    return set;
  };
  qout_env("STRATA_VK_MMVQ_MT_QOUT", "512:2:1", mmvq_mt_qout);
  mmvq_qout_forced = qout_env("STRATA_VK_MMVQ_QOUT", "256:4:1", mmvq_qout);
  if (const char* v = std::getenv("STRATA_VK_MMS_MAX")) mms_max = std::uint32_t(std::clamp(std::atoi(v), 1, 4096));
  if (const char* v = std::getenv("STRATA_VK_MMS_XS")) mms_xs = std::string_view(v) != "0";
  if (const char* v = std::getenv("STRATA_VK_MMS_N8")) mms_n8 = std::string_view(v) != "0";
  if (const char* v = std::getenv("STRATA_VK_MMR")) mmr = std::string_view(v) != "0";
  if (const char* v = std::getenv("STRATA_VK_MMR_MAX")) {
    unsigned n = 0;
    int used = 0;
    if (std::sscanf(v, "%u%n", &n, &used) != 1 || v[used] != '\0' || n < 1 || n > 64)
      throw error("STRATA_VK_MMR_MAX='" + std::string(v) + "' must be a token count of 1-64");
    mmr_max = n;
  }
  if (const char* v = std::getenv("STRATA_VK_MMR_WARPS")) {
    const std::string_view w(v);
    if (w != "2" && w != "4" && w != "8" && w != "16")
      throw error("STRATA_VK_MMR_WARPS='" + std::string(v) + "': mul_mm_reg runs 2, 4, 8 or 16 warps");
    mmr_warps = std::uint32_t(std::atoi(v));
  }
  if (const char* v = std::getenv("STRATA_VK_MMR_XA")) {
    const std::string_view x(v);
    if (x != "0" && x != "1") throw error("STRATA_VK_MMR_XA='" + std::string(v) + "' must be 0 or 1");
    mmr_xa = x == "1" ? 1 : 0;
  }
  if (const char* v = std::getenv("STRATA_VK_MMVQ_UNROLL")) mmvq_unroll = std::string_view(v) == "1";
  if (env_is("STRATA_VK_MM3_XF16", "0")) mm3_xf16 = false;
  if (tile_env("STRATA_VK_MM3_SHAPE", mm3_shape)) mm3_forced = true;
  if (mmvq_shape_t forced{}; shape_env("STRATA_VK_MMVQ_SHAPE", "64:2:2", false, forced))
    mmvq_wg = forced.wg, mmvq_rpg = forced.rpg, mmvq_u = forced.u, mmvq_shape_forced = true;
}

}  // namespace strata::gpu
