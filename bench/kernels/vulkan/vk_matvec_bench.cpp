// Decode matvec lab for the Vulkan backend: every kernel variant on real decode shapes, checked
// against a float64 CPU product of the same weights, then timed over enough weight copies
// (rotated) that each dispatch reads from device memory, not L2, with a barrier between
// dispatches as in a decode step. Prints time per call and weight GB/s per variant.
//   vk_matvec_bench [--formats q4_k,q6_k,q8_0] [--shapes 4096x4096,4096x1024,...]
//                   [--variants mv,q:WG=128:RPG=1:U=2,...] [--tokens 1] [--iters 200] [--rotate-mb 1024]
//                   [--stats: the driver's statistics of each variant's pipeline: registers, spills]
// Variant "mv" is the f32-activation matvec.glsl; "q:..." is mmvq.glsl (int8 activations) with
// the given defines (WG, LPR, RPG, U, UR, MT=0, LAB, GC=0; NT = --tokens); "rd[:WG=n][:U=n][:G=n]" reads the
// weight bytes and nothing else (read_bw.glsl; G workgroups, default one pass of U loads a thread),
// the reference a decode kernel's weight reads are measured against.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "context.hpp"
#include "lab_args.hpp"
#include "memory.hpp"
#include "mma_layout.hpp"
#include "mul_mm_small_shape.hpp"
#include "pipelines.hpp"
#include "push_constants.hpp"
#include "quant_layout.hpp"
#include "shader_compiler.hpp"
#include "strata/core/error.hpp"
#include "strata/core/fp16.hpp"
#include "strata/quant/all.hpp"

using namespace strata;
using namespace strata::gpu;

namespace {

using strata::bench::split;

// Random blocks with finite, small scales: every byte random, then the fp16 scale fields set.
template <class Fmt>
std::vector<std::byte> random_weights(std::uint64_t rows, std::uint64_t K, std::mt19937_64& rng) {
  using B = typename Fmt::block;
  const std::uint64_t nb = rows * K / Fmt::block_elems;
  std::vector<B> blocks(nb);
  auto* bytes = reinterpret_cast<std::uint64_t*>(blocks.data());
  for (std::size_t i = 0; i < nb * sizeof(B) / 8; ++i) bytes[i] = rng();
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (auto& b : blocks) {
    if constexpr (requires { b.d; }) b.d = to_fp16(0.01f * u(rng));
    if constexpr (requires { b.dmin; }) b.dmin = to_fp16(0.005f * u(rng));
  }
  std::vector<std::byte> out(nb * sizeof(B));
  std::memcpy(out.data(), blocks.data(), out.size());
  return out;
}

// Tokens the check covers: all of a small batch; the first 8 and the last one of a large one
// (a float64 product over 512 tokens of a big matrix would take longer than the timing).
std::vector<std::uint32_t> checked_tokens(std::uint32_t n_tok) {
  std::vector<std::uint32_t> t;
  for (std::uint32_t i = 0; i < n_tok && i < 8; ++i) t.push_back(i);
  if (n_tok > 8) t.push_back(n_tok - 1);
  return t;
}

// y[t][r] for the checked tokens (other rows stay 0 and are not compared).
template <class Fmt>
std::vector<double> reference(const std::vector<std::byte>& w, std::uint64_t rows, std::uint64_t K,
                              const std::vector<float>& x, std::uint32_t n_tok) {
  std::vector<double> y(std::size_t(n_tok) * rows);
  std::vector<float> row(K);
  const auto* blocks = reinterpret_cast<const typename Fmt::block*>(w.data());
  const auto toks = checked_tokens(n_tok);
  for (std::uint64_t r = 0; r < rows; ++r) {
    quant::dequant_row<Fmt>(blocks + r * (K / Fmt::block_elems), row.data(), K);
    for (const std::uint32_t t : toks) {
      double s = 0;
      for (std::uint64_t k = 0; k < K; ++k) s += double(row[k]) * double(x[t * K + k]);
      y[t * rows + r] = s;
    }
  }
  return y;
}

struct lab {
  context ctx;
  pipeline_registry pipes;
  vk::raii::CommandPool pool{nullptr};
  vk::raii::Fence fence{nullptr};
  vk::raii::QueryPool queries{nullptr};

  lab() : ctx(-1), pipes(ctx, default_cache_dir()) {
    pool = vk::raii::CommandPool(ctx.device(), vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer,
                                                                         ctx.queue_family()));
    fence = vk::raii::Fence(ctx.device(), vk::FenceCreateInfo());
    queries = vk::raii::QueryPool(ctx.device(), vk::QueryPoolCreateInfo({}, vk::QueryType::eTimestamp, 2));
  }

  // Records `body` into a one-shot command buffer bracketed by timestamps; returns GPU ms.
  template <class F>
  double run(F&& body) {
    auto cmds = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1));
    command_recorder rec;
    rec.begin(cmds[0]);
    cmds[0].resetQueryPool(*queries, 0, 2);
    cmds[0].writeTimestamp(vk::PipelineStageFlagBits::eTopOfPipe, *queries, 0);
    body(rec);
    cmds[0].writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, *queries, 1);
    rec.end();
    const vk::CommandBuffer c = *cmds[0];
    ctx.queue().submit(vk::SubmitInfo({}, {}, c), *fence);
    if (ctx.device().waitForFences(*fence, VK_TRUE, UINT64_MAX) != vk::Result::eSuccess) throw error("GPU did not finish");
    ctx.device().resetFences(*fence);
    const auto [r, ts] = queries.getResults<std::uint64_t>(0, 2, 16, 8, vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait);
    return double(ts[1] - ts[0]) * ctx.info().timestamp_period_ns * 1e-6;
  }

  void copy(const gpu_buffer& src, const gpu_buffer& dst) {
    auto cmds = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1));
    cmds[0].begin(vk::CommandBufferBeginInfo());
    cmds[0].copyBuffer(src.handle(), dst.handle(), vk::BufferCopy(0, 0, src.size()));
    cmds[0].end();
    const vk::CommandBuffer c = *cmds[0];
    ctx.queue().submit(vk::SubmitInfo({}, {}, c), *fence);
    if (ctx.device().waitForFences(*fence, VK_TRUE, UINT64_MAX) != vk::Result::eSuccess) throw error("GPU did not finish");
    ctx.device().resetFences(*fence);
  }

  void upload(const gpu_buffer& dst, const void* src, std::size_t bytes) {
    uploader up(ctx);
    up.copy(std::span(static_cast<const std::byte*>(src), bytes), dst.handle(), 0);
    up.flush();
  }
};

// The accumulator layout mul_mmq.glsl needs (probed once when an "iq" variant is asked for).
std::optional<mma_layout> mmq_layout;
// The f16 fragment layout mul_mm_reg.glsl needs (probed once when an "mr" variant is asked for).
std::optional<f16_fragments> mmr_layout;

struct variant {
  bool mmvq = false;
  bool mm = false;  // mul_mm.glsl (tiled, tensor cores where the device has them)
  // mul_mm_f16.glsl over weights dequant_f16.glsl expanded: "mm3:..." expands every call (as a
  // prefill step does), "mm3g:..." times the GEMM alone on weights expanded once.
  bool mm3 = false, mm3_expand = false;
  // "mmq:...": mul_mm_f16.glsl QW, the weights read in their own format (formats with an
  // MM_SMALL unit), f16 activations; knobs as mm3's. mm3/mmq knobs XH=1 (f16 activations),
  // TF=1 (token tiles fastest in the grid); mmq SW=1 (gate/up/SwiGLU in one GEMM, below).
  bool mmq = false, xh = false, tok_fast = false;
  // mmq SW=1: mul_mm_f16 SWIGLU, the N rows as gate (first half) and up (second half) bound as one
  // range; checked as silu(gate) * up against float64, N/2 outputs a token.
  bool swiglu = false;
  std::uint32_t splits = 1;  // S=n: split K over n workgroups (SPLIT_K), then split_k_sum
  bool small = false;  // mul_mm_small.glsl: "ms:TT=n" (16n tokens per workgroup row)
  bool reg = false;    // mul_mm_reg.glsl: "mr:NT8=n:W=warps" (8n tokens per workgroup row)
  bool iq = false;     // mul_mmq.glsl (int8 tensor cores): "iq:BM=..:BN=..:WM=..:WN=..:RS=..:LAB=bits"
  bool read = false;   // read_bw.glsl: "rd:WG=n:U=n:G=n"
  std::uint32_t read_wg = 256, read_u = 4, read_groups = 0;
  std::uint32_t bm = 64, bn = 64;
  std::vector<std::pair<std::string, std::string>> defines;
  std::string name;
  std::uint32_t rows_per_wg = 8;
};

// A variant's "KEY=value" fields after its name ("q:WG=128:U=2" -> WG 128, U 2).
std::vector<std::pair<std::string, std::string>> variant_fields(const std::string& s) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto parts = split(s, ':');
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const auto f = split(parts[i], '=');
    if (f.size() != 2) throw error("bad variant field '" + parts[i] + "'");
    out.emplace_back(f[0], f[1]);
  }
  return out;
}

// A tile variant's fields: BM, BN, WM, WN into the tile, any other key to `other` (which throws
// on keys it does not know).
template <class Other>
void tile_fields(const std::string& s, std::uint32_t& bm, std::uint32_t& bn, std::uint32_t& wm, std::uint32_t& wn, Other&& other) {
  for (const auto& [key, value] : variant_fields(s)) {
    const std::uint32_t n = std::uint32_t(std::stoul(value));
    if (key == "BM") bm = n;
    else if (key == "BN") bn = n;
    else if (key == "WM") wm = n;
    else if (key == "WN") wn = n;
    else other(key, n);
  }
}

variant parse_variant(const std::string& s, std::uint32_t nt, const device_info& info, gguf::type_id fmt, std::uint32_t K) {
  variant v;
  v.name = s;
  if (s == "mv") {
    v.defines = {{"NR", "8"}, {"NT", std::to_string(nt)}, {"WG", "64"}};
    v.rows_per_wg = 8;
    return v;
  }
  if (s.rfind("mr", 0) == 0) {  // "mr[:NT8=n][:W=warps][:XA=0|1]": fragments built in registers
    v.reg = true;
    std::uint32_t nt8 = std::min<std::uint32_t>(8, (nt + 7) / 8), warps = 8, xa = 1;
    bool bsh = false;  // BSH=1: B through shared memory even where the driver's B has the quad form
    for (const auto& [key, value] : variant_fields(s)) {
      if (key == "W") warps = std::uint32_t(std::stoul(value));
      else if (key == "BSH") bsh = value != "0";
      else if (key == "NT8") nt8 = std::uint32_t(std::stoul(value));
      else if (key == "XA") xa = std::uint32_t(std::stoul(value));
      else throw error("unknown variant field '" + key + "'");
    }
    if (!mmr_layout) throw error("variant " + s + " needs 16x8x16 f16 tensor cores with quad-form fragments");
    v.bn = 8 * nt8;
    v.defines = {{"WG", std::to_string(32 * warps)}, {"COOPMAT", "1"}, {"MM_REG", "1"}, {"NT8", std::to_string(nt8)},
                 {"WARPS", std::to_string(warps)}, {"MMA_AR", mmr_layout->a_rows}, {"MMA_AC", mmr_layout->a_cols}};
    if (!mmr_layout->b_ks.empty() && !bsh) v.defines.emplace_back("MMA_BK", mmr_layout->b_ks);
    if (xa != 1) v.defines.emplace_back("XA", std::to_string(xa));
    return v;
  }
  if (s.rfind("ms", 0) == 0) {  // "ms[:TT=n][:W=warps][:XS=0|1][:N8=1][:H2=1][:LAB=bits]"; "msg": the format's unit off
                                // (dequant16 for every format); "msa": activation fragments loaded
                                // before the expansion (PRE_A)
    v.small = true;
    const bool generic = s.rfind("msg", 0) == 0, pre_a = s.rfind("msa", 0) == 0;
    std::uint32_t tt = std::min<std::uint32_t>(4, (nt + 15) / 16), warps = 0;
    bool xs = false;  // XS: activations staged in shared memory (on in the backend, off here unless asked)
    bool n8 = false;  // N8: weights x tokens 16x8x16 products (at most 8 tokens; needs XS)
    for (const auto& [key, value] : variant_fields(s)) {
      if (key == "W") warps = std::uint32_t(std::stoul(value));
      else if (key == "TT") tt = std::uint32_t(std::stoul(value));
      else if (key == "XS") xs = value != "0";
      else if (key == "N8") n8 = value != "0";
      else if (key == "H2") v.defines.emplace_back("MMS_H2", "1");
      else if (key == "LAB") v.defines.emplace_back("LAB", value);  // mul_mm_small.glsl's lab knobs (results are then wrong)
      else throw error("unknown variant field '" + key + "'");
    }
    if (!info.nv_coopmat) throw error("variant " + s + " needs tensor cores (VK_NV_cooperative_matrix)");
    // No W given: 4 warps, or under XS as many as shared memory holds (the backend's count).
    if (n8 && (!xs || nt > 8 || tt != 1)) throw error("variant " + s + ": N8 needs XS=1 and at most 8 tokens");
    if (warps == 0) warps = xs ? mm_small_xs_warps(tt, n8) : 4;
    v.bn = 16 * tt;
    v.defines.insert(v.defines.begin(), {{"WG", std::to_string(32 * warps)}, {"COOPMAT", "1"}, {"TT", std::to_string(tt)},
                                         {"WARPS", std::to_string(warps)}});
    if (!generic) v.defines.emplace_back("MM_SMALL", "1");
    if (pre_a) v.defines.emplace_back("PRE_A", "1");
    if (xs) v.defines.emplace_back("XS", "1");
    if (n8) v.defines.emplace_back("N8", "1");
    return v;
  }
  if (s.rfind("iq", 0) == 0) {
    v.iq = true;
    std::uint32_t bm = 64, bn = 64, wm = 32, wn = 32, rs = 5;
    std::uint32_t lab = 0;
    tile_fields(s, bm, bn, wm, wn, [&](const std::string& key, std::uint32_t n) {
      if (key == "RS") rs = n;
      else if (key == "LAB") lab = n;  // mul_mmq.glsl's LAB knobs: parts of the kernel left out (results are then wrong)
      else throw error("unknown variant field '" + key + "'");
    });
    if (!info.nv_coopmat || !info.nv_coopmat_int8 || !mmq_layout)
      throw error("variant " + s + " needs int8 tensor cores with a lane-uniform accumulator layout");
    v.bm = bm, v.bn = bn;
    v.defines = {{"WG", std::to_string(bm / wm * (bn / wn) * 32)}, {"COOPMAT", "1"}, {"MMQ", "1"}, {"BM", std::to_string(bm)},
                 {"BN", std::to_string(bn)}, {"WM", std::to_string(wm)}, {"WN", std::to_string(wn)}, {"RS", std::to_string(rs)},
                 {"MMA_DR", mmq_layout->row_offsets}, {"MMA_DC", mmq_layout->col_offsets}};
    if (lab) v.defines.emplace_back("LAB", std::to_string(lab));
    return v;
  }
  if (s.rfind("mm3", 0) == 0 || s.rfind("mmq", 0) == 0) {  // "mm3[g]|mmq:BM=..:BN=..:WM=..:WN=..:BK=..:XH=1:TF=1"
    v.mmq = s.rfind("mmq", 0) == 0;
    v.mm3 = !v.mmq;
    v.mm3_expand = s.rfind("mm3g", 0) != 0;
    v.xh = v.mmq;
    std::uint32_t bm = 128, bn = 128, wm = 32, wn = 64, bk = 32, lab_bits = 0;
    bool q2 = false;  // mmq: QW2 (two threads per weight row)
    bool n8 = false;  // 16x8x16 products (MMA_N 8)
    bool h2 = false;  // H2=1: the in-place expansion in f16x2 arithmetic (MMS_H2)
    tile_fields(s, bm, bn, wm, wn, [&](const std::string& key, std::uint32_t n) {
      if (key == "BK") bk = n;
      else if (key == "LAB") lab_bits = n;  // mul_mm_f16.glsl's LAB knobs (results are then wrong)
      else if (key == "XH") v.xh = n != 0;
      else if (key == "TF") v.tok_fast = n != 0;
      else if (key == "SW") v.swiglu = n != 0;
      else if (key == "S") v.splits = std::max<std::uint32_t>(1, n);
      else if (key == "Q2") q2 = n != 0;
      else if (key == "N8") n8 = n != 0;
      else if (key == "H2") h2 = n != 0;
      else throw error("unknown variant field '" + key + "'");
    });
    if (!info.nv_coopmat) throw error("variant " + s + " needs tensor cores (VK_NV_cooperative_matrix)");
    v.bm = bm, v.bn = bn;
    v.defines = {{"WG", std::to_string(bm / wm * (bn / wn) * 32)}, {"COOPMAT", "1"}, {"BM", std::to_string(bm)},
                 {"BN", std::to_string(bn)}, {"WM", std::to_string(wm)}, {"WN", std::to_string(wn)},
                 {"BK", std::to_string(bk)}};
    if (lab_bits) v.defines.emplace_back("LAB", std::to_string(lab_bits));
    if (v.xh) v.defines.emplace_back("X_F16", "1");
    if (v.tok_fast) v.defines.emplace_back("TOK_FAST", "1");
    if (v.splits > 1) v.defines.emplace_back("SPLIT_K", "1");
    if (n8) v.defines.emplace_back("MMA_N", "8");
    if (h2) v.defines.emplace_back("MMS_H2", "1");
    if (v.mmq) {
      v.defines.emplace_back("QW", "1");
      v.defines.emplace_back("MM_SMALL", "1");
      if (q2) v.defines.emplace_back("QW2", "1");
    }
    if (v.swiglu && !v.mmq) throw error("variant " + s + ": SW=1 needs the in-place tile (mmq)");
    if (v.swiglu) v.defines.emplace_back("SWIGLU", "1");
    return v;
  }
  if (s.rfind("mm", 0) == 0) {  // "mm" = the 64x64 tile kernel; "mm:BM=..:BN=..:WM=..:WN=.." = MMA2
    v.mm = true;
    if (s == "mm") {
      v.defines = {{"WG", "128"}};
      if (info.nv_coopmat) v.defines.emplace_back("COOPMAT", "1");
      return v;
    }
    std::uint32_t bm = 128, bn = 128, wm = 64, wn = 32;
    tile_fields(s, bm, bn, wm, wn, [](const std::string& key, std::uint32_t) { throw error("unknown variant field '" + key + "'"); });
    if (!info.nv_coopmat) throw error("variant " + s + " needs tensor cores (VK_NV_cooperative_matrix)");
    v.bm = bm, v.bn = bn;
    v.defines = {{"WG", std::to_string(bm / wm * (bn / wn) * 32)}, {"COOPMAT", "1"}, {"MMA2", "1"},
                 {"BM", std::to_string(bm)}, {"BN", std::to_string(bn)}, {"WM", std::to_string(wm)}, {"WN", std::to_string(wn)}};
    return v;
  }
  if (s.rfind("rd", 0) == 0) {
    v.read = true;
    for (const auto& [key, value] : variant_fields(s)) {
      const std::uint32_t n = std::uint32_t(std::stoul(value));
      if (key == "WG") v.read_wg = n;
      else if (key == "U") v.read_u = std::max<std::uint32_t>(1, n);
      else if (key == "G") v.read_groups = n;
      else throw error("unknown variant field '" + key + "'");
    }
    v.defines = {{"WG", std::to_string(v.read_wg)}, {"U", std::to_string(v.read_u)}};
    return v;
  }
  if (s.rfind("q", 0) != 0) throw error("unknown variant '" + s + "'");
  v.mmvq = true;
  std::uint32_t wg = 128, lpr = 32, rpg = 1, u = 2;
  bool unroll = false;  // UR=1: mmvq.glsl's loops over tokens and rows unrolled
  bool runtime_layout = false;
  for (const auto& [key, value] : variant_fields(s)) {
    const std::uint32_t n = std::uint32_t(std::stoul(value));
    if (key == "WG") wg = n;
    else if (key == "LPR") lpr = n;
    else if (key == "RPG") rpg = n;
    else if (key == "U") u = n;
    else if (key == "UR") unroll = n != 0;
    else if (key == "MT") { if (n == 0) v.defines.emplace_back("MT_OFF", "1"); }  // MT=0: the one-token form at NT > 1
    else if (key == "LAB") v.defines.emplace_back("LAB", std::to_string(n));  // mmvq.glsl's lab knobs (results wrong)
    // GC=0: the run-time row layout test (common.glsl) instead of the backend's compile-time W_GROUPED
    else if (key == "GC") runtime_layout = n == 0;
    else throw error("unknown variant field '" + key + "'");
  }
  v.defines.insert(v.defines.begin(), {{"MMVQ", "1"}, {"NEED_DOT4", "1"}, {"WG", std::to_string(wg)}, {"LPR", std::to_string(lpr)},
                                       {"RPG", std::to_string(rpg)}, {"U", std::to_string(u)}, {"NT", std::to_string(nt)}});
  if (unroll) v.defines.emplace_back("UR", "1");
  if (!runtime_layout && has_row_groups(fmt)) v.defines.emplace_back("W_GROUPED", grouped_rows(fmt, K) ? "1" : "0");
  if (info.int_dot && !std::getenv("STRATA_VK_NO_DOT4")) v.defines.emplace_back("HAS_DOT4", "1");
  if (info.subgroup_size == lpr) v.defines.emplace_back("SG_LPR", "1");
  else if (lpr < info.subgroup_size && info.subgroup_size % lpr == 0) v.defines.emplace_back("SG_CLUSTER", "1");
  v.rows_per_wg = wg / lpr * rpg;
  return v;
}

template <class Fmt>
void bench_format(lab& L, const std::vector<std::pair<std::uint32_t, std::uint32_t>>& shapes,
                  const std::vector<std::string>& variant_names, std::uint32_t nt, std::uint32_t iters,
                  std::uint64_t rotate_bytes) {
  std::mt19937_64 rng(42);
  const auto fmt = Fmt::gguf_type;
  for (const auto& [K, N] : shapes) {
    const auto w = random_weights<Fmt>(N, K, rng);
    const std::uint32_t row_bytes = std::uint32_t(w.size() / N);
    const std::uint32_t copies = std::uint32_t(std::max<std::uint64_t>(1, (rotate_bytes + w.size() - 1) / w.size()));
    std::vector<std::byte> w_gpu(w.size());  // the GPU's row layout (quant_layout.hpp), as the backend uploads
    copy_gpu_rows(fmt, K, w, w_gpu.data());
    std::vector<gpu_buffer> wb;
    for (std::uint32_t c = 0; c < copies; ++c) {
      wb.emplace_back(L.ctx, w.size(), memory_kind::device, "weights");
      L.upload(wb.back(), w_gpu.data(), w_gpu.size());
    }
    std::vector<float> x(std::size_t(nt) * K);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto& v : x) v = g(rng);
    const auto ref = reference<Fmt>(w, N, K, x, nt);
    double ref_norm = 0;
    for (double v : ref) ref_norm += v * v;

    gpu_buffer xb(L.ctx, x.size() * 4, memory_kind::device, "x");
    L.upload(xb, x.data(), x.size() * 4);
    // f16 activations with 64 rows of slack (mul_mm_small reads whole 16-token tiles).
    std::vector<fp16> xh(std::size_t(nt + 64) * K, to_fp16(0.0f));
    for (std::size_t i = 0; i < x.size(); ++i) xh[i] = to_fp16(x[i]);
    gpu_buffer xhb(L.ctx, xh.size() * 2, memory_kind::device, "x f16");
    L.upload(xhb, xh.data(), xh.size() * 2);
    gpu_buffer qb(L.ctx, std::size_t(nt) * K, memory_kind::device, "xq");
    gpu_buffer sb(L.ctx, std::size_t(nt) * K / 32 * 16, memory_kind::device, "xs");
    gpu_buffer yb(L.ctx, std::size_t(nt) * N * 4, memory_kind::device, "y");
    gpu_buffer yr(L.ctx, std::size_t(nt) * N * 4, memory_kind::readback, "y readback");
    const auto whole = [](const gpu_buffer& b, std::uint32_t id, bool written) {
      return binding{{b.handle(), 0, b.size(), id}, written};
    };
    // int8 activations, once (as a decode step does once per input vector).
    const pipeline_request qreq{"quantize_q8", std::nullopt, {{"WG", "128"}}, 4};
    const quantize_pc qpc{K, 0, K, 0, K / 16, 0, K / 32, 0.0f};
    const double q_ms = L.run([&](command_recorder& rec) {
      const binding b[] = {whole(xb, 1, false), whole(xb, 1, false), whole(qb, 2, true), whole(sb, 3, true)};
      rec.dispatch(L.pipes.get(qreq), b, &qpc, sizeof qpc, nt);
    });

    std::printf("\n%s %ux%u (K x N), %u token(s), %.2f MB per copy, %u copies; quantize %.1f us\n",
                std::string(Fmt::name).c_str(), K, N, nt, double(w.size()) / 1e6, copies, q_ms * 1e3);
    std::printf("  %-36s %10s %10s %10s\n", "variant", "us/call", "GB/s", "rel.err");
    // Build every variant first, so no compilation falls between timed runs (the GPU's clocks
    // drop within milliseconds of idling and ramp up again only under sustained load).
    struct prepared {
      std::string name;
      variant v;
      const pipeline* pl = nullptr;
      double rel = 0, best_us = 1e30;
    };
    std::vector<prepared> vs;
    // mm3 variants: the expansion kernel and f16 scratch (expanded from copy 0 once for mm3g).
    const pipeline_request dq_req{"dequant_f16", fmt, {{"WG", "256"}}, 2};
    const dequant_f16_pc dq_pc{K, row_bytes, 0, N, 0};
    std::optional<gpu_buffer> w16, parts, yh;
    const pipeline_request sum_req{"split_k_sum", std::nullopt, {{"WG", "256"}}, 2};
    auto expand = [&](command_recorder& rec, std::uint32_t copy) {
      const binding b[] = {{{wb[copy].handle(), 0, wb[copy].size(), 0}, false}, whole(*w16, 5, true)};
      const std::uint32_t groups = (N * (K / 16) + 255) / 256;
      rec.dispatch(L.pipes.get(dq_req), b, &dq_pc, sizeof dq_pc, std::min<std::uint32_t>(groups, 65535),
                   (groups + 65534) / 65535);
    };
    for (const auto& vn : variant_names) {
      prepared pv{vn, parse_variant(vn, nt, L.ctx.info(), fmt, K)};
      try {
        if (pv.v.splits > 1) {
          const std::size_t need = std::size_t(pv.v.splits) * nt * N * 4;
          if (!parts || parts->size() < need) parts.emplace(L.ctx, need, memory_kind::device, "split-K partials");
          L.pipes.get(sum_req);
        }
        if (pv.v.mm3) {
          if (!w16) {
            w16.emplace(L.ctx, std::size_t(N) * K * 2, memory_kind::device, "f16 weights");
            L.run([&](command_recorder& rec) { expand(rec, 0); });
          }
          pv.pl = &L.pipes.get({"mul_mm_f16", gguf::type_id::f16, pv.v.defines, 3u});
        } else if (pv.v.mmq) {
          if (pv.v.swiglu && (N % 128 || K % 64)) throw error("SW=1 needs N a multiple of 128 and K of 64");
          if (pv.v.swiglu && !yh) yh.emplace(L.ctx, std::size_t(nt) * N, memory_kind::device, "y f16 (SW)");
          pv.pl = &L.pipes.get({"mul_mm_f16", fmt, pv.v.defines, pv.v.swiglu ? 4u : 3u});
        } else if (pv.v.read) {
          pv.pl = &L.pipes.get({"read_bw", std::nullopt, pv.v.defines, 2u});
        } else if (pv.v.small) {
          pv.pl = &L.pipes.get({"mul_mm_small", fmt, pv.v.defines, 3u});
        } else if (pv.v.reg) {
          pv.pl = &L.pipes.get({"mul_mm_reg", fmt, pv.v.defines, 3u});
        } else if (pv.v.iq) {
          pv.pl = &L.pipes.get({"mul_mmq", fmt, pv.v.defines, 4u});
        } else {
          pv.pl = &L.pipes.get({pv.v.mmvq ? "mmvq" : pv.v.mm ? "mul_mm" : "matvec", fmt, pv.v.defines, pv.v.mm ? 3u : 6u});
        }
      } catch (const std::exception& e) {
        std::printf("  %-36s build failed: %s\n", vn.c_str(), e.what());
        continue;
      }
      vs.push_back(std::move(pv));
    }
    auto record = [&](const prepared& pv, command_recorder& rec, std::uint32_t copy) {
      const variant& v = pv.v;
      const std::uint32_t groups = (N + v.rows_per_wg - 1) / v.rows_per_wg;
      const binding wbind{{wb[copy].handle(), 0, wb[copy].size(), 0}, false};
      if (v.read) {
        const std::uint32_t n16 = std::uint32_t(w.size() / 16);
        const std::uint32_t g = v.read_groups ? v.read_groups : (n16 + v.read_wg * v.read_u - 1) / (v.read_wg * v.read_u);
        const binding b[] = {wbind, whole(yb, 4, true)};
        rec.dispatch(*pv.pl, b, &n16, sizeof n16, g);
      } else if (v.small || v.reg) {
        const mm_small_pc pc{K, N, nt, row_bytes, 0, K, 0, N, 0, 0};
        const binding b[] = {wbind, whole(xhb, 6, false), whole(yb, 4, true)};
        rec.dispatch(*pv.pl, b, &pc, sizeof pc, (N + 31) / 32, (nt + v.bn - 1) / v.bn);
      } else if (v.iq) {
        const mmq_pc pc{K, N, nt, row_bytes, 0, K / 16, 0, K / 32, 0, N};
        const binding b[] = {wbind, whole(qb, 2, false), whole(sb, 3, false), whole(yb, 4, true)};
        rec.dispatch(*pv.pl, b, &pc, sizeof pc, (N + v.bm - 1) / v.bm, (nt + v.bn - 1) / v.bn);
      } else if (v.swiglu) {  // one dispatch over gate (rows 0 .. N/2) and up (N/2 .. N)
        mm_f16_pc pc{K, N, nt, 0, 0, K, 0, N / 2, row_bytes};
        pc.up_off = N / 2 * row_bytes;
        pc.h_stride = N / 2;
        const binding b[] = {wbind, whole(xhb, 6, false), whole(yb, 4, true), whole(*yh, 8, true)};
        const std::uint32_t gw = N / v.bm, gt = (nt + v.bn - 1) / v.bn;
        if (v.tok_fast) rec.dispatch(*pv.pl, b, &pc, sizeof pc, gt, gw, 1);
        else rec.dispatch(*pv.pl, b, &pc, sizeof pc, gw, gt, 1);
      } else if (v.mm3 || v.mmq) {
        if (v.mm3 && v.mm3_expand) expand(rec, copy);
        const std::uint32_t S = v.splits, chunk = (K / S + 63) / 64 * 64;
        const mm_f16_pc pc{K, N, nt, 0, 0, K, 0, N, v.mmq ? row_bytes : 0, chunk, nt * N};
        const binding b[] = {v.mmq ? wbind : whole(*w16, 5, false), v.xh ? whole(xhb, 6, false) : whole(xb, 1, false),
                             S > 1 ? whole(*parts, 7, true) : whole(yb, 4, true)};
        const std::uint32_t gw = (N + v.bm - 1) / v.bm, gt = (nt + v.bn - 1) / v.bn, gs = (K + chunk - 1) / chunk;
        if (v.tok_fast) rec.dispatch(*pv.pl, b, &pc, sizeof pc, gt, gw, gs);
        else rec.dispatch(*pv.pl, b, &pc, sizeof pc, gw, gt, gs);
        if (S > 1) {
          const split_k_sum_pc sp{N, nt, gs, nt * N, 0, N};
          const binding sb2[] = {whole(*parts, 7, false), whole(yb, 4, true)};
          const std::uint32_t n_el = N * nt, groups = (n_el + 255) / 256;
          rec.dispatch(L.pipes.get(sum_req), sb2, &sp, sizeof sp, std::min<std::uint32_t>(groups, 65535), (groups + 65534) / 65535);
        }
      } else if (v.mm) {
        const matvec_pc pc{K, N, nt, row_bytes, 0, K, 0, N, 0, 0, 0, 0, 0, 0, 0.0f};
        const binding b[] = {wbind, whole(xb, 1, false), whole(yb, 4, true)};
        rec.dispatch(*pv.pl, b, &pc, sizeof pc, (N + v.bm - 1) / v.bm, (nt + v.bn - 1) / v.bn);
      } else if (v.mmvq) {
        const mmvq_pc pc{K, N, nt, row_bytes, 0, K / 16, 0, K / 32, 0, N, 0, N, 0, 0, 0, 1};
        const binding b[] = {wbind, whole(qb, 2, false), whole(sb, 3, false), whole(yb, 4, true), whole(yb, 4, false),
                             whole(qb, 2, false)};
        rec.dispatch(*pv.pl, b, &pc, sizeof pc, groups, 1);
      } else {
        const matvec_pc pc{K, N, nt, row_bytes, 0, K, 0, N, 0, 1, 0, 0, 0, 0, 0.0f};
        const binding b[] = {wbind, whole(xb, 1, false), whole(yb, 4, true), whole(xb, 1, false), whole(xb, 1, false),
                             whole(xb, 1, false)};
        rec.dispatch(*pv.pl, b, &pc, sizeof pc, groups, (nt + 7) / 8);
      }
    };
    // Correctness: poison y, one call on copy 0, compare with the float64 product.
    for (auto& pv : vs) {
      std::vector<float> poison(std::size_t(nt) * N, std::nanf(""));
      L.upload(yb, poison.data(), poison.size() * 4);
      L.run([&](command_recorder& rec) { record(pv, rec, 0); });
      L.copy(yb, yr);
      std::vector<float> y(std::size_t(nt) * N);
      std::memcpy(y.data(), yr.mapped(), y.size() * 4);
      double err = 0, norm = ref_norm;
      if (pv.v.swiglu) {  // y holds N/2 outputs a token: silu(gate) * up
        norm = 0;
        for (const std::uint32_t t : checked_tokens(nt))
          for (std::size_t r = 0; r < N / 2; ++r) {
            const double gs = ref[std::size_t(t) * N + r], us = ref[std::size_t(t) * N + N / 2 + r];
            const double want = gs / (1.0 + std::exp(-gs)) * us, got = y[std::size_t(t) * (N / 2) + r];
            err += (got - want) * (got - want);
            norm += want * want;
          }
      } else {
        for (const std::uint32_t t : checked_tokens(nt))
          for (std::size_t r = 0; r < N; ++r) {
            const std::size_t i = std::size_t(t) * N + r;
            err += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
          }
      }
      pv.rel = pv.v.read ? 0.0 : std::sqrt(err / norm);  // NaN if any output was left unwritten
    }
    // Timing: ~0.3 s of warm-up load, then three passes over all variants, best pass kept;
    // `iters` dependent calls per pass, rotating over the copies.
    for (double spent = 0; spent < 300.0 && !vs.empty();)
      spent += L.run([&](command_recorder& rec) {
        for (std::uint32_t i = 0; i < iters; ++i) record(vs[0], rec, i % copies);
      });
    for (int pass = 0; pass < 3; ++pass)
      for (auto& pv : vs) {
        const double ms = L.run([&](command_recorder& rec) {
          for (std::uint32_t i = 0; i < iters; ++i) record(pv, rec, i % copies);
        });
        pv.best_us = std::min(pv.best_us, ms * 1e3 / iters);
      }
    for (const auto& pv : vs) {
      std::printf("  %-36s %10.2f %10.1f %10.2e", pv.name.c_str(), pv.best_us, double(w.size()) / (pv.best_us * 1e3), pv.rel);
      if (nt > 1) std::printf("  %.1f TFLOP/s", 2.0 * K * N * nt / (pv.best_us * 1e6));
      std::printf("\n");
      if (pv.pl && !pv.pl->stats.empty()) std::printf("      driver: %s\n", pv.pl->stats.c_str());
    }
  }
}

// Raw tensor-core rate of every f16 shape the device lists for VK_NV_cooperative_matrix
// (shaders/probe_mma.glsl): TFLOP/s of register-only multiply-accumulates.
void mma_probe(lab& L) {
  std::printf("\nVK_NV_cooperative_matrix shapes (M x N x K, A/B/C/D types, scope):\n");
  std::vector<std::array<std::uint32_t, 4>> shapes;  // M, N, K, acc16
  for (const auto& c : L.ctx.physical().getCooperativeMatrixPropertiesNV()) {
    std::printf("  %ux%ux%u  %s/%s/%s/%s  %s\n", c.MSize, c.NSize, c.KSize, vk::to_string(c.AType).c_str(),
                vk::to_string(c.BType).c_str(), vk::to_string(c.CType).c_str(), vk::to_string(c.DType).c_str(),
                vk::to_string(c.scope).c_str());
    if (c.AType == vk::ComponentTypeNV::eFloat16 && c.BType == vk::ComponentTypeNV::eFloat16 &&
        c.scope == vk::ScopeNV::eSubgroup && c.CType == c.DType)
      shapes.push_back({c.MSize, c.NSize, c.KSize, c.CType == vk::ComponentTypeNV::eFloat16 ? 1u : 0u});
  }
  gpu_buffer x(L.ctx, 1 << 16, memory_kind::device, "probe x");
  std::vector<std::uint16_t> ones(1 << 15, 0x3c00);
  L.upload(x, ones.data(), ones.size() * 2);
  const std::uint32_t groups = 132 * 8, wg = 128, iters = 2048;
  gpu_buffer y(L.ctx, std::size_t(groups) * (wg / 32) * 16 * 16 * 4, memory_kind::device, "probe y");
  for (const auto& [m, n, k, acc16] : shapes) {
    std::vector<std::pair<std::string, std::string>> d{{"WG", std::to_string(wg)}, {"COOPMAT", "1"}, {"MM", std::to_string(m)},
                                                       {"NN", std::to_string(n)}, {"KK", std::to_string(k)}};
    if (acc16) d.emplace_back("ACC16", "1");
    const pipeline* pl = nullptr;
    try {
      pl = &L.pipes.get({"probe_mma", std::nullopt, d, 2});
    } catch (const std::exception& e) {
      std::printf("  %ux%ux%u%s: build failed: %s\n", m, n, k, acc16 ? " acc16" : "", e.what());
      continue;
    }
    const std::uint32_t pc = iters;
    auto once = [&] {
      return L.run([&](command_recorder& rec) {
        const binding b[] = {{{y.handle(), 0, y.size(), 1}, true}, {{x.handle(), 0, x.size(), 2}, false}};
        rec.dispatch(*pl, b, &pc, sizeof pc, groups);
      });
    };
    double best = 1e30;
    for (int r = 0; r < 4; ++r) best = std::min(best, once());
    const double flops = 2.0 * m * n * k * 4 * iters * (wg / 32) * groups;
    std::printf("  probe %ux%ux%u %s: %.3f ms, %.1f TFLOP/s\n", m, n, k, acc16 ? "f16 acc" : "f32 acc", best,
                flops / (best * 1e9));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> formats{"q4_k", "q6_k", "q8_0"};
  std::vector<std::pair<std::uint32_t, std::uint32_t>> shapes{{4096, 4096}, {4096, 1024}, {4096, 12288}, {12288, 4096}};
  std::vector<std::string> variants{"mv", "q:WG=128:RPG=1:U=2"};
  std::uint32_t nt = 1, iters = 200;
  std::uint64_t rotate_mb = 1024;
  bool probe = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--formats") formats = split(next(), ',');
    else if (a == "--variants") variants = split(next(), ',');
    else if (a == "--tokens") nt = std::uint32_t(std::stoul(next()));
    else if (a == "--iters") iters = std::uint32_t(std::stoul(next()));
    else if (a == "--rotate-mb") rotate_mb = std::stoull(next());
    else if (a == "--mma-probe") probe = true;
    else if (a == "--stats") ::setenv("STRATA_VK_PIPELINE_STATS", "1", 1);  // before the context opens the device
    else if (a == "--shapes") {
      shapes.clear();
      for (const auto& s : split(next(), ',')) {
        const auto p = split(s, 'x');
        if (p.size() != 2) throw error("shape '" + s + "' is not KxN");
        shapes.emplace_back(std::uint32_t(std::stoul(p[0])), std::uint32_t(std::stoul(p[1])));
      }
    } else throw error("unknown option " + a);
  }
  lab L;
  std::printf("device: %s (%s), subgroup %u, int8 dot products %s\n", L.ctx.info().name.c_str(),
              L.ctx.info().driver.c_str(), L.ctx.info().subgroup_size,
              L.ctx.info().int_dot ? (std::getenv("STRATA_VK_NO_DOT4") ? "off (STRATA_VK_NO_DOT4)" : "on") : "no");
  if (const char* v = std::getenv("STRATA_VK_PIPELINE_STATS"); v && std::string_view(v) == "1" && !L.ctx.info().pipeline_stats)
    std::printf("(--stats: this driver has no VK_KHR_pipeline_executable_properties)\n");
  if (probe) {
    mma_probe(L);
    return 0;
  }
  if (L.ctx.info().nv_coopmat_int8 && std::any_of(variants.begin(), variants.end(), [](const std::string& v) { return v.rfind("iq", 0) == 0; })) {
    mmq_layout = probe_mma_layout(L.ctx, L.pipes);
    std::printf("accumulator layout: %s\n", mmq_layout ? ("rows +" + mmq_layout->row_offsets + ", columns +" + mmq_layout->col_offsets).c_str()
                                                      : "not lane-uniform (no int8 GEMM)");
  }
  if (std::any_of(variants.begin(), variants.end(), [](const std::string& v) { return v.rfind("mr", 0) == 0; })) {
    std::string dump;
    mmr_layout = probe_f16_fragments(L.ctx, L.pipes, &dump);
    std::printf("f16 fragments: %s\n  (%s)\n",
                mmr_layout ? ("A rows +" + mmr_layout->a_rows + ", columns +" + mmr_layout->a_cols + "; B " +
                              (mmr_layout->b_ks.empty() ? std::string("from shared memory") : "k +" + mmr_layout->b_ks)).c_str()
                           : "A not of the quad form (no mul_mm_reg)",
                dump.c_str());
  }
  for (const auto& f : formats) {
    const auto t = gguf::type_from_name(f);
    if (!t) throw error("unknown format " + f);
    quant::visit(*t, [&](auto fmt) {
      using Fmt = decltype(fmt);
      if constexpr (Fmt::block_elems > 1 && !std::is_same_v<Fmt, quant::q8_1> && !std::is_same_v<Fmt, quant::q8_k>)
        bench_format<Fmt>(L, shapes, variants, nt, iters, rotate_mb << 20);
      else
        throw error("format " + f + " is not a weight format the lab covers");
    });
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "vk_matvec_bench: %s\n", e.what());
  return 1;
}
