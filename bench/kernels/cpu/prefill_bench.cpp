// Prefill kernels one at a time, on one thread, timed by the thread's CPU time (so the numbers
// hold on a shared machine where wall time does not): for the Qwen3-0.6B layer shapes,
//   matmul  GFLOP/s (2·T·K·N) of backend::matmul for T tokens, through the row kernels
//           (dot_rows_4, the path before packing) and through the packed gemm, per format;
//   attn    GFLOP/s (4·d per query-key pair: q·k and p·v) of backend::attention for a
//           T-token prefill over an empty f16 cache (causal), 16 query / 8 KV heads, d = 128,
//           with the tier's tile kernel and with the scalar reference tile.
// Usage: prefill_bench [tokens=512] [8b] [format ...]   (formats: q4_k q6_k q8_0 by default;
// 8b: Qwen3-8B's shapes instead);
// STRATA_CPU_ISA=<tier> runs a lower tier than the CPU's best (avx512_vnni against amx);
// STRATA_CPU_PREFILL_CHUNKS=<n> cuts each matmul into n gemm calls (the backend's 4 a thread):
// 64 gives the one-group calls of a 16-thread pool on the Qwen3-0.6B shapes.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "strata/kernels/cpu/backend.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace {

using namespace strata;

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// CPU seconds per call of f, repeated until ≥ min_seconds of CPU time (after one warm-up).
template <class F>
double cpu_per_call(F&& f, double min_seconds) {
  f();
  int iters = 0;
  const double t0 = thread_seconds();
  double el = 0.0;
  do {
    f();
    ++iters;
    el = thread_seconds() - t0;
  } while (el < min_seconds || iters < 2);
  return el / iters;
}

template <class Fmt>
std::vector<std::byte> make_weights(std::size_t K, std::size_t N, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const std::size_t row_bytes = K / Fmt::block_elems * sizeof(typename Fmt::block);
  std::vector<std::byte> w(row_bytes * N);
  std::vector<float> x(K);
  for (std::size_t n = 0; n < N; ++n) {
    for (auto& v : x) v = nd(rng);
    quant::quantize_row<Fmt>(x.data(), reinterpret_cast<typename Fmt::block*>(w.data() + n * row_bytes), K);
  }
  return w;
}

struct shape {
  const char* name;
  std::uint32_t k, n;
};
// Qwen3-0.6B: n_embd 1024, 16 query heads and 8 KV heads of 128, n_ff 3072.
constexpr shape shapes_06b[] = {{"attn_q", 1024, 2048}, {"attn_k/v", 1024, 1024}, {"attn_output", 2048, 1024},
                                {"ffn_gate/up", 1024, 3072}, {"ffn_down", 3072, 1024}};
// Qwen3-8B (the `8b` argument): n_embd 4096, 32 query heads and 8 KV heads of 128, n_ff 12288.
constexpr shape shapes_8b[] = {{"attn_q", 4096, 4096}, {"attn_k/v", 4096, 1024}, {"attn_output", 4096, 4096},
                               {"ffn_gate/up", 4096, 12288}, {"ffn_down", 12288, 4096}};
std::span<const shape> shapes = shapes_06b;

template <class Fmt>
void bench_format(const kernels::cpu::kernel_table& table, std::uint32_t T) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  kernels::cpu::backend be(1, table);
  if (const char* e = std::getenv("STRATA_CPU_PREFILL_CHUNKS")) {
    kernels::cpu::work_split split;
    split.prefill_chunks_per_thread = unsigned(std::atoi(e));
    be.set_work_split(split);
  }
  std::uint32_t widest = 0;
  for (const auto& s : shapes) widest = std::max(widest, s.k);
  (void)be.alloc(T, widest);  // reserve() sizes the activation scratch for the widest buffer
  be.reserve(T, 0);
  for (const auto& s : shapes) {
    const auto data = make_weights<Fmt>(s.k, s.n, rng);
    gguf::tensor_info info;
    info.name = "blk.0.w.weight";
    info.type = Fmt::gguf_type;
    info.n_dims = 2;
    info.ne = {s.k, s.n, 1, 1};
    info.data = {data.data(), data.size()};
    const auto packed = be.load(info);
    auto rows = packed;
    rows.packed = nullptr;
    kernels::cpu::buffer x(T, s.k), y(T, s.n);
    for (std::uint32_t t = 0; t < T; ++t)
      for (std::uint32_t i = 0; i < s.k; ++i) x.all().row(t)[i] = nd(rng);
    const double flop = 2.0 * T * s.k * s.n;
    const double r = flop / cpu_per_call([&] { be.matmul(rows, x.all(), y.all()); }, 0.5) / 1e9;
    const double p = packed.packed ? flop / cpu_per_call([&] { be.matmul(packed, x.all(), y.all()); }, 0.5) / 1e9 : 0.0;
    std::printf("| %-5s | %-11s | %5u x %-5u | %8.1f | %8.1f | %5.2fx |\n", std::string(Fmt::name).c_str(), s.name, s.k, s.n,
                r, p, p / r);
  }
}

void bench_attention(const kernels::cpu::kernel_table& table, std::uint32_t T, const char* label) {
  constexpr std::uint32_t n_head = 16, n_head_kv = 8, d = 128;
  kv::kv_config cfg;
  cfg.n_layer = 1;
  cfg.n_head_kv = n_head_kv;
  cfg.head_dim = d;
  cfg.n_ctx = T;
  cfg.max_batch = T;
  kernels::cpu::backend be(1, table);
  kernels::cpu::buffer q(T, n_head * d), k(T, n_head_kv * d), v(T, n_head_kv * d), o(T, n_head * d);
  be.reserve(T, 0);
  auto kv = be.make_kv(cfg);
  kv::block_table slots(cfg);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (const auto& b : {&q, &k, &v})
    for (std::uint32_t t = 0; t < T; ++t)
      for (std::uint32_t i = 0; i < b->all().cols; ++i) b->all().row(t)[i] = nd(rng);
  std::vector<std::int32_t> toks(T, 0), pos(T);
  std::vector<std::uint32_t> seqs(T, 0);
  std::vector<std::uint8_t> want(T, 0);
  for (std::uint32_t t = 0; t < T; ++t) pos[t] = std::int32_t(t);
  const graph::batch b{toks, pos, seqs, want};
  slots.reserve_append(0, T);
  be.begin({b, &slots});
  be.kv_store(kv, 0, k.all(), v.all());
  const graph::attention_params p{n_head, n_head_kv, d, 0, 1.0f / std::sqrt(float(d))};
  const double pairs = double(n_head) * T * (T + 1) / 2;
  const double sec = cpu_per_call([&] { be.attention(kv, 0, q.all(), p, o.all()); }, 0.5);
  std::printf("| attention f16, %4u-token prefill, %-9s | %8.1f GFLOP/s | %7.2f ms |\n", T, label, 4.0 * d * pairs / sec / 1e9,
              sec * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint32_t T = argc > 1 ? std::uint32_t(std::atoi(argv[1])) : 512;
  std::vector<std::string> only;
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "8b")
      shapes = shapes_8b;
    else
      only.emplace_back(argv[i]);
  }
  const auto tier = rt::engine_isa();
  const auto& table = rt::select_kernel_table(tier);
  std::printf("prefill_bench: %u tokens, 1 thread, tier %s, GFLOP/s by thread CPU time\n\n", T,
              std::string(kernels::cpu::name_of(tier)).c_str());
  std::printf("| fmt   | matrix      | K     x N     | rows GF/s | packed GF/s | gain |\n");
  std::printf("|-------|-------------|---------------|----------:|------------:|-----:|\n");
  const auto want = [&](std::string_view n) {
    if (only.empty()) return n == "q4_k" || n == "q6_k" || n == "q8_0";
    for (const auto& o : only)
      if (o == n) return true;
    return false;
  };
  if (want("q4_k")) bench_format<quant::q4_k>(table, T);
  if (want("q6_k")) bench_format<quant::q6_k>(table, T);
  if (want("q8_0")) bench_format<quant::q8_0>(table, T);
  std::printf("\n");
  bench_attention(table, T, "tier");
  auto ref = table;
  ref.attention = nullptr;  // the backend then runs attention_tile_reference
  bench_attention(ref, T, "reference");
  return 0;
}
