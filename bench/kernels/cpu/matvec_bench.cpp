// Matvec / matmul throughput of every weight format on every kernel tier this CPU runs,
// through backend::matmul (activation quantization included, as in the engine):
//   decode  GB/s of weight bytes for 1 token × {4096×4096, 4096×14336, 12288×4096 (K×N)} on 1
//           and 2 threads through the row kernels (dot_row), and on 2 threads through the
//           packed GEMM the engine runs for formats with a packed layout (backend::load packs
//           them), with the fraction of the measured DRAM read bandwidth (a plain summing loop).
//           Each call uses the next of several copies of the matrix (≥ 1 GiB in all), so the
//           weights stream from DRAM as in real decoding instead of sitting in the LLC;
//   prefill GFLOP/s (2·T·K·N) for a batch of T = 512 tokens on 4096×4096 (the scalar tier
//           runs 32 tokens: its rate is flat in T and 512 would take minutes per format).
// Usage: matvec_bench [format ...]   (default: every weight format in quant::all)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "strata/kernels/cpu/backend.hpp"
#include "strata/quant/all.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace {

using namespace strata;
using kernels::cpu::isa;
using clock_type = std::chrono::steady_clock;

// Seconds per call of f, repeated until ≥ min_seconds have passed (after one warm-up call).
template <class F>
double time_per_call(F&& f, double min_seconds) {
  f();
  int iters = 0;
  const auto t0 = clock_type::now();
  double el = 0.0;
  do {
    f();
    ++iters;
    el = std::chrono::duration<double>(clock_type::now() - t0).count();
  } while (el < min_seconds || iters < 2);
  return el / iters;
}

// DRAM read bandwidth with `threads` threads summing disjoint parts of a 512 MiB buffer (the
// reference for "% of peak"; a vectorized integer sum, so not a hard upper bound).
double read_bandwidth(unsigned threads) {
  static std::vector<std::uint64_t> buf(std::size_t(64) << 20, 1);
  std::vector<std::uint64_t> sums(threads);
  const auto run = [&] {
    std::vector<std::thread> ts;
    const std::size_t per = buf.size() / threads;
    for (unsigned t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        // One 64-byte line per step, prefetched 4 KiB ahead like the kernels' weight stream.
        std::uint64_t s[8] = {};
        const std::uint64_t* p = buf.data() + t * per;
        for (std::size_t i = 0; i < per; i += 8) {
          __builtin_prefetch(p + i + 512);
          for (int k = 0; k < 8; ++k) s[k] += p[i + k];
        }
        sums[t] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
      });
    for (auto& t : ts) t.join();
  };
  return double(buf.size() * 8) / time_per_call(run, 1.0) / 1e9;
}

// N rows of K elements: 64 distinct rows quantized from random floats, tiled.
template <class Fmt>
std::vector<std::byte> make_weights(std::size_t K, std::size_t N) {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const std::size_t row_bytes = K / Fmt::block_elems * sizeof(typename Fmt::block);
  std::vector<std::byte> w(row_bytes * N);
  std::vector<float> x(K);
  for (std::size_t n = 0; n < std::min<std::size_t>(N, 64); ++n) {
    for (auto& v : x) v = nd(rng);
    quant::quantize_row<Fmt>(x.data(), reinterpret_cast<typename Fmt::block*>(w.data() + n * row_bytes), K);
  }
  for (std::size_t n = 64; n < N; ++n)
    std::memcpy(w.data() + n * row_bytes, w.data() + (n % 64) * row_bytes, row_bytes);
  return w;
}

struct shape {
  std::size_t k, n;
};
constexpr shape decode_shapes[] = {{4096, 4096}, {4096, 14336}, {12288, 4096}};
constexpr int n_shapes = int(std::size(decode_shapes));

struct result {
  double gbs[n_shapes][3] = {};  // [shape][rows 1T, rows 2T, packed 2T (0: no packed layout)]
  double gflops = 0.0;
};

template <class Fmt>
result run_format(const kernels::cpu::kernel_table& table, bool scalar) {
  result res;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int s = 0; s < n_shapes; ++s) {
    const std::size_t K = decode_shapes[s].k, N = decode_shapes[s].n;
    const auto data = make_weights<Fmt>(K, N);
    // Copies to rotate through: at least 1 GiB, at least 2.
    const std::size_t copies = std::max<std::size_t>(2, ((std::size_t(1) << 30) + data.size() - 1) / data.size());
    std::vector<std::vector<std::byte>> mats(copies, data);
    std::vector<gguf::tensor_info> infos(copies);
    for (std::size_t c = 0; c < copies; ++c) {
      auto& info = infos[c];
      info.name = "blk.0.w.weight";
      info.type = Fmt::gguf_type;
      info.n_dims = 2;
      info.ne = {K, N, 1, 1};
      info.data = {mats[c].data(), mats[c].size()};
    }
    for (unsigned threads = 1; threads <= 2; ++threads) {
      kernels::cpu::backend be(threads, table);
      const std::uint32_t T = (s == 0 && threads == 2) ? (scalar ? 32 : 512) : 1;
      const auto x = be.alloc(T, std::uint32_t(K)), y = be.alloc(T, std::uint32_t(N));
      be.reserve(T, 0);
      for (std::uint32_t t = 0; t < T; ++t)
        for (std::size_t i = 0; i < K; ++i) x.all().row(t)[i] = nd(rng);
      const auto one = x.all().first_rows(1);
      const auto y1 = y.all().first_rows(1);
      // load() packs formats with a packed layout (a copy per matrix); the row path reads the
      // original bytes.
      std::vector<kernels::cpu::weight> ws;
      for (const auto& info : infos) ws.push_back(be.load(info));
      std::vector<kernels::cpu::weight> rows = ws;
      for (auto& w : rows) w.packed = nullptr;
      std::size_t next = 0;
      const double sec = time_per_call([&] { be.matmul(rows[next++ % copies], one, y1); }, 0.3);
      res.gbs[s][threads - 1] = double(data.size()) / sec / 1e9;
      if (threads == 2 && ws[0].packed) {
        const double psec = time_per_call([&] { be.matmul(ws[next++ % copies], one, y1); }, 0.3);
        res.gbs[s][2] = double(data.size()) / psec / 1e9;
      }
      if (T > 1) {  // compute-bound: one copy, hot in cache (the engine's path: packed if any)
        const double psec = time_per_call([&] { be.matmul(ws[0], x.all(), y.all()); }, 0.5);
        res.gflops = 2.0 * T * K * N / psec / 1e9;
      }
    }
  }
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> only(argv + 1, argv + argc);
  const isa best = rt::best_isa();
  std::printf("CPU tiers: best = %s; %u hardware threads\n", std::string(kernels::cpu::name_of(best)).c_str(),
              std::thread::hardware_concurrency());
  const double bw1 = read_bandwidth(1), bw2 = read_bandwidth(2);
  std::printf(
      "DRAM read bandwidth (summing loop): %.1f GB/s on 1 thread, %.1f GB/s on 2 threads (%% below: of the latter)\n\n",
      bw1, bw2);
  std::printf("%-7s %-12s", "", "");
  for (const auto& sh : decode_shapes) std::printf(" | decode %5zu x %-5zu (K x N)     ", sh.k, sh.n);
  std::printf(" | prefill\n%-7s %-12s", "format", "tier");
  for (int s = 0; s < n_shapes; ++s) std::printf(" | %7s %6s %14s", "rows 1T", "2T", "packed 2T (%)");
  std::printf(" | GFLOP/s\n");
  const auto run = [&](auto fmt) {
    using Fmt = decltype(fmt);
    if (std::is_same_v<Fmt, quant::q8_1> || std::is_same_v<Fmt, quant::q8_k>) return;  // activation formats
    if (!only.empty() && std::find(only.begin(), only.end(), std::string(Fmt::name)) == only.end()) return;
    for (const isa tier : {isa::scalar, isa::avx2, isa::avx512, isa::avx512_vnni}) {
      if (int(tier) > int(best)) continue;
      const auto r = run_format<Fmt>(rt::select_kernel_table(tier), tier == isa::scalar);
      std::printf("%-7s %-12s", std::string(Fmt::name).c_str(), std::string(kernels::cpu::name_of(tier)).c_str());
      for (int s = 0; s < n_shapes; ++s) {
        const double shown = r.gbs[s][2] > 0 ? r.gbs[s][2] : r.gbs[s][1];  // % of what the engine runs
        std::printf(" | %7.2f %6.2f %7s (%3.0f%%)", r.gbs[s][0], r.gbs[s][1],
                    r.gbs[s][2] > 0 ? std::to_string(r.gbs[s][2]).substr(0, 5).c_str() : "-", 100.0 * shown / bw2);
      }
      std::printf(" | %9.1f%s\n", r.gflops, tier == isa::scalar ? " (T=32)" : "");
      std::fflush(stdout);
    }
  };
  [&]<class... F>(quant::type_list<F...>) { (run(F{}), ...); }(quant::all{});
}
