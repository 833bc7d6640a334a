#include "backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <cstdlib>
#include <set>

#include "commands.hpp"
#include "context.hpp"
#include "memory.hpp"
#include "pipelines.hpp"
#include "quant_layout.hpp"
#include "strata/core/error.hpp"
#include "strata/turboquant/format.hpp"

namespace strata::gpu {
namespace {

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

constexpr std::uint32_t wg = 128;         // workgroup size of the elementwise / row kernels
constexpr std::uint32_t max_cached_steps = 16;
constexpr std::uint64_t section_align = 256;
constexpr std::uint32_t mm_min_tokens = 16;  // from here on matmuls use the tiled kernel
constexpr std::uint32_t flash_min_tokens = 16;  // and attention the tensor cores (one sequence, f16 KV)

std::uint32_t div_up(std::uint64_t a, std::uint64_t b) { return std::uint32_t((a + b - 1) / b); }
std::string gib(std::uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  return buf;
}

// Weight formats with an int8-activation unit in shaders/quant/<fmt>.glsl (MMVQ).
bool has_mmvq(gguf::type_id t) {
  return t == gguf::type_id::q4_k || t == gguf::type_id::q6_k || t == gguf::type_id::q8_0;
}

// Push-constant blocks, field for field as declared in the shaders.
struct matvec_pc {
  std::uint32_t K, N, n_tok, row_bytes, x_off, x_stride, y_off, y_stride, expert_bytes, in_div, ids_off, up_off;
  std::uint32_t r_off, r_stride;
  float eps;
};
struct mmvq_pc {
  std::uint32_t K, N, n_tok, row_bytes, q_off, q_stride, s_off, s_stride, y_off, y_stride, r_off, r_stride, up_off,
      expert_bytes, ids_off, in_div;
};
struct quantize_pc {
  std::uint32_t K, x_off, x_stride, q_off, q_stride, s_off, s_stride;
  float eps;
  std::uint32_t y_off = 0, y_stride = 0;  // WRITE_Y
};
struct attn_prep_pc {
  std::uint32_t n_head, n_kv, D, n_rot, q_off, q_stride, k_off, k_stride, v_off, v_stride;
  float base, freq_scale, eps;
  std::uint32_t flags;
  std::uint32_t ring_rows;  // compressed cache (KV_ENCODE) with a full-precision window
  float temp_scale, temp_floor_base;  // TEMP
};
// Workgroup tile of mul_mm.glsl's MMA2 path: BM weight rows x BN tokens, WM x WN per warp.
struct mma2_tile {
  std::uint32_t bm, bn, wm, wn;
};
struct mm_f16_pc {
  std::uint32_t K, N, n_tok, w_off, x_off, x_stride, y_off, y_stride;
};
struct dequant_f16_pc {
  std::uint32_t K, row_bytes, row0, rows, o_off;
};
struct get_rows_pc {
  std::uint32_t K, row_bytes, o_off, o_stride;
};
struct rms_norm_pc {
  std::uint32_t cols, x_off, x_stride, y_off, y_stride;
  float eps;
  std::uint32_t rows;  // bounds the workgroups a dispatch spilled into z rounds up to
};
struct rope_pc {
  std::uint32_t n_tok, n_heads, n_rot, head_stride, x_off, x_stride;
  float base, freq_scale;
  std::uint32_t neox, has_ff;
};
struct temperature_pc {
  std::uint32_t n_tok, cols, q_off, q_stride;
  float scale, floor_base;
};
struct kv_store_pc {
  std::uint32_t n_tok, row, k_off, k_stride, v_off, v_stride;
};
struct attention_pc {
  std::uint32_t n_head, n_head_kv, D, chunk, q_off, q_stride, o_off, o_stride, block_size, max_blocks;
  float scale;
  std::uint32_t split_len, n_splits;
  std::uint32_t window, ring_rows;  // attention_q only (compressed KV)
};
struct kv_store_q_pc {
  std::uint32_t n_tok, n_head_kv, k_off, k_stride, v_off, v_stride, ring_rows;
};

// Bytes of one head vector of a KV side (the CPU's kv_codec layout); throws for a head_dim the
// type cannot store.
std::uint64_t kv_head_bytes(kv::kv_type t, std::uint32_t d) {
  switch (t) {
    case kv::kv_type::f32: return std::uint64_t(d) * 4;
    case kv::kv_type::f16: return std::uint64_t(d) * 2;
    case kv::kv_type::q8_0:
      if (d % 32)
        throw error("KV cache type q8_0 needs a head_dim that is a multiple of 32; this model's head_dim is " +
                    std::to_string(d));
      return std::uint64_t(d) / 32 * 34;
    default:
      try {
        return turboquant::format(d, kv::turboquant_bits(t)).row_bytes();
      } catch (const error&) {
        throw error("KV cache type " + std::string(kv::name_of(t)) + " does not support this model's head_dim " +
                    std::to_string(d) + " (TurboQuant supports multiples of 16 up to 1024, e.g. 64, 80, 96, 128, 256)");
      }
  }
}
std::uint32_t kv_kind(kv::kv_type t) {
  return t == kv::kv_type::f32 ? 0 : t == kv::kv_type::f16 ? 1 : t == kv::kv_type::q8_0 ? 2 : 3;
}
struct elementwise_pc {
  std::uint32_t cols, a_off, a_stride, b_off, b_stride, o_off, o_stride;
};
struct copy_rows_pc {
  std::uint32_t cols, s_off, s_stride, d_off, d_stride;
};
struct moe_pc {
  std::uint32_t n_expert, k, cols, s_off, s_stride, d_off, d_stride, weighted;
  std::uint32_t r_off = 0, r_stride = 0;  // MOE_COMBINE RESIDUAL
};

}  // namespace

struct backend::impl {
  backend_options opt;
  context ctx;
  pipeline_registry pipes;
  startup_stats stats;

  // Activation buffers and KV buffers (id = index + 1; id 0 marks read-only ranges).
  std::vector<gpu_buffer> buffers;
  std::vector<std::uint64_t> buffer_floats;

  struct weight_entry {
    const gguf::tensor_info* info = nullptr;
    std::uint32_t chunk = 0;
    std::uint64_t offset = 0, bytes = 0;
  };
  std::vector<weight_entry> weights;
  std::vector<gpu_buffer> chunks;
  bool uploaded = false;

  // Per-step inputs (host-visible), one section each.
  gpu_buffer step;
  std::uint32_t max_rows = 0;  // tokens per step
  std::uint64_t off_tokens = 0, off_pos = 0, off_slots = 0, off_seq_row = 0, off_out_rows = 0, off_blocks = 0;
  std::uint64_t blocks_bytes = 0;
  std::uint32_t max_blocks = 0;
  std::uint32_t moe_ids = 0, moe_wts = 0;  // buffer ids
  std::uint32_t attn_part = 0;             // split-attention partials (allocated on first use)
  std::uint32_t input = 0;                 // host-visible staging of write()
  bool split_attention = true;             // STRATA_VK_SPLIT_ATTN=0 disables
  // Query-tiled prefill attention: correct, but measured slower on the H100 (pp4096 752 vs 1154
  // t/s, bench/RESULTS.md: shared-memory bank conflicts in its key loop), so opt-in for now.
  bool tiled_attention = false;            // STRATA_VK_QTILE_ATTN=1 enables
  bool gqa_attention = true;               // decode attention per KV head group; STRATA_VK_GQA_ATTN=0 disables
  // The same for compressed KV (attention_qdec): 1 decode steps, 0 never (STRATA_VK_TQ_GQA=0),
  // 2 prompt steps too (=2; unsplit, n_head_kv x tokens workgroups: 6x slower than attention_q on
  // lavapipe, not yet measured on a GPU).
  int tq_gqa = 1;
  std::uint32_t tq_split = 128;            // attention_qdec's shortest split in keys; STRATA_VK_TQ_SPLIT=N (x128)
  bool tq_prep = true;                     // compressed KV appended by attn_prep; STRATA_VK_TQ_PREP=0: kv_store_q
  bool flash_attention = true;             // prefill attention on tensor cores; STRATA_VK_FA=0 disables
  bool single_seq = false;                 // every token of the step belongs to one sequence
  gpu_buffer readback;
  gpu_buffer ids_readback;                 // argmax results (host-visible)
  std::int32_t* ids_dst = nullptr;
  std::size_t ids_count = 0;

  // Recorded steps by shape.
  struct recorded_step {
    vk::raii::CommandBuffer cmd{nullptr};
    std::vector<std::string> labels;
  };
  vk::raii::CommandPool pool{nullptr};
  vk::raii::Fence fence{nullptr};
  vk::raii::QueryPool queries{nullptr};
  std::uint32_t query_capacity = 0;
  std::map<std::uint64_t, recorded_step> steps;
  recorded_step* current = nullptr;
  recorded_step pending;  // being recorded
  bool replay = false, recording = false;
  std::uint64_t current_key = 0;
  command_recorder rec;
  float* read_dst = nullptr;
  std::size_t read_floats = 0;
  std::uint32_t last_dispatches = 0;
  std::map<std::string, kernel_time> prof;

  // Peephole fusion while recording (STRATA_VK_FUSE=0 turns it off): an RMS norm whose only
  // consumers are matmuls is not dispatched but folded into their input (NORM_INPUT); matmuls
  // are held back one op so a following residual add (ADD_RESIDUAL) or, for a gate/up pair,
  // the SwiGLU (SWIGLU) joins their dispatch.
  struct pending_norm {
    tensor x, y;
    const weight* w = nullptr;
    float eps = 0;
  };
  struct pending_matmul {
    const weight* w = nullptr;
    tensor x, y;
    std::optional<pending_norm> norm;
    std::optional<tensor> residual;
    const weight* up = nullptr;
  };
  // Integer matvec (mmvq.glsl): activations quantized once per input to int8 blocks (xq/xs
  // scratch), then packed 4x8-bit dot products. STRATA_VK_MMVQ=0 turns it off (f32 matvec);
  // STRATA_VK_MMVQ_SHAPE=WG:RPG:U overrides the workgroup shape for experiments.
  bool mmvq = true;
  std::uint32_t mmvq_wg = 64, mmvq_rpg = 2, mmvq_u = 2;
  bool mmvq_shape_forced = false;
  // Two scratch slots, so a matvec can read its quantized input from one and write its output,
  // quantized for the next matvec (QUANT_OUT), into the other.
  std::uint32_t xq[2] = {0, 0}, xs[2] = {0, 0};  // buffer ids
  std::uint32_t max_k = 0;                         // widest matmul input
  std::uint32_t max_q8_rows = 0;                   // rows the int8 scratch holds (tokens or MoE pairs)
  bool quant_out = true;                           // STRATA_VK_QUANT_OUT=0 disables
  // The input each slot holds now (valid until its buffer is written).
  struct quantized_input {
    tensor x;
    const weight* norm_w = nullptr;
    float eps = 0;
  };
  std::optional<quantized_input> quantized[2];
  std::uint32_t last_slot = 1;
  // Per-head ops on Q and K (weighted / plain RMS norm, RoPE, temperature) wait here until
  // kv_store(), which records them with the KV append as one attn_prep dispatch. Any other op
  // first records them one by one, in order (flush_heads), so deferral never changes results.
  struct head_op {
    enum kind_t { norm_w, norm, rope, temp } kind = norm;
    const weight* w = nullptr;  // norm_w
    float eps = 0;              // norm_w, norm
    graph::rope_params rp{};    // rope
    const weight* ff = nullptr;  // rope: frequency factors (rope_freqs), if any
    graph::position_scale_params ps{};  // temp
  };
  struct head_tensor {
    tensor t;  // all heads of the step's tokens: rows = tokens, cols = n_heads * head_dim
    std::uint32_t n_heads = 0;
    std::vector<head_op> ops;
  };
  std::vector<head_tensor> heads;
  // An MoE layer's combine waits one op, so the decoder's residual add can join it (RESIDUAL).
  struct pending_combine {
    moe_pc pc;
    tensor y, out;
  };
  std::optional<pending_combine> combine;
  bool keep_heads = false;  // set while a head op or kv_store() prepares its inputs
  std::uint32_t step_tokens = 0;
  bool fuse = true;
  bool fuse_step = true;  // fusion applies to decode-sized steps (prefill uses the tiled matmul)
  bool coopmat = false;   // tensor-core tile product in mul_mm
  bool mma2 = false;      // its larger double-buffered tiles (STRATA_VK_MMA2=1; off until faster than the 64x64 kernel)
  bool mma2_forced = false;
  mma2_tile mma2_shape{128, 128, 64, 32};
  // Prefill on tensor cores over f16 weights (mul_mm_f16.glsl): a quantized matrix is expanded
  // into f16 scratch (dequant_f16.glsl) a slice of rows at a time, then multiplied with
  // register-prefetched tiles. STRATA_VK_MM3=0 returns to mul_mm.glsl; STRATA_VK_MM3_SHAPE forces a tile.
  bool mm3 = true;
  bool mm3_forced = false;
  mma2_tile mm3_shape{128, 64, 64, 32};
  std::uint32_t mm_scratch = 0;          // buffer id of the f16 weight scratch
  std::uint64_t mm_scratch_halves = 0;
  // The GEMM's activations converted to f16 first (copy_rows TO_F16): half the bytes each tile
  // reads from L2, where the f32 activations were 2/3 of the traffic. STRATA_VK_MM3_XF16=0 disables.
  bool mm3_xf16 = true;
  std::uint32_t mm_xh = 0;               // buffer id: max_rows x mm_xh_cols halves
  std::uint32_t mm_xh_cols = 0;
  // Matvec shape: rows per workgroup and workgroup size (STRATA_VK_MV_NR / _WG to experiment).
  std::uint32_t mv_rows = 8, mv_wg = 64;
  // Rows per workgroup of a matvec. Measured on the H100 (bench/RESULTS.md): 8 for every
  // matrix beats fewer rows for small ones (K/V projections), since x is then read from L2 once
  // per 8 rows; fewer only when the matrix has fewer rows than that.
  // Short matrices (an MoE router's 64-256 rows) take one row per workgroup, so they still
  // spread over the whole GPU.
  std::uint32_t rows_for(std::uint64_t n) const { return n > 512 && n >= mv_rows ? mv_rows : 1; }
  std::vector<pending_norm> norms;
  std::vector<pending_matmul> mats;
  std::vector<tensor> dropped;  // results of norms dropped unread: reading one is a bug

  explicit impl(const backend_options& o)
      : opt(o), ctx(o.device), pipes(ctx, o.cache_dir.empty() ? default_cache_dir() : o.cache_dir) {
    if (const char* f = std::getenv("STRATA_VK_FUSE"); f && std::string_view(f) == "0") fuse = false;
    coopmat = ctx.info().nv_coopmat;
    if (const char* c = std::getenv("STRATA_VK_SPLIT_ATTN"); c && std::string_view(c) == "0") split_attention = false;
    if (const char* c = std::getenv("STRATA_VK_QTILE_ATTN"); c && std::string_view(c) == "1") tiled_attention = true;
    if (const char* c = std::getenv("STRATA_VK_GQA_ATTN"); c && std::string_view(c) == "0") gqa_attention = false;
    if (const char* c = std::getenv("STRATA_VK_FA"); c && std::string_view(c) == "0") flash_attention = false;
    if (const char* c = std::getenv("STRATA_VK_TQ_GQA")) tq_gqa = std::clamp(std::atoi(c), 0, 2);
    if (const char* v = std::getenv("STRATA_VK_TQ_SPLIT")) tq_split = std::clamp(std::atoi(v) / 128, 1, 64) * 128;
    if (const char* c = std::getenv("STRATA_VK_TQ_PREP"); c && std::string_view(c) == "0") tq_prep = false;
    if (const char* c = std::getenv("STRATA_VK_COOPMAT"); c && std::string_view(c) == "0") coopmat = false;
    if (const char* v = std::getenv("STRATA_VK_MV_NR")) mv_rows = std::clamp(std::atoi(v), 1, 16);
    if (const char* v = std::getenv("STRATA_VK_MV_WG")) mv_wg = std::clamp(std::atoi(v), 16, 512);
    if (const char* v = std::getenv("STRATA_VK_MMVQ"); v && std::string_view(v) == "0") mmvq = false;
    if (const char* v = std::getenv("STRATA_VK_QUANT_OUT"); v && std::string_view(v) == "0") quant_out = false;
    if (const char* v = std::getenv("STRATA_VK_MMA2")) mma2 = std::string_view(v) != "0";
    if (const char* v = std::getenv("STRATA_VK_MMA2_SHAPE")) {
      unsigned a = 0, b = 0, c = 0, d = 0;
      if (std::sscanf(v, "%u:%u:%u:%u", &a, &b, &c, &d) != 4 || !c || !d || a % c || b % d || a % 16 || b % 16 ||
          c % 16 || d % 16 || a / c * (b / d) * 32 > 1024)
        throw error("STRATA_VK_MMA2_SHAPE must be BM:BN:WM:WN (multiples of 16, at most 32 warps), got '" + std::string(v) + "'");
      mma2_shape = {a, b, c, d};
      mma2_forced = true;
    }
    if (const char* v = std::getenv("STRATA_VK_MM3"); v && std::string_view(v) == "0") mm3 = false;
    if (const char* v = std::getenv("STRATA_VK_MM3_XF16"); v && std::string_view(v) == "0") mm3_xf16 = false;
    if (const char* v = std::getenv("STRATA_VK_MM3_SHAPE")) {
      unsigned a = 0, b = 0, c = 0, d = 0;
      if (std::sscanf(v, "%u:%u:%u:%u", &a, &b, &c, &d) != 4 || !c || !d || a % c || b % d || a % 16 || b % 16 ||
          c % 16 || d % 16 || a / c * (b / d) * 32 > 1024)
        throw error("STRATA_VK_MM3_SHAPE must be BM:BN:WM:WN (multiples of 16, at most 32 warps), got '" + std::string(v) + "'");
      mm3_shape = {a, b, c, d};
      mm3_forced = true;
    }
    if (const char* v = std::getenv("STRATA_VK_MMVQ_SHAPE")) {
      unsigned a = 0, b = 0, c = 0;
      if (std::sscanf(v, "%u:%u:%u", &a, &b, &c) != 3 || a < 32 || a > 1024 || b < 1 || b > 8 || c < 1 || c > 8)
        throw error("STRATA_VK_MMVQ_SHAPE must be WG:RPG:U (e.g. 64:2:2), got '" + std::string(v) + "'");
      mmvq_wg = a, mmvq_rpg = b, mmvq_u = c, mmvq_shape_forced = true;
    }
    pool = vk::raii::CommandPool(ctx.device(), vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer,
                                                                         ctx.queue_family()));
    fence = vk::raii::Fence(ctx.device(), vk::FenceCreateInfo());
    if (opt.profile) {
      if (!ctx.info().timestamps) throw error("GPU '" + ctx.info().name + "' has no timestamp queries: cannot profile");
      query_capacity = 16384;
      queries = vk::raii::QueryPool(ctx.device(), vk::QueryPoolCreateInfo({}, vk::QueryType::eTimestamp, query_capacity));
    }
  }

  std::uint32_t new_buffer(std::uint64_t bytes, memory_kind kind, const std::string& what) {
    buffers.emplace_back(ctx, bytes, kind, what);
    buffer_floats.push_back(bytes / 4);
    return std::uint32_t(buffers.size());
  }
  const gpu_buffer& buf(std::uint32_t id) const { return buffers.at(id - 1); }
  binding bind(const tensor& t, bool written) const {
    return {{buf(t.buf).handle(), 0, buf(t.buf).size(), t.buf}, written};
  }
  binding bind_id(std::uint32_t id, bool written) const { return {{buf(id).handle(), 0, buf(id).size(), id}, written}; }
  binding bind_weight(const weight& w) const {
    const auto& e = weights.at(w.id);
    return {{chunks.at(e.chunk).handle(), e.offset, e.bytes, 0}, false};
  }
  binding bind_step(std::uint64_t off, std::uint64_t bytes) const { return {{step.handle(), off, bytes, 0}, false}; }

  void dispatch(const pipeline_request& r, std::span<const binding> b, const void* pc, std::uint32_t pc_bytes,
                std::uint32_t gx, std::uint32_t gy = 1) {
    // Workgroup counts above the device limit (e.g. vocabulary rows) spill into z.
    const std::uint32_t lim = ctx.info().max_workgroups_x;
    std::uint32_t gz = 1;
    if (gx > lim) {
      gz = div_up(gx, lim);
      gx = div_up(gx, gz);
    }
    rec.dispatch(pipes.get(r), b, pc, pc_bytes, gx, gy, gz);
  }

  static bool same(const tensor& a, const tensor& b) {
    return a.buf == b.buf && a.off == b.off && a.rows == b.rows && a.cols == b.cols && a.stride == b.stride;
  }

  void record_norm(const pending_norm& n) {
    const rms_norm_pc pc{n.x.cols, n.x.off, n.x.stride, n.y.off, n.y.stride, n.eps, n.x.rows};
    const bool weighted = n.w != nullptr;
    std::vector<binding> b{weighted ? bind_weight(*n.w) : bind(n.x, false), bind(n.x, false), bind(n.y, true)};
    if (weighted) b.push_back(bind_weight(*n.w));
    dispatch(norm_req(weighted), b, &pc, sizeof pc, n.x.rows);
  }

  // Workgroup size, rows per lane group and units in flight per lane, per format and height,
  // from vk_matvec_bench on the H100 (bench/RESULTS.md): short matrices (the K/V projections)
  // keep one row per group so enough workgroups exist to fill the GPU; Q6_K's costlier units
  // want more rows per group on tall matrices; Q8_0 is load-bound and likes one row per group.
  struct mmvq_shape_t {
    std::uint32_t wg, rpg, u;
  };
  mmvq_shape_t mmvq_shape(gguf::type_id t, std::uint64_t n_rows) const {
    if (mmvq_shape_forced) return {mmvq_wg, mmvq_rpg, mmvq_u};
    const bool tall = n_rows >= 4096;
    if (t == gguf::type_id::q8_0) return {128, 1, 2};
    if (t == gguf::type_id::q6_k) return tall ? mmvq_shape_t{64, 4, 1} : mmvq_shape_t{64, 2, 2};
    return tall ? mmvq_shape_t{64, 2, 2} : mmvq_shape_t{128, 1, 2};
  }
  // Lane groups of 32 (one subgroup on NVIDIA), RPG rows per group.
  pipeline_request mmvq_req(gguf::type_id t, std::uint32_t nt, std::uint64_t n_rows, bool swiglu, bool residual,
                            bool ids, bool qout = false) const {
    auto [wgs, rpg, u] = qout ? mmvq_shape_t{256, 4, 1} : mmvq_shape(t, n_rows);  // QUANT_OUT: 32 rows a workgroup
    std::vector<std::pair<std::string, std::string>> d{{"MMVQ", "1"}, {"NEED_DOT4", "1"}, {"WG", std::to_string(wgs)},
                                                       {"LPR", "32"}, {"RPG", std::to_string(rpg)},
                                                       {"U", std::to_string(u)}, {"NT", std::to_string(nt)}};
    if (ctx.info().int_dot) d.emplace_back("HAS_DOT4", "1");
    if (ctx.info().subgroup_size == 32) d.emplace_back("SG_LPR", "1");
    if (swiglu) d.emplace_back("SWIGLU", "1");
    if (residual) d.emplace_back("ADD_RESIDUAL", "1");
    if (ids) d.emplace_back("MOE_IDS", "1");
    if (qout) d.emplace_back("QUANT_OUT", "1");
    return req("mmvq", t, std::move(d), 8);
  }
  std::uint32_t mmvq_rows_per_wg(const pipeline_request& r) const {
    std::uint32_t wgs = 0, rpg = 0;
    for (const auto& [k, v] : r.defines) {
      if (k == "WG") wgs = std::uint32_t(std::stoul(v));
      if (k == "RPG") rpg = std::uint32_t(std::stoul(v));
    }
    return wgs / 32 * rpg;
  }
  bool use_mmvq(const weight& w, std::uint32_t n) const {
    return mmvq && n < mm_min_tokens && has_mmvq(w.type) && w.ne[0] % 256 == 0;  // as int8_activations()
  }

  // Quantizes x (RMS-normalised with norm_w first, if given) into the xq/xs scratch, unless the
  // scratch already holds exactly that input.
  // Returns the slot.
  std::uint32_t quantize_input(const tensor& x, const weight* norm_w, float eps) {
    for (std::uint32_t sl = 0; sl < 2; ++sl)
      if (const auto& q = quantized[sl]; q && same(q->x, x) && q->norm_w == norm_w && q->eps == eps) return last_slot = sl;
    if (x.off % 4 || x.stride % 4)
      throw error("internal: quantized matmul input rows must start at multiples of 4 floats");
    if (x.cols > max_k || x.rows > max_q8_rows) throw error("internal: quantized input larger than its scratch");
    const std::uint32_t sl = last_slot ^ 1u;  // keep the slot read last (a gate/up pair may still need it)
    const quantize_pc pc{x.cols, x.off, x.stride, 0, max_k / 16, 0, max_k / 32, eps};
    const binding b[] = {bind(x, false), norm_w ? bind_weight(*norm_w) : bind(x, false), bind_id(xq[sl], true),
                         bind_id(xs[sl], true)};
    dispatch(quantize_req(norm_w != nullptr), b, &pc, sizeof pc, x.rows);
    quantized[sl] = quantized_input{x, norm_w, eps};
    return last_slot = sl;
  }
  pipeline_request quantize_req(bool norm) const {
    std::vector<std::pair<std::string, std::string>> d{{"WG", "128"}};
    if (norm) d.emplace_back("NORM", "1");
    return req("quantize_q8", {}, std::move(d), 4);
  }

  // A recorded matmul wrote y outside prepare(): forget what y's buffer held.
  void wrote(const tensor& y) {
    for (auto& q : quantized)
      if (q && q->x.buf == y.buf) q.reset();
    std::erase_if(dropped, [&](const tensor& d) { return d.buf == y.buf; });
  }

  void record_mmvq(const pending_matmul& m) {
    const weight& w = *m.w;
    const std::uint32_t n = m.x.rows;
    const std::uint32_t nt = n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1;
    const std::uint32_t sl = m.norm ? quantize_input(m.norm->x, m.norm->w, m.norm->eps) : quantize_input(m.x, nullptr, 0.0f);
    mmvq_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), n, std::uint32_t(w.row_bytes), 0, max_k / 16, 0, max_k / 32,
               m.y.off, m.y.stride, 0, 0, 0, 0, 0, 1};
    binding wb = bind_weight(w);
    if (m.up) {  // one binding over gate .. up (same chunk, up after gate)
      const auto& g = weights.at(w.id);
      const auto& u = weights.at(m.up->id);
      wb.range.bytes = u.offset + u.bytes - g.offset;
      pc.up_off = std::uint32_t(u.offset - g.offset);
    }
    if (m.residual) {
      pc.r_off = m.residual->off;
      pc.r_stride = m.residual->stride;
    }
    // A SwiGLU output is only ever a matvec input: quantize it in the same dispatch, into the
    // other slot, when a workgroup owns whole 32-row blocks of it.
    const bool qout = quant_out && m.up && !m.residual && w.ne[1] % 32 == 0 && m.y.off % 4 == 0 && m.y.stride % 4 == 0 &&
                      m.y.cols <= max_k;
    const std::uint32_t so = sl ^ 1u;
    const binding b[] = {wb, bind_id(xq[sl], false), bind_id(xs[sl], false), bind(m.y, true),
                         m.residual ? bind(*m.residual, false) : bind(m.y, false), bind_id(xq[sl], false),
                         bind_id(xq[so], qout), bind_id(xs[so], qout)};
    const auto r = mmvq_req(w.type, nt, w.ne[1], m.up != nullptr, m.residual.has_value(), false, qout);
    dispatch(r, b, &pc, sizeof pc, div_up(w.ne[1], mmvq_rows_per_wg(r)), div_up(n, nt));
    wrote(m.y);
    if (qout) {
      quantized[so] = quantized_input{m.y, nullptr, 0.0f};
      last_slot = sl;  // the next quantize goes to the other slot than the one just read
    }
  }

  void record_matmul(const pending_matmul& m) {
    const weight& w = *m.w;
    const std::uint32_t n = m.x.rows;
    const std::uint32_t nt = n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1;
    if (n >= mm_min_tokens && !m.norm && !m.up && !m.residual && w.ne[0] % 32 == 0) return record_mul_mm(m);
    if (use_mmvq(w, n)) return record_mmvq(m);
    const tensor& x = m.norm ? m.norm->x : m.x;
    if (x.off % 4 || x.stride % 4)  // the kernel reads x as vec4
      throw error("matmul '" + std::string(w.name) + "': input rows must start at multiples of 4 floats");
    matvec_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), n, std::uint32_t(w.row_bytes), x.off, x.stride,
                 m.y.off, m.y.stride, 0, 1, 0, 0, 0, 0, m.norm ? m.norm->eps : 0.0f};
    binding wb = bind_weight(w);
    if (m.up) {  // one binding over gate .. up (same chunk, up after gate)
      const auto& g = weights.at(w.id);
      const auto& u = weights.at(m.up->id);
      wb.range.bytes = u.offset + u.bytes - g.offset;
      pc.up_off = std::uint32_t(u.offset - g.offset);
    }
    if (m.residual) {
      pc.r_off = m.residual->off;
      pc.r_stride = m.residual->stride;
    }
    const binding b[] = {wb, bind(x, false), bind(m.y, true), bind(x, false),
                         m.norm ? bind_weight(*m.norm->w) : bind(x, false), m.residual ? bind(*m.residual, false) : bind(x, false)};
    std::vector<std::pair<std::string, std::string>> d{
        {"NR", std::to_string(rows_for(w.ne[1]))}, {"NT", std::to_string(nt)}, {"WG", std::to_string(mv_wg)}};
    if (m.norm) d.emplace_back("NORM_INPUT", "1");
    if (m.up) d.emplace_back("SWIGLU", "1");
    if (m.residual) d.emplace_back("ADD_RESIDUAL", "1");
    dispatch(req("matvec", w.type, std::move(d), 6), b, &pc, sizeof pc, div_up(w.ne[1], rows_for(w.ne[1])), div_up(n, nt));
    wrote(m.y);
  }

  // Prefill: tiles of 64 weight rows x 64 tokens (mul_mm.glsl).
  void record_mul_mm(const pending_matmul& m) {
    const weight& w = *m.w;
    if (m.x.off % 4 || m.x.stride % 4)
      throw error("matmul '" + std::string(w.name) + "': input rows must start at multiples of 4 floats");
    const matvec_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), m.x.rows, std::uint32_t(w.row_bytes), m.x.off,
                       m.x.stride, m.y.off, m.y.stride, 0, 0, 0, 0, 0, 0, 0.0f};
    if (coopmat && mm3 && w.ne[0] % 16 == 0 && (mm_scratch || w.type == gguf::type_id::f16)) return record_mul_mm_f16(m);
    const binding b[] = {bind_weight(w), bind(m.x, false), bind(m.y, true)};
    if (coopmat && mma2) {
      const mma2_tile t = mma2_tile_for(w.ne[1], m.x.rows);
      dispatch(mma2_req(w.type, t), b, &pc, sizeof pc, div_up(w.ne[1], t.bm), div_up(m.x.rows, t.bn));
    } else {
      dispatch(mul_mm_req(w.type), b, &pc, sizeof pc, div_up(w.ne[1], 64), div_up(m.x.rows, 64));
    }
    wrote(m.y);
  }
  // Tensor-core GEMM over f16 weights: an F16 matrix is read in place; any other format is
  // expanded into the scratch a slice of rows at a time (the recorder orders each expansion
  // after the previous slice's GEMM has read the scratch).
  void record_mul_mm_f16(const pending_matmul& m) {
    const weight& w = *m.w;
    const std::uint32_t K = std::uint32_t(w.ne[0]), N = std::uint32_t(w.ne[1]), n = m.x.rows;
    const mma2_tile t = mm3_tile_for(n);
    const bool xf16 = mm_xh && K <= mm_xh_cols && n <= max_rows && K % 8 == 0;
    const pipeline_request g = mm3_req(t, xf16);
    std::uint32_t x_off = m.x.off, x_stride = m.x.stride;
    binding xb = bind(m.x, false);
    if (xf16) {
      const copy_rows_pc cp{K, m.x.off, m.x.stride, 0, K / 8};
      const binding cb[] = {bind(m.x, false), bind(m.x, false), bind_id(mm_xh, true)};
      dispatch(req("copy_rows", {}, {{"WG", "128"}, {"TO_F16", "1"}}, 3), cb, &cp, sizeof cp, div_up(K / 8, 128), n);
      x_off = 0, x_stride = K;
      xb = bind_id(mm_xh, false);
    }
    if (w.type == gguf::type_id::f16) {  // weights start section_align (256 bytes) apart
      const mm_f16_pc pc{K, N, n, 0, x_off, x_stride, m.y.off, m.y.stride};
      const binding b[] = {bind_weight(w), xb, bind(m.y, true)};
      dispatch(g, b, &pc, sizeof pc, div_up(N, t.bm), div_up(n, t.bn));
      wrote(m.y);
      return;
    }
    const std::uint32_t slice = std::uint32_t(std::max<std::uint64_t>(128, mm_scratch_halves / K / 128 * 128));
    for (std::uint32_t r0 = 0; r0 < N; r0 += slice) {
      const std::uint32_t rows = std::min(slice, N - r0);
      const dequant_f16_pc dq{K, std::uint32_t(w.row_bytes), r0, rows, 0};
      const binding db[] = {bind_weight(w), bind_id(mm_scratch, true)};
      dispatch(dequant_req(w.type), db, &dq, sizeof dq, div_up(std::uint64_t(rows) * (K / 16), 256));
      const mm_f16_pc pc{K, rows, n, 0, x_off, x_stride, m.y.off + r0, m.y.stride};
      const binding b[] = {bind_id(mm_scratch, false), xb, bind(m.y, true)};
      dispatch(g, b, &pc, sizeof pc, div_up(rows, t.bm), div_up(n, t.bn));
    }
    wrote(m.y);
  }
  // Tile per batch width, from vk_matvec_bench on the H100 (bench/RESULTS.md): 128 x 128 with
  // 32 x 64 per warp from 128 tokens on, even where that leaves fewer workgroups than SMs
  // (qwen3-8b pp512 4,281 vs 3,777 t/s with 128 x 64 tiles there); narrower tiles below.
  static constexpr mma2_tile mm3_tiles[] = {{128, 128, 32, 64}, {64, 64, 32, 32}, {64, 32, 32, 16}, {64, 16, 16, 16}};
  mma2_tile mm3_tile_for(std::uint32_t tokens) const {
    if (mm3_forced) return mm3_shape;
    for (const mma2_tile t : mm3_tiles)
      if (tokens >= t.bn) return t;
    return mm3_tiles[std::size(mm3_tiles) - 1];
  }
  pipeline_request mm3_req(const mma2_tile& s, bool xf16) const {
    std::vector<std::pair<std::string, std::string>> d{
        {"WG", std::to_string(s.bm / s.wm * (s.bn / s.wn) * 32)}, {"COOPMAT", "1"}, {"BM", std::to_string(s.bm)},
        {"BN", std::to_string(s.bn)}, {"WM", std::to_string(s.wm)}, {"WN", std::to_string(s.wn)}, {"BK", "32"}};
    if (xf16) d.emplace_back("X_F16", "1");
    return req("mul_mm_f16", gguf::type_id::f16, std::move(d), 3);
  }
  static pipeline_request dequant_req(gguf::type_id t) { return req("dequant_f16", t, {{"WG", "256"}}, 2); }
  // Tensor-core tiles (mul_mm.glsl MMA2): the largest tile that still gives the GPU a few
  // hundred workgroups (STRATA_VK_MMA2_SHAPE=BM:BN:WM:WN forces one).
  mma2_tile mma2_tile_for(std::uint64_t n_rows, std::uint32_t tokens) const {
    if (mma2_forced) return mma2_shape;
    for (const mma2_tile t : {mma2_tile{128, 128, 64, 32}, mma2_tile{128, 64, 64, 32}, mma2_tile{64, 64, 32, 32}})
      if (std::uint64_t(div_up(n_rows, t.bm)) * div_up(tokens, t.bn) >= 256) return t;
    return {64, 64, 32, 32};
  }
  pipeline_request mma2_req(gguf::type_id t, const mma2_tile& s) const {
    return req("mul_mm", t,
               {{"WG", std::to_string(s.bm / s.wm * (s.bn / s.wn) * 32)}, {"COOPMAT", "1"}, {"MMA2", "1"},
                {"BM", std::to_string(s.bm)}, {"BN", std::to_string(s.bn)}, {"WM", std::to_string(s.wm)},
                {"WN", std::to_string(s.wn)}},
               3);
  }
  pipeline_request mul_mm_req(gguf::type_id t) const {
    if (coopmat) return req("mul_mm", t, {{"WG", "128"}, {"COOPMAT", "1"}}, 3);
    return req("mul_mm", t, {{"WG", "128"}}, 3);
  }

  void flush_mats() {
    for (const auto& m : mats) record_matmul(m);
    mats.clear();
  }

  // Before an op that reads `reads` and writes `writes` (buffer ids) is recorded: deferred
  // matmuls go first; a pending norm is dispatched when its result is read, and dropped when
  // its input or output is overwritten first (then its result is never needed).
  void prepare(std::initializer_list<tensor> reads, std::initializer_list<tensor> writes) {
    flush_mats();
    flush_combine();
    if (!keep_heads) flush_heads();
    for (const auto& r : reads)
      for (const auto& d : dropped)
        if (r.buf == d.buf) throw error("internal: Vulkan backend read a normalised tensor it had dropped");
    for (std::size_t i = 0; i < norms.size();) {
      bool read = false, overwritten = false;
      for (const auto& r : reads) read |= r.buf == norms[i].y.buf;
      for (const auto& w : writes) overwritten |= w.buf == norms[i].x.buf || w.buf == norms[i].y.buf;
      if (read) {
        record_norm(norms[i]);
        norms.erase(norms.begin() + std::ptrdiff_t(i));
      } else if (overwritten) {
        dropped.push_back(norms[i].y);
        norms.erase(norms.begin() + std::ptrdiff_t(i));
      } else {
        ++i;
      }
    }
    for (const auto& w : writes) {
      std::erase_if(dropped, [&](const tensor& d) { return d.buf == w.buf; });
      for (auto& q : quantized)
        if (q && q->x.buf == w.buf) q.reset();
    }
  }
  void flush_all() {
    flush_mats();
    flush_combine();
    flush_heads();
    for (const auto& n : norms) record_norm(n);
    norms.clear();
    dropped.clear();
  }

  void record_rope(const tensor& x, std::uint32_t n_heads, const graph::rope_params& rp, const weight* ff) {
    const rope_pc pc{x.rows, n_heads, rp.n_rot, x.cols / n_heads, x.off, x.stride, rp.base, rp.freq_scale,
                     rp.neox ? 1u : 0u, ff ? 1u : 0u};
    const binding b[] = {bind(x, true), bind(x, true), bind_step(off_pos, std::uint64_t(max_rows) * 4),
                         ff ? bind_weight(*ff) : bind(x, true)};
    dispatch(req("rope", {}, {}, 4), b, &pc, sizeof pc, div_up(std::uint64_t(x.rows) * n_heads * (rp.n_rot / 2), wg));
  }
  void record_temperature(const tensor& q, const graph::position_scale_params& ps) {
    const temperature_pc pc{q.rows, q.cols, q.off, q.stride, float(ps.scale), ps.floor_base};
    const binding b[] = {bind(q, true), bind(q, true), bind_step(off_pos, std::uint64_t(max_rows) * 4)};
    dispatch(req("temperature", {}, {}, 3), b, &pc, sizeof pc, div_up(q.cols, wg), q.rows);
  }
  // The pending entry of `parent` (created if new). n_heads 0: the op does not say (temperature).
  head_tensor& head_entry(const tensor& parent, std::uint32_t n_heads) {
    for (auto& h : heads)
      if (h.t.buf == parent.buf && h.t.off == parent.off) {
        if (n_heads) h.n_heads = n_heads;
        return h;
      }
    heads.push_back({parent, n_heads, {}});
    return heads.back();
  }
  // Records every deferred head op on its own, in the order it was asked for.
  void flush_heads() {
    std::vector<head_tensor> hs;
    hs.swap(heads);
    for (const auto& h : hs)
      for (const auto& op : h.ops) {
        switch (op.kind) {  // norms come with their head count (n_heads 0 only for temperature)
          case head_op::norm_w: record_norm({h.t.split_rows(h.n_heads), h.t.split_rows(h.n_heads), op.w, op.eps}); break;
          case head_op::norm: record_norm({h.t.split_rows(h.n_heads), h.t.split_rows(h.n_heads), nullptr, op.eps}); break;
          case head_op::rope: record_rope(h.t, h.n_heads, op.rp, op.ff); break;
          case head_op::temp: record_temperature(h.t, op.ps); break;
        }
      }
  }
  // attn_prep flag bits of one side's ops, if its order is the kernel's (weighted norm, RoPE,
  // plain norm, temperature) and its norms / RoPE agree with the other side's.
  std::optional<std::uint32_t> head_flags(const head_tensor& h, std::optional<float>& eps, std::optional<head_op>& rope,
                                          std::optional<graph::position_scale_params>& temp) const {
    std::uint32_t flags = 0, stage = 0;
    for (const auto& op : h.ops) {
      const std::uint32_t bit = op.kind == head_op::norm_w ? 1u : op.kind == head_op::rope ? 2u : op.kind == head_op::norm ? 4u : 8u;
      if (bit <= stage) return std::nullopt;  // out of the kernel's order, or repeated
      stage = bit;
      flags |= bit;
      if (op.kind == head_op::norm_w || op.kind == head_op::norm) {
        if (eps && *eps != op.eps) return std::nullopt;
        eps = op.eps;
      }
      if (op.kind == head_op::rope) {
        if (rope && (rope->rp.neox != op.rp.neox || rope->rp.n_rot != op.rp.n_rot || rope->rp.base != op.rp.base ||
                     rope->rp.freq_scale != op.rp.freq_scale || rope->ff != op.ff))
          return std::nullopt;
        rope = op;
      }
      if (op.kind == head_op::temp) {
        if (temp && (float(temp->scale) != float(op.ps.scale) || temp->floor_base != op.ps.floor_base)) return std::nullopt;
        temp = op.ps;
      }
    }
    return flags;
  }
  // kv_store() with the deferred Q/K head ops folded in; false when they cannot be fused.
  bool record_attn_prep(const kv_state& kv, std::uint32_t layer, const tensor& k, const tensor& v) {
    const auto& cfg = kv.config();
    const std::uint32_t D = cfg.head_dim;
    if (D > 256 || D % 2 || k.cols != cfg.n_head_kv * D || v.cols != k.cols) return false;
    const head_tensor* kh = nullptr;
    const head_tensor* qh = nullptr;
    for (const auto& h : heads) {
      if (h.t.buf == k.buf && h.t.off == k.off) kh = &h;
      else if (qh) return false;  // more than one other pending tensor
      else qh = &h;
    }
    std::optional<float> eps;
    std::optional<head_op> rope;
    std::optional<graph::position_scale_params> temp;
    const std::uint32_t kf = kh ? head_flags(*kh, eps, rope, temp).value_or(~0u) : 0u;
    const std::uint32_t qf = qh ? head_flags(*qh, eps, rope, temp).value_or(~0u) : 0u;
    if (kf == ~0u || qf == ~0u) return false;
    if (kh && (kh->n_heads != cfg.n_head_kv || kh->t.rows != k.rows)) return false;
    if (qh && (qh->t.cols % D || (qh->n_heads && qh->t.cols / D != qh->n_heads) || qh->t.rows != k.rows)) return false;
    const weight* qw = nullptr;
    const weight* kw = nullptr;
    if (qh)
      for (const auto& op : qh->ops)
        if (op.kind == head_op::norm_w) qw = op.w;
    if (kh)
      for (const auto& op : kh->ops)
        if (op.kind == head_op::norm_w) kw = op.w;
    const graph::rope_params r = rope ? rope->rp : graph::rope_params{};
    const weight* ff = rope ? rope->ff : nullptr;
    const graph::position_scale_params ts = temp.value_or(graph::position_scale_params{});
    const std::uint32_t n_q = qh ? qh->t.cols / D : 0;
    const auto& ring = kv.window_ring();
    const attn_prep_pc pc{n_q, cfg.n_head_kv, D, r.n_rot, qh ? qh->t.off : 0, qh ? qh->t.stride : 0, k.off, k.stride,
                          v.off, v.stride, r.base, r.freq_scale, eps.value_or(0.0f),
                          qf | kf << 8 | (r.neox ? 1u << 16 : 0u) | (ff ? 1u << 17 : 0u), ring.rows, float(ts.scale),
                          ts.floor_base};
    const std::uint64_t B4 = std::uint64_t(max_rows) * 4;
    const binding dummy = bind(k, false);
    const binding b[] = {qh ? bind(qh->t, true) : dummy,
                         bind(k, false),
                         bind(v, false),
                         qw ? bind_weight(*qw) : dummy,
                         kw ? bind_weight(*kw) : dummy,
                         bind_id(kv.k_buffer(layer), true),
                         bind_id(kv.v_buffer(layer), true),
                         bind_step(off_slots, B4),
                         bind_step(off_pos, B4),
                         ff ? bind_weight(*ff) : dummy,
                         // compressed cache: the f16 ring of the window, its tags, the step's sequences
                         ring.rows && ring.k[layer] ? bind_id(ring.k[layer], true) : dummy,
                         ring.rows && ring.v[layer] ? bind_id(ring.v[layer], true) : dummy,
                         ring.rows ? bind_id(ring.tags[layer], true) : dummy,
                         bind_step(off_seq_row, B4)};
    if (kv.compressed()) {  // K and V encoded as kv_store_q does (kv_encode.glsl)
      dispatch(req("attn_prep", {}, kv_encode_defs(kv), 14), b, &pc, sizeof pc, n_q + cfg.n_head_kv, k.rows);
    } else {
      dispatch(req("attn_prep", {}, kv_defs(cfg), 10), std::span(b).first(10), &pc, sizeof pc, n_q + cfg.n_head_kv, k.rows);
    }
    if (kh && !kh->ops.empty()) dropped.push_back(k);  // k itself was not rewritten: reading it is a bug
    heads.clear();
    return true;
  }

  void record_combine(const pending_combine& c, const tensor* residual) {
    moe_pc pc = c.pc;
    if (residual) {
      pc.r_off = residual->off;
      pc.r_stride = residual->stride;
    }
    const binding b[] = {bind_id(moe_ids, false), bind_id(moe_ids, false), bind_id(moe_wts, false),
                         bind(c.y, false), bind(c.out, true), residual ? bind(*residual, false) : bind(c.y, false)};
    std::vector<std::pair<std::string, std::string>> d{{"MOE_COMBINE", "1"}};
    if (residual) d.emplace_back("RESIDUAL", "1");
    dispatch(req("moe", {}, std::move(d), 6), b, &pc, sizeof pc, div_up(c.out.cols, wg), c.out.rows);  // as moe_req
  }
  void flush_combine() {
    if (!combine) return;
    const pending_combine c = *combine;
    combine.reset();
    record_combine(c, nullptr);
  }

  // Experts' matvec by id (mmvq.glsl MOE_IDS): workgroup row y is a (token, slot) pair reading
  // its token's int8 row (pair / in_div) of slot `sl`; with `up`, gate and up of the same expert
  // in one dispatch (SWIGLU), and with qout its output quantized into the other slot.
  void record_mmvq_ids(const weight& w, const weight* up, std::uint32_t sl, std::uint32_t in_div, std::uint32_t pairs,
                       const tensor& y, bool qout) {
    mmvq_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), pairs, std::uint32_t(w.row_bytes), 0, max_k / 16, 0,
               max_k / 32, y.off, y.stride, 0, 0, 0, std::uint32_t(w.row_bytes * w.ne[1]), 0, in_div};
    binding wb = bind_weight(w);
    if (up) {
      const auto& g = weights.at(w.id);
      const auto& u = weights.at(up->id);
      wb.range.bytes = u.offset + u.bytes - g.offset;
      pc.up_off = std::uint32_t(u.offset - g.offset);
    }
    const std::uint32_t so = sl ^ 1u;
    const binding b[] = {wb, bind_id(xq[sl], false), bind_id(xs[sl], false), bind(y, true), bind(y, false),
                         bind_id(moe_ids, false), bind_id(xq[so], qout), bind_id(xs[so], qout)};
    const auto r = mmvq_req(w.type, 1, w.ne[1], up != nullptr, false, true, qout);
    dispatch(r, b, &pc, sizeof pc, div_up(w.ne[1], mmvq_rows_per_wg(r)), pairs);
    wrote(y);
    if (qout) {
      quantized[so] = quantized_input{y, nullptr, 0.0f};
      last_slot = sl;
    }
  }
  // Gate and up expert slabs bindable as one range (up after gate, same chunk and layout).
  bool adjacent(const weight& g, const weight& u) const {
    const auto& ge = weights.at(g.id);
    const auto& ue = weights.at(u.id);
    return g.type == u.type && g.row_bytes == u.row_bytes && g.ne[1] == u.ne[1] && g.ne[2] == u.ne[2] &&
           ge.chunk == ue.chunk && ue.offset > ge.offset && ue.offset - ge.offset < (1ull << 32);
  }

  // A 3-D grid whose dimensions all fit the device limits.
  void dispatch3(const pipeline_request& r, std::span<const binding> b, const void* pc, std::uint32_t pc_bytes,
                 std::uint32_t gx, std::uint32_t gy, std::uint32_t gz) {
    rec.dispatch(pipes.get(r), b, pc, pc_bytes, gx, gy, gz);
  }

  static pipeline_request req(std::string shader, std::optional<gguf::type_id> fmt,
                              std::vector<std::pair<std::string, std::string>> defs, std::uint32_t bindings) {
    return {std::move(shader), fmt, std::move(defs), bindings};
  }
  pipeline_request matvec_req(gguf::type_id t, std::uint32_t nt, bool ids, std::uint64_t n_rows) const {
    std::vector<std::pair<std::string, std::string>> d{
        {"NR", std::to_string(rows_for(n_rows))}, {"NT", std::to_string(nt)}, {"WG", std::to_string(mv_wg)}};
    if (ids) d.emplace_back("MOE_IDS", "1");
    return req("matvec", t, std::move(d), ids ? 4 : 3);
  }
  static pipeline_request elementwise_req(const char* op) { return req("elementwise", {}, {{op, "1"}}, 4); }
  static pipeline_request copy_req(bool indexed) {
    return indexed ? req("copy_rows", {}, {{"INDEXED", "1"}}, 4) : req("copy_rows", {}, {}, 3);
  }
  static pipeline_request norm_req(bool weighted) {
    return weighted ? req("rms_norm", {}, {{"HAS_NORM_WEIGHT", "1"}}, 4) : req("rms_norm", {}, {}, 3);
  }
  static pipeline_request moe_req(const char* stage, bool sigmoid = false) {
    std::vector<std::pair<std::string, std::string>> d{{stage, "1"}};
    if (sigmoid) d.emplace_back("ROUTER_SIGMOID", "1");
    return req("moe", {}, std::move(d), 6);  // binding 5: COMBINE RESIDUAL
  }
  static std::vector<std::pair<std::string, std::string>> kv_defs(const kv::kv_config& c) {
    std::vector<std::pair<std::string, std::string>> d;
    if (c.type_k == kv::kv_type::f32) d.emplace_back("KV_K_F32", "1");
    if (c.type_v == kv::kv_type::f32) d.emplace_back("KV_V_F32", "1");
    return d;
  }
  // kv_store_q / attention_q: kinds, head_dim, TurboQuant bits per side, the window ring.
  static std::vector<std::pair<std::string, std::string>> kvq_defs(const kv_state& kv) {
    const auto& c = kv.config();
    std::vector<std::pair<std::string, std::string>> d{{"KV_D", std::to_string(c.head_dim)},
                                                       {"KV_K_KIND", std::to_string(kv_kind(c.type_k))},
                                                       {"KV_V_KIND", std::to_string(kv_kind(c.type_v))}};
    if (const auto b = kv::turboquant_bits(c.type_k)) d.emplace_back("KV_K_TQ", std::to_string(b));
    if (const auto b = kv::turboquant_bits(c.type_v)) d.emplace_back("KV_V_TQ", std::to_string(b));
    if (kv.window_ring().rows) d.emplace_back("KV_RING", "1");
    return d;
  }
  // kv_store_q and attn_prep over a compressed cache: kvq_defs and the encoder (kv_encode.glsl).
  static std::vector<std::pair<std::string, std::string>> kv_encode_defs(const kv_state& kv) {
    auto d = kvq_defs(kv);
    d.emplace_back("KV_ENCODE", "1");
    return d;
  }
};

backend::backend(const backend_options& opt) : p_(std::make_unique<impl>(opt)) {}
backend::~backend() = default;

std::string backend::description() const {
  const auto& i = p_->ctx.info();
  return "vulkan (" + i.name + ", " + i.driver + ", subgroup " + std::to_string(i.subgroup_size) + ")";
}
bool backend::is_cpu_device() const { return p_->ctx.info().is_cpu; }
const startup_stats& backend::startup() const noexcept { return p_->stats; }
std::uint32_t backend::dispatches_per_step() const { return p_->last_dispatches; }
bool backend::int8_activations(gguf::type_id t, std::uint64_t K, std::uint32_t tokens) const {
  return p_->mmvq && tokens < mm_min_tokens && has_mmvq(t) && K % 256 == 0;
}

bool backend::tensor_core_attention(std::uint32_t tokens, std::uint32_t head_dim, kv::kv_type k, kv::kv_type v) const {
  return p_->coopmat && p_->flash_attention && tokens >= flash_min_tokens &&
         (head_dim == 64 || head_dim == 128) && k == kv::kv_type::f16 && v == kv::kv_type::f16;
}

std::vector<kernel_time> backend::profile() const {
  std::vector<kernel_time> out;
  for (const auto& [k, v] : p_->prof) out.push_back(v);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.total_ms > b.total_ms; });
  return out;
}
void backend::reset_profile() { p_->prof.clear(); }

buffer backend::alloc(std::uint32_t rows, std::uint32_t cols) {
  const std::uint32_t id = p_->new_buffer(std::uint64_t(rows) * cols * 4, memory_kind::device,
                                          "activations " + std::to_string(rows) + "x" + std::to_string(cols));
  return buffer(id, rows, cols);
}

weight backend::load(const gguf::tensor_info& t) {
  if (!gpu_supports(t.type))
    throw error("tensor '" + std::string(t.name) + "' has type " + std::string(gguf::name_of(t.type)) +
                ", which the Vulkan backend does not support");
  if (t.ne[1] > 1 && t.ne[0] % 16 != 0)  // matrices (vectors: norms, rope_freqs are read per element)
    throw error("tensor '" + std::string(t.name) + "' has rows of " + std::to_string(t.ne[0]) +
                " elements; the Vulkan kernels need a multiple of 16");
  weight w;
  w.id = std::uint32_t(p_->weights.size());
  w.type = t.type;
  for (int d = 0; d < 4; ++d) w.ne[d] = t.ne[d];
  w.row_bytes = t.row_bytes();
  w.name = t.name;
  p_->weights.push_back({&t, 0, 0, t.data.size()});
  return w;
}

void backend::reserve(std::uint32_t max_tokens, std::uint32_t max_routed) {
  auto& P = *p_;
  if (P.uploaded) return;
  const auto& info = P.ctx.info();
  // Weights: pack into chunks the device can bind whole, check they fit, upload.
  const std::uint64_t limit = std::min<std::uint64_t>({info.max_storage_range, info.max_allocation, 2ull << 30});
  arena_layout layout(limit, std::max<std::uint64_t>(section_align, info.min_storage_align));
  std::uint64_t total = 0;
  for (auto& e : P.weights) {
    const auto pl = layout.place(e.bytes, std::string(e.info->name));
    e.chunk = pl.chunk;
    e.offset = pl.offset;
    total += e.bytes;
  }
  if (info.device_local_bytes && total > info.device_local_bytes)
    throw error("model weights need " + gib(total) + " of GPU memory but '" + info.name + "' has " +
                gib(info.device_local_bytes) + "; use -ngl to keep some layers on the CPU, or --backend cpu");
  const auto t0 = clock_type::now();
  for (std::size_t c = 0; c < layout.chunk_sizes().size(); ++c)
    P.chunks.emplace_back(P.ctx, layout.chunk_sizes()[c], memory_kind::device, "weights (chunk " + std::to_string(c) + ")");
  {
    uploader up(P.ctx);
    std::uint64_t done = 0;
    for (const auto& e : P.weights) {
      up.copy(e.info->data, P.chunks[e.chunk].handle(), e.offset);
      if (P.opt.progress) P.opt.progress({"upload", done += e.bytes, total, "bytes"});
    }
    up.flush();
  }
  P.stats.upload_ms = ms_since(t0);
  P.stats.weight_bytes = total;
  P.uploaded = true;
  P.max_rows = max_tokens;
  P.max_q8_rows = std::max(max_tokens, max_routed);  // an MoE step quantizes token x expert rows

  // Pipelines every model needs, plus per-format matvecs, built in parallel now.
  std::vector<pipeline_request> reqs;
  std::set<gguf::type_id> mat_formats, id_formats;
  for (const auto& e : P.weights) {
    const auto* t = e.info;
    if (t->ne[2] > 1) id_formats.insert(t->type);
    else if (t->ne[1] > 1) mat_formats.insert(t->type);
    if (t->name == "token_embd.weight") reqs.push_back(impl::req("get_rows", t->type, {}, 3));
  }
  // Decode-shaped matvecs (one token) in the variants fusion produces; other token counts are
  // built on first use (and cached on disk like the rest).
  std::set<std::pair<gguf::type_id, std::uint32_t>> mat_shapes;
  for (const auto& e : P.weights)
    if (e.info->ne[2] == 1 && e.info->ne[1] > 1) mat_shapes.insert({e.info->type, P.rows_for(e.info->ne[1])});
  for (const auto& [f, nr] : mat_shapes)
    for (const auto& v : std::vector<std::vector<std::pair<std::string, std::string>>>{
             {}, {{"NORM_INPUT", "1"}}, {{"NORM_INPUT", "1"}, {"SWIGLU", "1"}}, {{"ADD_RESIDUAL", "1"}}}) {
      if (!P.fuse && !v.empty()) continue;
      std::vector<std::pair<std::string, std::string>> d{
          {"NR", std::to_string(nr)}, {"NT", "1"}, {"WG", std::to_string(P.mv_wg)}};
      d.insert(d.end(), v.begin(), v.end());
      reqs.push_back(impl::req("matvec", f, std::move(d), 6));
    }
  // f16 scratch of the tensor-core GEMM: the largest matrix the tiled path multiplies, at most
  // 64 Mi halves (bigger ones are expanded a slice of rows at a time).
  if (P.coopmat && P.mm3) {
    std::uint64_t most = 0;
    for (const auto& e : P.weights)
      if (e.info->ne[2] == 1 && e.info->ne[1] > 1 && e.info->ne[0] % 16 == 0 && e.info->type != gguf::type_id::f16)
        most = std::max<std::uint64_t>(most, std::uint64_t(e.info->ne[0]) * e.info->ne[1]);
    if (most) {
      P.mm_scratch_halves = std::min<std::uint64_t>(most, 64ull << 20);
      P.mm_scratch = P.new_buffer(P.mm_scratch_halves * 2, memory_kind::device, "f16 weight scratch (prefill)");
      for (auto f : mat_formats)
        if (f != gguf::type_id::f16) reqs.push_back(impl::dequant_req(f));
    }
    std::uint32_t widest = 0;
    for (const auto& e : P.weights)
      if (e.info->ne[2] == 1 && e.info->ne[1] > 1 && e.info->ne[0] % 16 == 0)
        widest = std::max<std::uint32_t>(widest, std::uint32_t(e.info->ne[0]));
    if (P.mm3_xf16 && widest) {
      P.mm_xh_cols = widest;
      P.mm_xh = P.new_buffer(std::uint64_t(P.max_rows) * widest * 2, memory_kind::device, "f16 activations (prefill GEMM)");
      reqs.push_back(impl::req("copy_rows", {}, {{"WG", "128"}, {"TO_F16", "1"}}, 3));
    }
    for (const mma2_tile t : impl::mm3_tiles) reqs.push_back(P.mm3_req(P.mm3_forced ? P.mm3_shape : t, P.mm_xh != 0));
  }
  for (auto f : mat_formats) {
    reqs.push_back(P.mul_mm_req(f));
    if (P.coopmat && P.mma2)
      for (const mma2_tile t : {mma2_tile{128, 128, 64, 32}, mma2_tile{128, 64, 64, 32}, mma2_tile{64, 64, 32, 32}})
        reqs.push_back(P.mma2_req(f, P.mma2_forced ? P.mma2_shape : t));
  }
  // Integer matvec: scratch for one quantized input, decode-shaped pipelines per format.
  for (const auto& e : P.weights)
    if (has_mmvq(e.info->type) && e.info->ne[1] > 1) P.max_k = std::max<std::uint32_t>(P.max_k, std::uint32_t(e.info->ne[0]));
  if (P.mmvq && P.max_k) {
    P.max_k = (P.max_k + 255) / 256 * 256;
    for (int sl = 0; sl < 2; ++sl) {
      P.xq[sl] = P.new_buffer(std::uint64_t(P.max_q8_rows) * P.max_k, memory_kind::device, "int8 activations");
      P.xs[sl] = P.new_buffer(std::uint64_t(P.max_q8_rows) * P.max_k / 32 * 16, memory_kind::device, "int8 activation scales");
    }
    for (bool norm : {false, true}) reqs.push_back(P.quantize_req(norm));
    for (const auto& e : P.weights)
      if (has_mmvq(e.info->type) && e.info->ne[2] == 1 && e.info->ne[1] > 1)
        for (int v = 0; v < 3; ++v)
          reqs.push_back(P.mmvq_req(e.info->type, 1, e.info->ne[1], v == 1, v == 2, false,
                                    v == 1 && P.quant_out && e.info->ne[1] % 32 == 0));
  }
  for (const auto& e : P.weights)
    if (e.info->ne[2] > 1) reqs.push_back(P.matvec_req(e.info->type, 1, true, e.info->ne[1]));
  if (!id_formats.empty()) {
    reqs.push_back(impl::moe_req("MOE_TOPK"));
    reqs.push_back(impl::moe_req("MOE_TOPK", true));
    reqs.push_back(impl::moe_req("MOE_GATHER"));
    reqs.push_back(impl::moe_req("MOE_COMBINE"));
    reqs.push_back(impl::req("moe", {}, {{"MOE_COMBINE", "1"}, {"RESIDUAL", "1"}}, 6));
    if (P.mmvq && P.max_k) reqs.push_back(impl::req("quantize_q8", {}, {{"WG", "128"}, {"NORM", "1"}, {"WRITE_Y", "1"}}, 5));
  }
  for (bool w : {false, true}) reqs.push_back(impl::norm_req(w));
  reqs.push_back(impl::req("rope", {}, {}, 4));
  reqs.push_back(impl::req("temperature", {}, {}, 3));
  reqs.push_back(impl::elementwise_req("OP_ADD"));
  reqs.push_back(impl::elementwise_req("OP_SWIGLU"));
  reqs.push_back(impl::copy_req(false));
  reqs.push_back(impl::copy_req(true));
  const auto t1 = clock_type::now();
  P.pipes.prepare(reqs, P.opt.progress);
  P.stats.pipelines_ms += ms_since(t1);

  // Host-visible copy target of read(): as large as the largest activation buffer (the logits).
  std::uint64_t largest = 0;
  for (const auto& b : P.buffers) largest = std::max(largest, b.size());
  P.readback = gpu_buffer(P.ctx, largest, memory_kind::readback, "logits readback");

  // MoE routing buffers.
  P.moe_ids = P.new_buffer(std::uint64_t(max_routed) * 4 + 16, memory_kind::device, "MoE expert ids");
  P.moe_wts = P.new_buffer(std::uint64_t(max_routed) * 4 + 16, memory_kind::device, "MoE expert weights");
}

kv_state backend::make_kv(const kv::kv_config& cfg) {
  auto& P = *p_;
  const std::uint32_t n_slots = (cfg.n_ctx + cfg.block_size - 1) / cfg.block_size * cfg.block_size;
  const std::uint64_t row = cfg.row_elems();
  const auto round4 = [](std::uint64_t b) { return (b + 3) / 4 * 4; };
  const std::uint64_t k_bytes = round4(std::uint64_t(n_slots) * cfg.n_head_kv * kv_head_bytes(cfg.type_k, cfg.head_dim));
  const std::uint64_t v_bytes = round4(std::uint64_t(n_slots) * cfg.n_head_kv * kv_head_bytes(cfg.type_v, cfg.head_dim));
  const bool compressed = kv::is_compressed(cfg.type_k) || kv::is_compressed(cfg.type_v);
  if (compressed && (cfg.head_dim > 256 || cfg.head_dim % 16))
    throw error("Vulkan compressed KV cache supports head dimensions up to 256 in multiples of 16, the model has " +
                std::to_string(cfg.head_dim));
  kv_state::ring ring;
  ring.rows = compressed && cfg.full_precision_window ? cfg.full_precision_window + std::max<std::uint32_t>(cfg.max_batch, 1) : 0;
  const std::uint64_t ring_side = std::uint64_t(cfg.n_seq) * ring.rows * row * 2;
  const std::uint64_t ring_bytes = ring.rows ? ring_side * (kv::is_compressed(cfg.type_k) + kv::is_compressed(cfg.type_v)) +
                                                   std::uint64_t(cfg.n_seq) * ring.rows * 4
                                             : 0;
  const auto& info = P.ctx.info();
  if (k_bytes > info.max_storage_range || v_bytes > info.max_storage_range)
    throw error("KV cache of " + std::to_string(cfg.n_ctx) + " tokens needs " + gib(std::max(k_bytes, v_bytes)) +
                " per layer, more than '" + info.name + "' can bind (" + gib(info.max_storage_range) + "); use a smaller -c");
  const std::uint64_t total = (k_bytes + v_bytes + ring_bytes) * cfg.n_layer;
  if (info.device_local_bytes && total + P.stats.weight_bytes > info.device_local_bytes)
    throw error("KV cache of " + std::to_string(cfg.n_ctx) + " tokens needs " + gib(total) + " and the weights " +
                gib(P.stats.weight_bytes) + ", more than the " + gib(info.device_local_bytes) + " of '" + info.name +
                "'; use a smaller -c");
  std::vector<std::uint32_t> k, v;
  for (std::uint32_t l = 0; l < cfg.n_layer; ++l) {
    k.push_back(P.new_buffer(k_bytes, memory_kind::device, "KV cache K, layer " + std::to_string(l)));
    v.push_back(P.new_buffer(v_bytes, memory_kind::device, "KV cache V, layer " + std::to_string(l)));
  }
  if (ring.rows) {  // f16 window rings; tags start at ~0 (no position held)
    const std::vector<std::uint32_t> none(std::size_t(cfg.n_seq) * ring.rows, ~0u);
    uploader up(P.ctx, none.size() * 4);
    for (std::uint32_t l = 0; l < cfg.n_layer; ++l) {
      const std::string ls = ", layer " + std::to_string(l);
      ring.k.push_back(kv::is_compressed(cfg.type_k) ? P.new_buffer(ring_side, memory_kind::device, "KV window ring K" + ls) : 0);
      ring.v.push_back(kv::is_compressed(cfg.type_v) ? P.new_buffer(ring_side, memory_kind::device, "KV window ring V" + ls) : 0);
      ring.tags.push_back(P.new_buffer(none.size() * 4, memory_kind::device, "KV window ring tags" + ls));
      up.copy(std::as_bytes(std::span(none)), P.buf(ring.tags.back()).handle(), 0);
      up.flush();
    }
  }
  // Step buffer: batch inputs plus the block table of every sequence.
  P.max_blocks = n_slots / cfg.block_size;
  const std::uint64_t B = std::max<std::uint32_t>(P.max_rows, 1);
  auto section = [](std::uint64_t& at, std::uint64_t bytes) {
    const std::uint64_t o = at;
    at += (bytes + section_align - 1) / section_align * section_align;
    return o;
  };
  std::uint64_t at = 0;
  P.off_tokens = section(at, B * 4);
  P.off_pos = section(at, B * 4);
  P.off_slots = section(at, B * 4);
  P.off_seq_row = section(at, B * 4);
  P.off_out_rows = section(at, B * 4);
  P.blocks_bytes = std::uint64_t(cfg.n_seq) * P.max_blocks * 4;
  P.off_blocks = section(at, P.blocks_bytes);
  P.step = gpu_buffer(P.ctx, at, memory_kind::upload, "per-step inputs");
  const auto defs = impl::kv_defs(cfg);
  const auto t1 = clock_type::now();
  auto split_defs = defs, combine_defs = defs;
  split_defs.emplace_back("SPLIT", "1");
  combine_defs.emplace_back("COMBINE", "1");
  kv_state st(cfg, std::move(k), std::move(v), std::move(ring));
  if (compressed) {
    const auto qd = impl::kvq_defs(st);
    auto qsplit = qd;
    qsplit.emplace_back("SPLIT", "1");
    const pipeline_request reqs[] = {impl::req("kv_store_q", {}, impl::kv_encode_defs(st), 14),
                                     impl::req("attn_prep", {}, impl::kv_encode_defs(st), 14),
                                     impl::req("attention_q", {}, qd, 11),
                                     impl::req("attention_q", {}, qsplit, 11), impl::req("attention", {}, combine_defs, 8)};
    P.pipes.prepare(reqs);
  } else {
    const pipeline_request reqs[] = {impl::req("kv_store", {}, defs, 6), impl::req("attn_prep", {}, defs, 10),
                                     impl::req("attention", {}, defs, 8),
                                     impl::req("attention", {}, split_defs, 8), impl::req("attention", {}, combine_defs, 8)};
    P.pipes.prepare(reqs);
  }
  P.stats.pipelines_ms += ms_since(t1);
  P.stats.pipelines = std::uint32_t(P.pipes.size());
  P.stats.spirv_compiled = P.pipes.compiler().compiled();
  P.stats.spirv_cached = P.pipes.compiler().cache_hits();
  return st;
}

void backend::begin(const graph::step_inputs& in) {
  auto& P = *p_;
  const graph::batch& b = in.tokens;
  const std::uint32_t n = std::uint32_t(b.size());
  if (!P.step) throw error("Vulkan backend: make_kv() must run before the first step");
  if (n > P.max_rows) throw error("batch of " + std::to_string(n) + " tokens exceeds the reserved " + std::to_string(P.max_rows));
  std::byte* s = P.step.mapped();
  std::memcpy(s + P.off_tokens, b.tokens.data(), n * 4);
  std::memcpy(s + P.off_pos, b.positions.data(), n * 4);
  auto* out_rows = reinterpret_cast<std::uint32_t*>(s + P.off_out_rows);
  std::uint32_t n_out = 0;
  for (std::uint32_t t = 0; t < n; ++t)
    if (b.logits[t]) out_rows[n_out++] = t;
  if (in.kv) {  // slots of the new tokens and the block tables of their sequences
    auto* slots = reinterpret_cast<std::uint32_t*>(s + P.off_slots);
    auto* seq_row = reinterpret_cast<std::uint32_t*>(s + P.off_seq_row);
    auto* blocks = reinterpret_cast<std::uint32_t*>(s + P.off_blocks);
    std::uint32_t last_seq = ~0u;
    for (std::uint32_t t = 0; t < n; ++t) {
      const std::uint32_t seq = b.seq_ids[t];
      slots[t] = in.kv->slot(seq, std::uint32_t(b.positions[t]));
      seq_row[t] = seq;
      if (seq != last_seq) {
        const auto bl = in.kv->blocks(seq);
        if (bl.size() > P.max_blocks || (std::uint64_t(seq) + 1) * P.max_blocks * 4 > P.blocks_bytes)
          throw error("Vulkan backend: the block table does not match the KV cache made by make_kv()");
        std::memcpy(blocks + std::size_t(seq) * P.max_blocks, bl.data(), bl.size() * 4);
        last_seq = seq;
      }
    }
  }
  const bool greedy = in.greedy;
  for (auto& q : P.quantized) q.reset();
  P.heads.clear();
  P.step_tokens = n;
  P.read_dst = nullptr;
  P.fuse_step = P.fuse && n <= 8;
  P.single_seq = std::all_of(b.seq_ids.begin(), b.seq_ids.end(), [&](std::uint32_t s) { return s == b.seq_ids[0]; });
  P.current_key = std::uint64_t(n) | std::uint64_t(n_out) << 32 | std::uint64_t(greedy) << 63 |
                  std::uint64_t(P.single_seq) << 62;
  P.ids_dst = nullptr;
  if (auto it = P.steps.find(P.current_key); it != P.steps.end()) {
    P.current = &it->second;
    P.replay = true;
    return;
  }
  if (P.steps.size() >= max_cached_steps) P.steps.clear();  // shapes churn: start over rather than grow
  P.replay = false;
  P.recording = true;
  P.pending = {};
  P.pending.cmd = std::move(vk::raii::CommandBuffers(
      P.ctx.device(), vk::CommandBufferAllocateInfo(*P.pool, vk::CommandBufferLevel::ePrimary, 1))[0]);
  P.rec.begin(P.pending.cmd, P.opt.profile ? *P.queries : vk::QueryPool{}, P.query_capacity);
}

void backend::embed(const weight& table, tensor out) {
  auto& P = *p_;
  if (P.replay) return;
  P.prepare({}, {out});
  const std::uint32_t n = out.rows;
  const get_rows_pc pc{std::uint32_t(table.ne[0]), std::uint32_t(table.row_bytes), out.off, out.stride};
  const binding b[] = {P.bind_weight(table), P.bind_step(P.off_tokens, std::uint64_t(P.max_rows) * 4), P.bind(out, true)};
  P.dispatch(impl::req("get_rows", table.type, {}, 3), b, &pc, sizeof pc, div_up(table.ne[0] / 16, wg), n);
}

void backend::rms_norm(tensor x, const weight* w, float eps, tensor y) {
  auto& P = *p_;
  if (P.replay) return;
  const bool weighted = w && *w;
  if (weighted && (w->type != gguf::type_id::f32 || w->ne[0] != x.cols))
    throw error("norm weight '" + std::string(w->name) + "' must be F32 with " + std::to_string(x.cols) + " elements");
  const impl::pending_norm n{x, y, weighted ? w : nullptr, eps};
  // Per-head norms in place (Q/K norms: rows = tokens x heads, one head per row) wait for
  // kv_store()'s attn_prep dispatch.
  if (P.fuse && impl::same(x, y) && x.cols == x.stride && x.cols <= 256 && P.step_tokens &&
      x.rows % P.step_tokens == 0) {
    P.keep_heads = true;
    P.prepare({x}, {});
    P.keep_heads = false;
    const std::uint32_t n_heads = x.rows / P.step_tokens;
    const tensor parent{x.buf, x.off, P.step_tokens, x.cols * n_heads, x.cols * n_heads};
    P.head_entry(parent, n_heads).ops.push_back({weighted ? impl::head_op::norm_w : impl::head_op::norm,
                                                 weighted ? w : nullptr, eps, {}});
    return;
  }
  // Full-width weighted norms are deferred (fused into the matmuls that read them).
  if (P.fuse_step && weighted && x.rows == y.rows && x.cols == y.cols && x.cols % 16 == 0) {
    P.prepare({x}, {y});
    std::erase_if(P.norms, [&](const impl::pending_norm& o) { return o.y.buf == y.buf; });
    P.norms.push_back(n);
    return;
  }
  P.prepare({x}, {y});
  P.record_norm(n);
}

void backend::matmul(const weight& w, tensor x, tensor y) {
  auto& P = *p_;
  if (P.replay) return;
  if (x.cols != w.ne[0] || y.cols != w.ne[1] || x.rows != y.rows)
    throw error("matmul shape mismatch for '" + std::string(w.name) + "': weight [" + std::to_string(w.ne[0]) + ", " +
                std::to_string(w.ne[1]) + "], input " + std::to_string(x.rows) + "x" + std::to_string(x.cols) + ", output " +
                std::to_string(y.rows) + "x" + std::to_string(y.cols));
  impl::pending_matmul m{&w, x, y, {}, {}, nullptr};
  if (!P.fuse_step) {
    P.prepare({x}, {y});
    P.record_matmul(m);
    return;
  }
  // Input from a deferred norm: fold it in. Otherwise the usual read/write preparation, but
  // keep earlier deferred matmuls of the same input waiting (a gate/up pair may follow).
  const auto it = std::find_if(P.norms.begin(), P.norms.end(), [&](const auto& n) { return impl::same(n.y, x); });
  if (it != P.norms.end()) m.norm = *it;
  const bool chain = !P.mats.empty() && impl::same(P.mats.back().x, x) && !P.mats.back().residual && !P.mats.back().up;
  if (!chain) P.flush_mats();
  if (!m.norm) {
    std::vector<impl::pending_matmul> held;
    held.swap(P.mats);
    P.prepare({x}, {y});
    P.mats.swap(held);
  } else {
    for (std::size_t i = 0; i < P.norms.size();) {  // norms reading / writing y
      if (P.norms[i].x.buf == y.buf || (P.norms[i].y.buf == y.buf && !impl::same(P.norms[i].y, x))) {
        P.dropped.push_back(P.norms[i].y);
        P.norms.erase(P.norms.begin() + std::ptrdiff_t(i));
      } else {
        ++i;
      }
    }
  }
  if (P.mats.size() == 2) {
    P.record_matmul(P.mats.front());
    P.mats.erase(P.mats.begin());
  }
  P.mats.push_back(m);
}

void backend::rope(tensor x, std::uint32_t n_heads, const graph::rope_params& rp, const weight* freq_factors) {
  auto& P = *p_;
  if (P.replay) return;
  if (P.fuse && x.cols == x.stride && x.rows == P.step_tokens) {  // waits for kv_store()'s attn_prep
    P.keep_heads = true;
    P.prepare({x}, {});
    P.keep_heads = false;
    auto& op = P.head_entry(x, n_heads).ops.emplace_back();
    op.kind = impl::head_op::rope;
    op.rp = rp;
    op.ff = freq_factors && *freq_factors ? freq_factors : nullptr;
    return;
  }
  P.prepare({x}, {x});
  P.record_rope(x, n_heads, rp, freq_factors && *freq_factors ? freq_factors : nullptr);
}

void backend::scale_by_position(tensor q, const graph::position_scale_params& ps) {
  auto& P = *p_;
  if (P.replay) return;
  if (P.fuse && q.cols == q.stride && q.rows == P.step_tokens) {  // waits for kv_store()'s attn_prep
    P.keep_heads = true;
    P.prepare({q}, {});
    P.keep_heads = false;
    auto& op = P.head_entry(q, 0).ops.emplace_back();
    op.kind = impl::head_op::temp;
    op.ps = ps;
    return;
  }
  P.prepare({q}, {q});
  P.record_temperature(q, ps);
}

void backend::kv_store(kv_state& kv, std::uint32_t layer, tensor k, tensor v) {
  auto& P = *p_;
  if (P.replay) return;
  const auto& cfg = kv.config();
  if (P.fuse && (P.tq_prep || !kv.compressed())) {  // head norms, RoPE and the append in one dispatch
    P.keep_heads = true;
    P.prepare({k, v}, {});
    P.keep_heads = false;
    if (P.record_attn_prep(kv, layer, k, v)) return;
  }
  P.prepare({k, v}, {});
  if (kv.compressed()) {
    const auto& r = kv.window_ring();
    const kv_store_q_pc pc{k.rows, cfg.n_head_kv, k.off, k.stride, v.off, v.stride, r.rows};
    const std::uint64_t B4 = std::uint64_t(P.max_rows) * 4;
    const binding dummy = P.bind(k, false);
    // attn_prep's binding numbers (kv_encode.glsl declares the cache side for both)
    const binding bd[] = {dummy,
                          P.bind(k, false),
                          P.bind(v, false),
                          dummy,
                          dummy,
                          P.bind_id(kv.k_buffer(layer), true),
                          P.bind_id(kv.v_buffer(layer), true),
                          P.bind_step(P.off_slots, B4),
                          P.bind_step(P.off_pos, B4),
                          dummy,
                          r.rows && r.k[layer] ? P.bind_id(r.k[layer], true) : dummy,
                          r.rows && r.v[layer] ? P.bind_id(r.v[layer], true) : dummy,
                          r.rows ? P.bind_id(r.tags[layer], true) : dummy,
                          P.bind_step(P.off_seq_row, B4)};
    P.dispatch(impl::req("kv_store_q", {}, impl::kv_encode_defs(kv), 14), bd, &pc, sizeof pc, cfg.n_head_kv, k.rows);
    return;
  }
  const kv_store_pc pc{k.rows, cfg.row_elems(), k.off, k.stride, v.off, v.stride};
  const binding bd[] = {P.bind(k, false), P.bind(k, false), P.bind(v, false), P.bind_id(kv.k_buffer(layer), true),
                        P.bind_id(kv.v_buffer(layer), true), P.bind_step(P.off_slots, std::uint64_t(P.max_rows) * 4)};
  P.dispatch(impl::req("kv_store", {}, impl::kv_defs(cfg), 6), bd, &pc, sizeof pc, div_up(cfg.row_elems(), wg), k.rows);
}

void backend::attention(const kv_state& kv, std::uint32_t layer, tensor q, const graph::attention_params& ap,
                        tensor out) {
  auto& P = *p_;
  if (P.replay) return;
  P.prepare({q}, {out});
  if (ap.head_dim > 256 || ap.head_dim % 4)
    throw error("Vulkan attention supports head dimensions up to 256 in multiples of 4, the model has " +
                std::to_string(ap.head_dim));
  const auto& cfg = kv.config();
  const std::uint64_t B4 = std::uint64_t(P.max_rows) * 4;
  const auto& ring = kv.window_ring();
  attention_pc pc{ap.n_head, ap.n_head_kv, ap.head_dim, ap.chunk, q.off, q.stride, out.off, out.stride,
                  cfg.block_size, P.max_blocks, ap.scale, 0, 1, ring.rows ? cfg.full_precision_window : 0, ring.rows};
  // Decode: split the context over workgroups (flash-decoding) so a long context is not read
  // by one workgroup per head; the split length follows the context size so the dispatch
  // shape, recorded once, holds for every length up to it.
  // The grouped decode kernels (attention_dec, attention_qdec for compressed KV) have a quarter
  // of the workgroups of the per-head ones, so they split finer: 128-key splits, up to 128.
  constexpr std::uint32_t split_tokens = 8;
  const std::uint32_t group = ap.n_head_kv ? ap.n_head / ap.n_head_kv : 0;
  const bool grouped = group >= 1 && group <= 8 && ap.n_head % ap.n_head_kv == 0 &&
                       (kv.compressed() ? P.tq_gqa == 2 || (P.tq_gqa == 1 && q.rows <= split_tokens)
                                        : P.gqa_attention && q.rows <= split_tokens);
  // Unsplit (short contexts), the per-head kernel's n_head workgroups beat the grouped kernel's
  // n_head_kv (measured on the H100: qwen3-8b tg128 231 vs 226 t/s, 4 KV heads of qwen3-30b-a3b
  // far worse), so the grouped f16 kernel runs only split.
  const std::uint32_t max_splits = grouped ? 128 : 64;
  const std::uint32_t min_split = grouped ? (kv.compressed() ? P.tq_split : 128) : 256;
  const bool split = P.split_attention && q.rows <= split_tokens && cfg.n_ctx > 2 * min_split;
  if (split) {
    pc.split_len = std::max<std::uint32_t>(min_split, div_up(div_up(cfg.n_ctx, max_splits), 128) * 128);
    pc.n_splits = div_up(cfg.n_ctx, pc.split_len);
    const std::uint64_t need = std::uint64_t(split_tokens) * ap.n_head * pc.n_splits * (ap.head_dim + 2) * 4;
    if (!P.attn_part || P.buf(P.attn_part).size() < need)
      P.attn_part = P.new_buffer(need, memory_kind::device, "split attention partials");
  }
  const binding part = split ? P.bind_id(P.attn_part, true) : P.bind(q, false);
  const binding bd[] = {part,
                        P.bind(q, false),
                        P.bind_id(kv.k_buffer(layer), false),
                        P.bind_id(kv.v_buffer(layer), false),
                        P.bind_step(P.off_pos, B4),
                        P.bind_step(P.off_seq_row, B4),
                        P.bind_step(P.off_blocks, P.blocks_bytes),
                        P.bind(out, !split)};
  if (kv.compressed()) {  // attention_q (f16 window ring, codes read directly), then COMBINE
    const binding dummy = P.bind(q, false);
    const binding qb[] = {bd[0], bd[1], bd[2], bd[3], bd[4], bd[5], bd[6], bd[7],
                          ring.rows && ring.k[layer] ? P.bind_id(ring.k[layer], false) : dummy,
                          ring.rows && ring.v[layer] ? P.bind_id(ring.v[layer], false) : dummy,
                          ring.rows ? P.bind_id(ring.tags[layer], false) : dummy};
    auto qd = impl::kvq_defs(kv);
    if (grouped) {  // one workgroup per KV head and token scores its query-head group (attention_qdec.glsl)
      qd.emplace_back("GQA_G", std::to_string(group));
      qd.emplace_back("TQ_ROT_N", std::to_string(group));
      if (split) qd.emplace_back("SPLIT", "1");
      P.dispatch3(impl::req("attention_qdec", {}, qd, 11), qb, &pc, sizeof pc, ap.n_head_kv, q.rows, pc.n_splits);
    } else if (!split) {
      P.dispatch(impl::req("attention_q", {}, qd, 11), qb, &pc, sizeof pc, ap.n_head, q.rows);
    } else {
      qd.emplace_back("SPLIT", "1");
      P.dispatch3(impl::req("attention_q", {}, qd, 11), qb, &pc, sizeof pc, ap.n_head, q.rows, pc.n_splits);
    }
    if (!split) return;
    const binding cb[] = {P.bind_id(P.attn_part, false), P.bind(q, false), P.bind(q, false), P.bind(q, false),
                          P.bind(q, false), P.bind(q, false), P.bind(q, false), P.bind(out, true)};
    auto combine_defs = impl::kv_defs(cfg);
    combine_defs.emplace_back("COMBINE", "1");
    P.dispatch(impl::req("attention", {}, combine_defs, 8), cb, &pc, sizeof pc, ap.n_head, q.rows);
    return;
  }
  auto defs = impl::kv_defs(cfg);
  // Decode: one workgroup per KV head scores its whole query-head group (attention_dec.glsl).
  if (grouped && split) {
    auto ddefs = defs;
    ddefs.emplace_back("HEAD_D", std::to_string(ap.head_dim));
    ddefs.emplace_back("GQA_G", std::to_string(group));
    if (split) ddefs.emplace_back("SPLIT", "1");
    P.dispatch3(impl::req("attention_dec", {}, ddefs, 8), bd, &pc, sizeof pc, ap.n_head_kv, q.rows, pc.n_splits);
    if (!split) return;
    const binding cb[] = {P.bind_id(P.attn_part, false), P.bind(q, false), P.bind(q, false), P.bind(q, false),
                          P.bind(q, false), P.bind(q, false), P.bind(q, false), P.bind(out, true)};
    auto combine_defs = defs;
    combine_defs.emplace_back("COMBINE", "1");
    P.dispatch(impl::req("attention", {}, combine_defs, 8), cb, &pc, sizeof pc, ap.n_head, q.rows);
    return;
  }
  // Prefill of one sequence on tensor cores (attention_mma.glsl): f16 caches, head_dim 64 or 128.
  if (!split && P.single_seq && tensor_core_attention(q.rows, ap.head_dim, cfg.type_k, cfg.type_v)) {
    pc.n_splits = q.rows;  // the kernel's token count
    P.dispatch(impl::req("attention_mma", {}, {{"WG", "128"}, {"COOPMAT", "1"}, {"HEAD_D", std::to_string(ap.head_dim)}}, 8),
               bd, &pc, sizeof pc, ap.n_head, div_up(q.rows, 64));
    return;
  }
  // Prefill of one sequence: query tiles share each key tile (attention.glsl QTILE).
  constexpr std::uint32_t qtile = 16;
  if (!split && P.tiled_attention && P.single_seq && q.rows >= qtile && ap.head_dim <= 128) {
    auto qdefs = defs;
    qdefs.emplace_back("QTILE", "1");
    pc.n_splits = q.rows;  // the tile kernel's token count
    P.dispatch(impl::req("attention", {}, qdefs, 8), bd, &pc, sizeof pc, ap.n_head, div_up(q.rows, qtile));
    return;
  }
  if (!split) {
    P.dispatch(impl::req("attention", {}, defs, 8), bd, &pc, sizeof pc, ap.n_head, q.rows);
    return;
  }
  auto split_defs = defs;
  split_defs.emplace_back("SPLIT", "1");
  P.dispatch3(impl::req("attention", {}, split_defs, 8), bd, &pc, sizeof pc, ap.n_head, q.rows, pc.n_splits);
  const binding cb[] = {P.bind_id(P.attn_part, false), P.bind(q, false), P.bind(q, false), P.bind(q, false),
                        P.bind(q, false), P.bind(q, false), P.bind(q, false), P.bind(out, true)};
  auto combine_defs = defs;
  combine_defs.emplace_back("COMBINE", "1");
  P.dispatch(impl::req("attention", {}, combine_defs, 8), cb, &pc, sizeof pc, ap.n_head, q.rows);
}

void backend::swiglu(tensor gate, tensor up, tensor out) {
  auto& P = *p_;
  if (P.replay) return;
  if (P.fuse_step && P.mats.size() == 2 && impl::same(P.mats[0].y, gate) && impl::same(P.mats[1].y, up) &&
      impl::same(out, gate) && !P.mats[0].residual && !P.mats[1].residual) {
    const auto& g = P.weights.at(P.mats[0].w->id);
    const auto& u = P.weights.at(P.mats[1].w->id);
    if (P.mats[0].w->type == P.mats[1].w->type && P.mats[0].w->row_bytes == P.mats[1].w->row_bytes &&
        P.mats[0].w->ne[1] == P.mats[1].w->ne[1] && g.chunk == u.chunk && u.offset > g.offset &&
        u.offset - g.offset < (1ull << 32)) {
      P.mats[0].up = P.mats[1].w;
      P.mats.pop_back();
      P.flush_mats();
      return;
    }
  }
  P.prepare({gate, up}, {out});
  const elementwise_pc pc{gate.cols, gate.off, gate.stride, up.off, up.stride, out.off, out.stride};
  const binding b[] = {P.bind(gate, false), P.bind(gate, false), P.bind(up, false), P.bind(out, true)};
  P.dispatch(impl::elementwise_req("OP_SWIGLU"), b, &pc, sizeof pc, div_up(gate.cols, wg), gate.rows);
}

void backend::add(tensor a, tensor b2, tensor out) {
  auto& P = *p_;
  if (P.replay) return;
  // The residual add after an MoE layer joins its deferred combine: out = other + sum.
  if (P.combine && P.mats.empty()) {
    const impl::pending_combine c = *P.combine;
    const tensor* other = impl::same(b2, c.out) ? &a : impl::same(a, c.out) ? &b2 : nullptr;
    if (other && other->rows == c.out.rows && other->cols == c.out.cols && out.rows == c.out.rows &&
        out.cols == c.out.cols && other->buf != c.y.buf && out.buf != c.y.buf) {
      P.combine.reset();
      const tensor r = *other;
      P.prepare({r}, {out});
      impl::pending_combine f = c;
      f.out = out;
      f.pc.d_off = out.off;
      f.pc.d_stride = out.stride;
      P.record_combine(f, &r);
      return;
    }
  }
  if (P.fuse_step && P.mats.size() == 1 && impl::same(P.mats.back().y, b2) && impl::same(out, a) && !P.mats.back().up &&
      !P.mats.back().residual && a.buf != P.mats.back().x.buf && (!P.mats.back().norm || P.mats.back().norm->x.buf != a.buf)) {
    P.mats.back().residual = a;  // y = a + W.x, written over a
    P.mats.back().y = out;
    P.prepare({}, {out});
    return;
  }
  P.prepare({a, b2}, {out});
  const elementwise_pc pc{a.cols, a.off, a.stride, b2.off, b2.stride, out.off, out.stride};
  const binding b[] = {P.bind(a, false), P.bind(a, false), P.bind(b2, false), P.bind(out, true)};
  P.dispatch(impl::elementwise_req("OP_ADD"), b, &pc, sizeof pc, div_up(a.cols, wg), a.rows);
}

void backend::select_rows(tensor x, tensor out) {
  auto& P = *p_;
  if (P.replay) return;
  P.prepare({x}, {out});
  const copy_rows_pc pc{x.cols, x.off, x.stride, out.off, out.stride};
  const binding b[] = {P.bind(x, false), P.bind(x, false), P.bind(out, true),
                       P.bind_step(P.off_out_rows, std::uint64_t(P.max_rows) * 4)};
  P.dispatch(impl::copy_req(true), b, &pc, sizeof pc, div_up(x.cols, wg), out.rows);
}

void backend::read(tensor src, std::span<float> dst) {
  auto& P = *p_;
  const std::size_t n = std::size_t(src.rows) * src.cols;
  if (dst.size() < n) throw error("read: destination too small");
  if (P.readback.size() < n * 4) throw error("read: " + std::to_string(n) + " floats exceed the readback buffer");
  P.read_dst = dst.data();
  P.read_floats = n;
  if (P.replay) return;
  P.prepare({src}, {});
  const copy_rows_pc pc{src.cols, src.off, src.stride, 0, src.cols};
  const binding b[] = {P.bind(src, false), P.bind(src, false),
                       {{P.readback.handle(), 0, P.readback.size(), 0}, true}};
  P.dispatch(impl::copy_req(false), b, &pc, sizeof pc, div_up(src.cols, wg), src.rows);
}

void backend::argmax(tensor src, std::span<std::int32_t> dst) {
  auto& P = *p_;
  if (dst.size() < src.rows) throw error("argmax: destination too small");
  if (!P.ids_readback || P.ids_readback.size() < std::uint64_t(src.rows) * 4) {
    if (P.replay) throw error("internal: argmax() first seen while replaying a step");
    P.steps.clear();  // recorded steps may reference a smaller buffer
    P.ids_readback = gpu_buffer(P.ctx, std::max<std::uint64_t>(std::uint64_t(P.max_rows) * 4, 16), memory_kind::readback,
                                "argmax readback");
  }
  P.ids_dst = dst.data();
  P.ids_count = src.rows;
  if (P.replay) return;
  P.prepare({src}, {});
  struct {
    std::uint32_t cols, s_off, s_stride;
  } pc{src.cols, src.off, src.stride};
  const binding b[] = {P.bind(src, false), P.bind(src, false), {{P.ids_readback.handle(), 0, P.ids_readback.size(), 0}, true}};
  P.dispatch(impl::req("argmax", {}, {{"WG", "256"}}, 3), b, &pc, sizeof pc, src.rows);
}

void backend::write(tensor dst, std::span<const float> src) {
  auto& P = *p_;
  const std::size_t n = std::size_t(dst.rows) * dst.cols;
  if (src.size() < n) throw error("write: source too small");
  if (!P.input) {
    if (P.replay) throw error("internal: write() first seen while replaying a step");
    std::uint64_t largest = 0;
    for (const auto& b : P.buffers) largest = std::max(largest, b.size());
    P.input = P.new_buffer(largest, memory_kind::upload, "hidden-state input");
  }
  if (P.buf(P.input).size() < n * 4) throw error("write: " + std::to_string(n) + " floats exceed the input buffer");
  std::memcpy(P.buf(P.input).mapped(), src.data(), n * 4);
  if (P.replay) return;
  P.prepare({}, {dst});
  const copy_rows_pc pc{dst.cols, 0, dst.cols, dst.off, dst.stride};
  const binding b[] = {P.bind_id(P.input, false), P.bind_id(P.input, false), P.bind(dst, true)};
  P.dispatch(impl::copy_req(false), b, &pc, sizeof pc, div_up(dst.cols, wg), dst.rows);
}

void backend::finish() {
  auto& P = *p_;
  if (!P.replay) {
    if (!P.recording) return;
    P.flush_all();
    P.rec.end();
    P.recording = false;
    P.pending.labels = P.rec.labels();
    P.last_dispatches = P.rec.dispatches();
    P.current = &P.steps.insert_or_assign(P.current_key, std::move(P.pending)).first->second;
  }
  const vk::CommandBuffer c = *P.current->cmd;
  P.ctx.queue().submit(vk::SubmitInfo({}, {}, c), *P.fence);
  if (P.ctx.device().waitForFences(*P.fence, VK_TRUE, UINT64_MAX) != vk::Result::eSuccess)
    throw error("GPU step did not complete");
  P.ctx.device().resetFences(*P.fence);
  if (P.read_dst) std::memcpy(P.read_dst, P.readback.mapped(), P.read_floats * 4);
  if (P.ids_dst) std::memcpy(P.ids_dst, P.ids_readback.mapped(), P.ids_count * 4);
  if (P.opt.profile) {
    const auto n = std::uint32_t(P.current->labels.size());
    const auto [r, ts] = P.queries.getResults<std::uint64_t>(
        0, n + 1, (n + 1) * 8, 8, vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait);
    if (r == vk::Result::eSuccess)
      for (std::uint32_t i = 0; i < n; ++i) {
        auto& k = P.prof[P.current->labels[i]];
        k.label = P.current->labels[i];
        k.total_ms += double(ts[i + 1] - ts[i]) * P.ctx.info().timestamp_period_ns * 1e-6;
        ++k.calls;
      }
  }
}

void backend::moe_ffn(const moe_weights& mw, const graph::moe_params& mp, tensor x, const moe_scratch& s, tensor out) {
  auto& P = *p_;
  const std::uint32_t k = mp.n_used;
  if (P.replay) return;
  const std::uint32_t n = x.rows, E = std::uint32_t(mw.gate_inp->ne[1]), pairs = n * k;
  if (E > 256 || k > 64)
    throw error("MoE with " + std::to_string(E) + " experts, " + std::to_string(k) + " used: the GPU router supports up to 256 and 64");
  const bool sigmoid = mp.gating == graph::moe_gating::sigmoid;
  const bool weight_input = mp.weighting == graph::moe_weighting::input;
  // Integer expert matvecs (decode-sized steps, formats with an int8 unit).
  const bool int8 = P.use_mmvq(*mw.gate_exps, n) && P.use_mmvq(*mw.up_exps, n) && P.use_mmvq(*mw.down_exps, n) &&
                    mw.gate_exps->ne[0] <= P.max_k && mw.down_exps->ne[0] <= P.max_k;
  // x is the FFN norm's output: when that norm is still deferred, one quantize dispatch writes
  // both x (f32, for the router) and its int8 rows (for the experts).
  std::optional<impl::pending_norm> norm;
  if (int8 && !weight_input && x.cols % 32 == 0 && x.cols <= P.max_k)
    if (const auto it = std::find_if(P.norms.begin(), P.norms.end(), [&](const auto& nm) { return impl::same(nm.y, x); });
        it != P.norms.end() && it->w) {
      norm = *it;
      P.norms.erase(it);
    }
  P.prepare({norm ? norm->x : x}, {s.logits, s.xin, s.gate, s.up, s.y, out});
  if (norm) {
    const std::uint32_t sl = P.last_slot ^ 1u;
    quantize_pc pc{x.cols, norm->x.off, norm->x.stride, 0, P.max_k / 16, 0, P.max_k / 32, norm->eps, x.off, x.stride};
    const binding b[] = {P.bind(norm->x, false), P.bind_weight(*norm->w), P.bind_id(P.xq[sl], true), P.bind_id(P.xs[sl], true),
                         P.bind(x, true)};
    P.dispatch(impl::req("quantize_q8", {}, {{"WG", "128"}, {"NORM", "1"}, {"WRITE_Y", "1"}}, 5), b, &pc, sizeof pc, n);
    for (auto& q : P.quantized)
      if (q && q->x.buf == x.buf) q.reset();
    P.quantized[sl] = impl::quantized_input{x, nullptr, 0.0f};
    P.last_slot = sl;
  }
  const tensor logits = s.logits.first_rows(n);
  matmul(*mw.gate_inp, x, logits);
  P.flush_mats();
  {
    const moe_pc pc{E, k, 0, logits.off, logits.stride, 0, 0, 0};
    const binding b[] = {P.bind_id(P.moe_ids, true), P.bind_id(P.moe_ids, true), P.bind_id(P.moe_wts, true),
                         P.bind(logits, false), P.bind(logits, false)};
    P.dispatch(impl::moe_req("MOE_TOPK", sigmoid), b, &pc, sizeof pc, n);
  }
  tensor in = x;
  std::uint32_t in_div = k;
  if (weight_input) {
    const tensor xin = s.xin.first_rows(pairs);
    const moe_pc pc{E, k, x.cols, x.off, x.stride, xin.off, xin.stride, 0};
    const binding b[] = {P.bind_id(P.moe_ids, false), P.bind_id(P.moe_ids, false), P.bind_id(P.moe_wts, false),
                         P.bind(x, false), P.bind(xin, true)};
    P.dispatch(impl::moe_req("MOE_GATHER"), b, &pc, sizeof pc, div_up(x.cols, wg), pairs);
    in = xin;
    in_div = 1;
  }
  const tensor g = s.gate.first_rows(pairs), u = s.up.first_rows(pairs), y = s.y.first_rows(pairs);
  if (int8) {
    const std::uint32_t sl = P.quantize_input(in, nullptr, 0.0f);
    const std::uint64_t F = mw.gate_exps->ne[1];
    if (P.adjacent(*mw.gate_exps, *mw.up_exps)) {
      const bool qout = P.quant_out && F % 32 == 0 && F <= P.max_k && g.off % 4 == 0 && g.stride % 4 == 0;
      P.record_mmvq_ids(*mw.gate_exps, mw.up_exps, sl, in_div, pairs, g, qout);
    } else {
      P.record_mmvq_ids(*mw.gate_exps, nullptr, sl, in_div, pairs, g, false);
      P.record_mmvq_ids(*mw.up_exps, nullptr, sl, in_div, pairs, u, false);
      swiglu(g, u, g);
      P.flush_mats();
    }
    const std::uint32_t sd = P.quantize_input(g, nullptr, 0.0f);
    P.record_mmvq_ids(*mw.down_exps, nullptr, sd, 1, pairs, y, false);
  } else {
    auto matvec_id = [&](const weight& w, tensor xi, std::uint32_t div, tensor yo) {
      const matvec_pc pc{std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1]), pairs, std::uint32_t(w.row_bytes), xi.off,
                         xi.stride, yo.off, yo.stride, std::uint32_t(w.row_bytes * w.ne[1]), div, 0};
      const binding b[] = {P.bind_weight(w), P.bind(xi, false), P.bind(yo, true), P.bind_id(P.moe_ids, false)};
      P.dispatch(P.matvec_req(w.type, 1, true, w.ne[1]), b, &pc, sizeof pc, div_up(w.ne[1], P.rows_for(w.ne[1])), pairs);
      P.wrote(yo);
    };
    matvec_id(*mw.gate_exps, in, in_div, g);
    matvec_id(*mw.up_exps, in, in_div, u);
    swiglu(g, u, g);
    P.flush_mats();
    matvec_id(*mw.down_exps, g, 1, y);
  }
  // The combine waits for the decoder's residual add (add() folds it in), else the next op.
  P.combine = impl::pending_combine{moe_pc{E, k, out.cols, y.off, y.stride, out.off, out.stride, weight_input ? 0u : 1u}, y, out};
}

}  // namespace strata::gpu
