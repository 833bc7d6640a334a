// Decode attention over a compressed KV cache on the CPU backend: one query token, Qwen3-8B's
// geometry per layer (32 query heads, 8 KV heads, head_dim 128), cached depths 4K and 32K,
// for f16, q8_0, tq4, tq3, K tq4 + V tq3 and K q8_0 + V tq3 (full-precision window 128).
// Reports µs per layer, the same ×36 layers (ms per token of attention alone), KV bytes per
// token over 36 layers and the append (quantize) cost per token and layer.
// Usage: kv_attention_bench [threads=1] [depths=4096,32768] [cases=all, e.g. f16,q8_0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "strata/kernels/cpu/backend.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace {

using namespace strata;
using clock_type = std::chrono::steady_clock;

struct kv_case {
  const char* name;
  kv::kv_type k, v;
};

}  // namespace

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? unsigned(std::atoi(argv[1])) : 1;
  const auto split = [](std::string s) {
    std::vector<std::string> v;
    for (; !s.empty();) {
      const auto c = s.find(',');
      v.push_back(s.substr(0, c));
      s = c == std::string::npos ? "" : s.substr(c + 1);
    }
    return v;
  };
  std::vector<std::uint32_t> depths{4096, 32768};
  if (argc > 2) {
    depths.clear();
    for (const auto& d : split(argv[2])) depths.push_back(std::uint32_t(std::stoul(d)));
  }
  const std::vector<std::string> only = argc > 3 ? split(argv[3]) : std::vector<std::string>{};
  constexpr std::uint32_t n_head = 32, n_head_kv = 8, d = 128, n_layer_model = 36;
  const kv_case cases[] = {{"f16", kv::kv_type::f16, kv::kv_type::f16},
                           {"q8_0", kv::kv_type::q8_0, kv::kv_type::q8_0},
                           {"tq4", kv::kv_type::tq4, kv::kv_type::tq4},
                           {"tq3", kv::kv_type::tq3, kv::kv_type::tq3},
                           {"k-tq4/v-tq3", kv::kv_type::tq4, kv::kv_type::tq3},
                           {"k-q8_0/v-tq3", kv::kv_type::q8_0, kv::kv_type::tq3}};
  kernels::cpu::backend be(threads, rt::select_kernel_table(rt::best_isa()));
  std::printf("kv_attention_bench: %u thread(s), %u/%u heads, head_dim %u, window 128\n\n", threads, n_head, n_head_kv, d);
  std::printf("| %-13s | %6s | %12s | %16s | %14s | %14s |\n", "kv k/v", "depth", "µs / layer", "ms / token (×36)",
              "KV B/token", "append µs/layer");
  std::printf("|---------------|--------|--------------|------------------|----------------|----------------|\n");
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (const std::uint32_t depth : depths) {
    be.reserve(1, 0);
    std::vector<float> kr(std::size_t(n_head_kv) * d), vr(kr.size()), q(std::size_t(n_head) * d), o(q.size());
    for (const auto& c : cases) {
      if (!only.empty() && std::find(only.begin(), only.end(), std::string(c.name)) == only.end()) continue;
      kv::kv_config cfg;
      cfg.n_layer = 1;
      cfg.n_head_kv = n_head_kv;
      cfg.head_dim = d;
      cfg.n_ctx = depth + 1;
      cfg.type_k = c.k;
      cfg.type_v = c.v;
      cfg.max_batch = 1;
      auto kv = be.make_kv(cfg);
      kv::block_table table(cfg);
      table.reserve_append(0, depth + 1);
      const auto t0 = clock_type::now();
      for (std::uint32_t j = 0; j <= depth; ++j) {
        for (auto& x : kr) x = nd(rng);
        for (auto& x : vr) x = nd(rng);
        kv.store(0, 0, j, table.slot(0, j), kr.data(), vr.data());
      }
      const double append_us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / (depth + 1);
      for (auto& x : q) x = nd(rng);
      const std::int32_t tok = 0, pos = std::int32_t(depth);
      const std::uint32_t seq = 0;
      const std::uint8_t want = 1;
      graph::batch b;
      b.tokens = {&tok, 1};
      b.positions = {&pos, 1};
      b.seq_ids = {&seq, 1};
      b.logits = {&want, 1};
      kernels::cpu::tensor qt{q.data(), 1, n_head * d, n_head * d};
      kernels::cpu::tensor ot{o.data(), 1, n_head * d, n_head * d};
      const graph::attention_params p{n_head, n_head_kv, d, 0, 1.0f / std::sqrt(float(d))};
      be.begin({b, &table});
      be.attention(kv, 0, qt, p, ot);  // warm-up
      int iters = 0;
      const auto t1 = clock_type::now();
      double el = 0;
      do {
        be.attention(kv, 0, qt, p, ot);
        ++iters;
        el = std::chrono::duration<double>(clock_type::now() - t1).count();
      } while (el < 0.5);
      const double us = el / iters * 1e6;
      std::printf("| %-13s | %6u | %12.1f | %16.2f | %14zu | %14.2f |\n", c.name, depth, us, us * n_layer_model / 1000.0,
                  kv.bytes_per_token() * n_layer_model, append_us);
      std::fflush(stdout);
    }
  }
  return 0;
}
