// KV-cache attention lab for the Vulkan backend: prefill a sequence of --ctx random tokens in
// chunks of --chunk (kv_store + attention, as a prompt is evaluated), then time decode steps
// (one token: kv_store + attention) at that depth, for each KV type. Kernel times come from the
// backend's per-dispatch timestamps (profile), so they exclude submit and wait.
//   vk_kv_attention_bench [--kv f16,q8_0,tq3] [--ctx 4096] [--heads 32:8] [--dim 128]
//                         [--window 128] [--chunk 512] [--iters 20] [--no-prefill]
// Prints, per type: attention ms per prefill chunk and in total; per decode step the attention
// kernels (the split kernel plus its combine pass), the store kernel and every kernel's ms.
// The backend's toggles apply: STRATA_VK_TQ_GQA=0 runs the per-head compressed decode kernel
// (attention_q) instead of the grouped one (attention_qdec), STRATA_VK_GQA_ATTN=0 the same for
// f16/f32 KV. The append is attn_prep's (no head ops here, only its KV-head workgroups), or
// kv_store / kv_store_q with STRATA_VK_FUSE=0 or (compressed) STRATA_VK_TQ_PREP=0. qwen3-8b's
// attention at depth 4096 (32 query heads, 8 KV heads, head dim 128):
//   vk_kv_attention_bench --kv f16,tq3,q8_0 --ctx 4096 --heads 32:8 --dim 128 --iters 50 --no-prefill
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "lab_args.hpp"
#include "strata/core/error.hpp"
#include "strata/kv/kv_config.hpp"

using namespace strata;

namespace {

using strata::bench::split;

struct options {
  std::vector<std::string> kv{"f16", "q8_0", "tq3"};
  std::uint32_t ctx = 4096, n_head = 32, n_head_kv = 8, dim = 128, window = 128, chunk = 512, iters = 20;
  bool prefill_timed = true;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw error("option " + a + " needs a value");
      return argv[++i];
    };
    auto num = [&](std::uint32_t lo, std::uint32_t hi) {
      const std::string v = next();
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end || n < lo || n > hi)
        throw error("option " + a + ": '" + v + "' is not a number in " + std::to_string(lo) + ".." + std::to_string(hi));
      return std::uint32_t(n);
    };
    if (a == "--kv") {
      o.kv = split(next(), ',');
    } else if (a == "--ctx") {
      o.ctx = num(1, 1u << 20);
    } else if (a == "--heads") {
      const auto h = split(next(), ':');
      if (h.size() != 2) throw error("--heads takes N_HEAD:N_HEAD_KV, e.g. 32:8");
      o.n_head = std::uint32_t(std::stoul(h[0]));
      o.n_head_kv = std::uint32_t(std::stoul(h[1]));
      if (!o.n_head_kv || o.n_head % o.n_head_kv) throw error("--heads: N_HEAD must be a multiple of N_HEAD_KV");
    } else if (a == "--dim") {
      o.dim = num(16, 256);
    } else if (a == "--window") {
      o.window = num(0, 1u << 16);
    } else if (a == "--chunk") {
      o.chunk = num(1, 4096);
    } else if (a == "--iters") {
      o.iters = num(1, 100000);
    } else if (a == "--no-prefill") {
      o.prefill_timed = false;
    } else {
      throw error("unknown option '" + a + "' (see the header of vk_kv_attention_bench.cpp)");
    }
  }
  return o;
}

struct batch_data {
  std::vector<std::int32_t> tokens, positions;
  std::vector<std::uint32_t> seq_ids;
  std::vector<std::uint8_t> logits;
  graph::batch view() const { return {tokens, positions, seq_ids, logits}; }
  static batch_data at(std::uint32_t pos, std::uint32_t n) {
    batch_data b;
    for (std::uint32_t i = 0; i < n; ++i) {
      b.tokens.push_back(0);
      b.positions.push_back(std::int32_t(pos + i));
      b.seq_ids.push_back(0);
      b.logits.push_back(0);
    }
    return b;
  }
};

// Total ms of the profiled kernels whose label starts with `prefix`.
double kernel_ms(const gpu::backend& be, const std::string& prefix) {
  double ms = 0;
  for (const auto& k : be.profile())
    if (k.label.rfind(prefix, 0) == 0) ms += k.total_ms;
  return ms;
}

// The append's kernels: attn_prep (fused), else kv_store / kv_store_q.
double store_ms(const gpu::backend& be) { return kernel_ms(be, "kv_store") + kernel_ms(be, "attn_prep"); }

void run(const options& o, const std::string& type) {
  const auto t = kv::parse_kv_type(type);
  gpu::backend_options bo;
  bo.profile = true;
  gpu::backend be(bo);
  const std::uint32_t QW = o.n_head * o.dim, KW = o.n_head_kv * o.dim, rows = std::max(o.chunk, 1u);
  const auto q = be.alloc(rows, QW), k = be.alloc(rows, KW), v = be.alloc(rows, KW), out = be.alloc(rows, QW);
  be.reserve(rows, 0);
  kv::kv_config cfg;
  cfg.n_layer = 1;
  cfg.n_head_kv = o.n_head_kv;
  cfg.head_dim = o.dim;
  cfg.n_ctx = o.ctx + o.iters;
  cfg.block_size = 32;
  cfg.type_k = cfg.type_v = t;
  cfg.full_precision_window = o.window;
  cfg.max_batch = rows;
  auto kv = be.make_kv(cfg);
  kv::block_table table(cfg);
  const graph::attention_params ap{o.n_head, o.n_head_kv, o.dim, 0, 1.0f / std::sqrt(float(o.dim))};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> hq(std::size_t(rows) * QW), hk(std::size_t(rows) * KW), hv(std::size_t(rows) * KW);
  auto step = [&](std::uint32_t pos, std::uint32_t n, bool attend) {
    for (auto* h : {&hq, &hk, &hv})
      for (auto& x : *h) x = nd(rng);
    const auto b = batch_data::at(pos, n);
    table.reserve_append(0, n);
    be.begin(graph::step_inputs{b.view(), &table});
    be.write(q.view(n), std::span(hq).first(std::size_t(n) * QW));
    be.write(k.view(n), std::span(hk).first(std::size_t(n) * KW));
    be.write(v.view(n), std::span(hv).first(std::size_t(n) * KW));
    be.kv_store(kv, 0, k.view(n), v.view(n));
    if (attend) be.attention(kv, 0, q.view(n), ap, out.view(n));
    be.finish();
    table.commit(0, b.tokens);
  };
  // Prefill: full chunks first (one recorded step shape), then the remainder. --no-prefill
  // stores them only (a backend replays the step it recorded for a batch size, so then no
  // prefill chunk may be a single token: parse() checks).
  const bool attend = o.prefill_timed;
  const auto w0 = std::chrono::steady_clock::now();
  std::uint32_t pos = 0, chunks = 0;
  for (; pos + o.chunk <= o.ctx; pos += o.chunk, ++chunks) step(pos, o.chunk, attend);
  if (pos < o.ctx) {
    step(pos, o.ctx - pos, attend);
    ++chunks;
    pos = o.ctx;
  }
  const double fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const double pre_attn = kernel_ms(be, "attention"), pre_store = store_ms(be);
  step(pos++, 1, true);  // records the decode step and builds its pipelines
  be.reset_profile();
  const auto w1 = std::chrono::steady_clock::now();
  for (std::uint32_t i = 1; i < o.iters; ++i) step(pos++, 1, true);
  const double dec_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w1).count();
  const double n_dec = double(o.iters - 1);
  std::string kernels;  // every kernel of the decode step
  for (const auto& kt : be.profile()) {
    char ms[32];
    std::snprintf(ms, sizeof ms, " %.4f ms", kt.total_ms / n_dec);
    kernels += "\n        " + kt.label + ms;
  }
  if (o.prefill_timed)
    std::printf("%-5s ctx %6u  prefill: attention %9.2f ms (%u chunks of %u, %.2f ms/chunk), store %.2f ms, wall %.1f s\n",
                type.c_str(), o.ctx, pre_attn, chunks, o.chunk, pre_attn / chunks, pre_store, fill_s);
  else
    std::printf("%-5s ctx %6u  prefill: stores only (%u chunks of %u), wall %.1f s\n", type.c_str(), o.ctx, chunks,
                o.chunk, fill_s);
  std::printf("      decode @ %u: attention %.4f ms/token, store %.4f ms/token (wall %.2f ms/step); per token:%s\n",
              o.ctx, kernel_ms(be, "attention") / n_dec, store_ms(be) / n_dec, 1e3 * dec_s / n_dec,
              kernels.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    if (o.iters < 2) throw error("--iters must be at least 2 (the first decode step records the step)");
    if (!o.prefill_timed && (o.chunk == 1 || o.ctx % o.chunk == 1))
      throw error("--no-prefill: a prefill chunk of one token would replay as the decode step; change --ctx or --chunk");
    for (const auto& t : o.kv) run(o, t);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vk_kv_attention_bench: %s\n", e.what());
    return 1;
  }
}
