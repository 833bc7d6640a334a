// strata-bench: llama-bench-style throughput. pp<N>: prompt processing of N tokens in batches;
// tg<N>: N single-token decode steps; "@ d<D>": after D tokens already in the KV cache.
// Repetitions report mean ± sample standard deviation of tokens/s; --json prints one object.
// Each row also gives the memory-tier cost model's prediction for the placement that ran
// (include/strata/tiers/, link speeds from `strata-run --plan --probe`'s cache, else assumed):
// a gap over 20% between predicted and measured is a fault in the model or the engine.
#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "strata/kv/kv_config.hpp"
#include "strata/kernels/cpu/kv_storage.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/runtime/link_probe.hpp"
#include "strata/tiers/layer_split.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct result {
  std::string model, test, backend;
  unsigned threads = 0;
  std::uint32_t n_prompt = 0, n_gen = 0, depth = 0;
  std::uint64_t model_bytes = 0, params = 0;
  std::vector<double> samples;  // tokens/s per repetition
  std::string type_k, type_v;   // KV cache types
  std::uint64_t kv_bytes_per_token = 0;  // K + V over all layers, compressed rows
  double predicted_ts = 0;      // cost model (tiers/cost.hpp) for the placement that ran
  double mean() const {
    double s = 0;
    for (double x : samples) s += x;
    return samples.empty() ? 0 : s / double(samples.size());
  }
  double sd() const {
    if (samples.size() < 2) return 0;
    const double m = mean();
    double s = 0;
    for (double x : samples) s += (x - m) * (x - m);
    return std::sqrt(s / double(samples.size() - 1));
  }
};

std::vector<std::int32_t> random_tokens(std::size_t n, std::uint32_t vocab, std::mt19937& rng) {
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = std::int32_t(rng() % vocab);
  return t;
}

std::string human_size(double b) {
  char buf[32];
  if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1 << 30));
  else std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1 << 20));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  std::vector<std::uint32_t> n_prompt{512}, n_gen{128}, depths{0};
  std::vector<unsigned> threads{0};
  unsigned reps = 5;
  std::uint32_t n_batch = 512;
  std::string kv_type = "f16", kv_type_k, kv_type_v, backend = "cpu";
  std::uint32_t kv_window = strata::kv::default_full_precision_window;
  bool json = false;
  CLI::App app{"strata-bench: prompt-processing and generation throughput (llama-bench style)"};
  app.add_option("-m,--model", models, "GGUF model file(s)")->required();
  app.add_option("-p,--n-prompt", n_prompt, "prompt lengths to test (0 disables)")->delimiter(',');
  app.add_option("-n,--n-gen", n_gen, "generation lengths to test (0 disables)")->delimiter(',');
  app.add_option("-d,--n-depth", depths, "tokens already in the KV cache before each test")->delimiter(',');
  app.add_option("-t,--threads", threads, "CPU threads (0: physical cores)")->delimiter(',');
  app.add_option("-r,--repetitions", reps, "repetitions per test")->check(CLI::Range(1u, 1000u));
  app.add_option("-b,--batch-size", n_batch, "tokens per prefill step")->check(CLI::Range(1u, 1u << 16));
  app.add_option("--kv-type", kv_type, "KV cache type for K and V (f16, f32, q8_0, tq4, tq3, tq2)");
  app.add_option("--kv-type-k", kv_type_k, "KV cache type for K only (overrides --kv-type)");
  app.add_option("--kv-type-v", kv_type_v, "KV cache type for V only (overrides --kv-type)");
  app.add_option("--kv-window", kv_window, "full-precision recent tokens for compressed KV types (0: none)");
  int device = -1;
  bool profile = false;
  app.add_option("--backend", backend, "backend: cpu (default), vulkan, auto")->check(CLI::IsMember({"cpu", "vulkan", "auto"}));
  app.add_option("--device", device, "Vulkan device index (default: the best GPU)");
  int n_gpu_layers = -1;
  bool argmax = false;
  app.add_flag("--argmax", argmax,
               "tg: decode with the backend's greedy argmax (session::decode_argmax: ids come back, not logits)");
  app.add_option("--n-gpu-layers,--ngl", n_gpu_layers, "Vulkan: layers on the GPU, the rest on the CPU (-1: all)");
  app.add_flag("--profile", profile,
               "Vulkan: per-kernel GPU time of each test from timestamp queries (serialises kernels: "
               "throughput figures of a profiled run are lower)");
  app.add_flag("--json", json, "print one JSON object instead of a table");
  CLI11_PARSE(app, argc, argv);

  std::vector<result> results;
  try {
    for (const auto& path : models) {
      for (unsigned th : threads) {
        std::uint32_t need = 1;
        for (auto d : depths) {
          for (auto p : n_prompt) need = std::max(need, d + p);
          for (auto g : n_gen) need = std::max(need, d + g);
        }
        strata::rt::engine_options opt;
        opt.threads = th;
        opt.backend = strata::rt::parse_backend_kind(backend);
        opt.device = device;
        opt.n_gpu_layers = n_gpu_layers;
        opt.gpu_profile = profile;
        opt.n_ctx = need;
        opt.n_batch = n_batch;
        opt.max_outputs = 1;
        const auto kv_types = strata::kv::parse_kv_cache_types(kv_type, kv_type_k, kv_type_v);
        opt.type_k = kv_types.k;
        opt.type_v = kv_types.v;
        opt.kv_window = kv_window;
        auto m = strata::rt::model::load(path, opt);
        const auto& hp = m->hparams();
        std::uint64_t bytes = 0, params = 0;
        for (const auto& t : m->gguf().tensors()) {
          bytes += t.nbytes;
          params += t.n_elements();
        }
        const std::uint64_t kv_bytes =
            std::uint64_t(hp.n_layer) * hp.n_head_kv *
            (strata::kernels::cpu::kv_codec(opt.type_k, hp.head_dim).head_bytes() +
             strata::kernels::cpu::kv_codec(opt.type_v, hp.head_dim).head_bytes());
        const auto tag = [&](result r) {
          r.type_k = std::string(strata::kv::name_of(opt.type_k));
          r.type_v = std::string(strata::kv::name_of(opt.type_v));
          r.kv_bytes_per_token = kv_bytes;
          return r;
        };
        // The cost model's view of this run: -ngl's layer split, links from the probe cache.
        const bool on_gpu = !m->backend_description().starts_with("cpu");
        strata::rt::probe_options probe;
        probe.disk_file = path;
        probe.threads = th;
        probe.gpu = on_gpu;
        probe.device = device;
        const auto cache = strata::rt::link_cache_path(probe);
        auto cached = cache.empty() ? std::nullopt : strata::rt::load_cached_links(cache);
        const strata::tiers::link_speeds links = cached ? *cached : strata::tiers::assumed_desktop_links();
        std::fprintf(stderr, "strata-bench: predicted t/s from link speeds: %s\n", links.source.c_str());
        const auto predict = [&](std::uint32_t depth, std::uint32_t tokens, bool prefill) {
          strata::tiers::demand_options dopt;
          dopt.n_ctx = depth + (prefill ? tokens : tokens / 2 + 1);  // the average context a token sees
          dopt.kv_bytes_per_element = double(kv_bytes) / (2.0 * hp.n_layer * hp.n_embd_kv());
          dopt.max_batch = n_batch;
          const auto demand = strata::tiers::demand_from_gguf(m->gguf(), hp, dopt);
          const auto placement = strata::tiers::layer_split_placement(demand, on_gpu ? n_gpu_layers : 0);
          const std::uint32_t batch = prefill ? std::min(tokens, n_batch) : 1;
          return strata::tiers::evaluate(demand, placement, links, batch, strata::tiers::execution_order(demand))
              .tokens_per_second();
        };
        strata::rt::session s(*m);
        std::mt19937 rng(42);
        const std::string name = std::filesystem::path(path).filename().string();
        auto warm = random_tokens(std::min<std::uint32_t>(need, 16), hp.n_vocab, rng);
        s.prefill(warm);  // warm-up: page in weights, spin up threads
        // ... and one decode step, so the first timed token does not build and record the
        // decode step's pipelines (GPU) or pay first-touch costs.
        if (warm.size() < need) {
          if (argmax) s.decode_argmax(warm.front());
          else s.decode(warm.front());
        }
        if (const auto st = m->startup_report(); !st.empty()) std::fprintf(stderr, "strata-bench: %s: %s\n", name.c_str(), st.c_str());
        // Per-kernel GPU time of one test, per evaluated token (from the last repetition set).
        const auto report_profile = [&](const std::string& test, std::uint64_t tokens) {
          if (!profile) return;
          const auto prof = m->kernel_profile();
          double total = 0;
          for (const auto& k : prof) total += k.total_ms;
          std::fprintf(stderr, "\nprofile %s %s: %.3f ms GPU per token\n", name.c_str(), test.c_str(), total / double(tokens));
          for (const auto& k : prof)
            std::fprintf(stderr, "  %-40s %8.1f calls/tok %9.4f ms/tok %5.1f%%\n", k.label.c_str(),
                         double(k.calls) / double(tokens), k.total_ms / double(tokens), 100.0 * k.total_ms / total);
          m->reset_kernel_profile();
        };
        for (auto d : depths) {
          for (auto p : n_prompt) {
            if (!p) continue;
            result r{name, "pp" + std::to_string(p), m->backend_description(), th, p, 0, d, bytes, params, {}, {}, {}, 0};
            for (unsigned i = 0; i < reps; ++i) {
              s.clear();
              if (d) s.prefill(random_tokens(d, hp.n_vocab, rng));
              m->reset_kernel_profile();
              // The timed prompt continues the depth tokens, so only the new p tokens are evaluated.
              const auto cached = s.get_model().kv().tokens(0);
              std::vector<std::int32_t> all(cached.begin(), cached.end());
              const auto toks = random_tokens(p, hp.n_vocab, rng);
              all.insert(all.end(), toks.begin(), toks.end());
              const auto t0 = clock_type::now();
              s.prefill(all);
              const double sec = std::chrono::duration<double>(clock_type::now() - t0).count();
              r.samples.push_back(double(p) / sec);
            }
            report_profile(r.test, p);
            r.predicted_ts = predict(d, p, true);
            results.push_back(tag(r));
          }
          for (auto g : n_gen) {
            if (!g) continue;
            result r{name, "tg" + std::to_string(g), m->backend_description(), th, 0, g, d, bytes, params, {}, {}, {}, 0};
            for (unsigned i = 0; i < reps; ++i) {
              s.clear();
              if (d) s.prefill(random_tokens(d, hp.n_vocab, rng));
              m->reset_kernel_profile();
              const auto toks = random_tokens(g, hp.n_vocab, rng);
              const auto t0 = clock_type::now();
              if (argmax)
                for (auto t : toks) s.decode_argmax(t);
              else
                for (auto t : toks) s.decode(t);
              const double sec = std::chrono::duration<double>(clock_type::now() - t0).count();
              r.samples.push_back(double(g) / sec);
            }
            report_profile(r.test, g);
            r.predicted_ts = predict(d, g, false);
            results.push_back(tag(r));
          }
        }
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "strata-bench: error: " << e.what() << "\n";
    return 1;
  }

  if (json) {
    boost::json::array arr;
    for (const auto& r : results) {
      boost::json::array samples;
      for (double x : r.samples) samples.emplace_back(x);
      arr.emplace_back(boost::json::object{{"model", r.model},
                                           {"model_bytes", r.model_bytes},
                                           {"params", r.params},
                                           {"backend", r.backend},
                                           {"threads", r.threads},
                                           {"test", r.test},
                                           {"n_prompt", r.n_prompt},
                                           {"n_gen", r.n_gen},
                                           {"n_depth", r.depth},
                                           {"type_k", r.type_k},
                                           {"type_v", r.type_v},
                                           {"kv_bytes_per_token", r.kv_bytes_per_token},
                                           {"avg_ts", r.mean()},
                                           {"stddev_ts", r.sd()},
                                           {"predicted_ts", r.predicted_ts},
                                           {"samples_ts", std::move(samples)}});
    }
    std::cout << boost::json::serialize(boost::json::object{{"results", std::move(arr)}}) << "\n";
    return 0;
  }
  std::printf("| %-28s | %10s | %8s | %-24s | %9s | %14s | %20s | %10s |\n", "model", "size", "params", "backend",
              "kv k/v", "test", "t/s", "predicted");
  std::printf("| %.28s | %.10s | %.8s | %.24s | %.9s | %.14s | %.20s | %.10s |\n", "------------------------------",
              "------------", "----------", "--------------------------", "-----------", "----------------",
              "----------------------", "------------");
  for (const auto& r : results) {
    char test[64], ts[64], params[32], predicted[32];
    std::snprintf(predicted, sizeof predicted, "%.2f", r.predicted_ts);
    std::snprintf(test, sizeof test, "%s%s", r.test.c_str(), r.depth ? (" @ d" + std::to_string(r.depth)).c_str() : "");
    std::snprintf(ts, sizeof ts, "%.2f ± %.2f", r.mean(), r.sd());
    std::snprintf(params, sizeof params, "%.2f B", double(r.params) / 1e9);
    const std::string kv = r.type_k + "/" + r.type_v;
    std::printf("| %-28s | %10s | %8s | %-24s | %9s | %14s | %20s | %10s |\n", r.model.c_str(),
                human_size(double(r.model_bytes)).c_str(), params, r.backend.c_str(), kv.c_str(), test, ts, predicted);
  }
  return 0;
}
