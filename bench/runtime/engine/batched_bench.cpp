// Aggregate throughput of rt::scheduler vs the number of concurrent streams, in the manner of
// llama-batched-bench: for each stream count N, N requests with distinct PP-token prompts are
// submitted at once and each generates TG tokens (end-of-generation ignored). Reports the mean
// and worst time to first token, the aggregate decode rate once every stream is decoding, and
// the speed-up of that rate over one stream.
// Each configuration runs -r times and the run with the best decode rate is reported (the
// machine may be shared; the best run is the least disturbed one), after one untimed short run
// of the same streams (--no-warmup skips it): a stream count's first steps build and record what
// that shape needs (on the H200 the first run of 4 streams in a fresh cache measured 82.6 t/s,
// the next 307.8).
//   batched_bench -m MODEL.gguf [-npp 64] [-ntg 32] [-npl 1,2,4,8,16,32] [-t 0] [-b 512] [-r 3]
//                 [--backend cpu|vulkan|auto] [-ngl N] [--kv-type f16|q8_0|tq3|...]
//                 [--f16-weights auto|on|off] [--gpu-budget SIZE] [--fit] (strata-run's tier options)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../kernel_profile_table.hpp"
#include "cli.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/runtime/scheduler.hpp"
#include "strata/tokenizer/tokenizer.hpp"

using namespace strata;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
  std::string model;
  std::uint32_t pp = 64, tg = 32, batch = 512, reps = 3;
  unsigned threads = 0;
  bool profile = false, warmup = true, record_ahead = true;
  std::vector<std::uint32_t> npl = {1, 2, 4, 8, 16, 32};
  app::backend_options backend;
  app::kv_options kv;
  app::tier_options tiers;
  app::log_options log;
};

// Flags as llama-batched-bench names them (-npp/-pp, -ntg/-tg, -npl), through apps/common/cli.hpp.
int parse(int argc, char** argv, options& o) {
  using namespace strata::app;
  cli c({"batched_bench",
         "-m FILE [options]",
         "Aggregate throughput of the scheduler (strata-serve's batching) against the number of concurrent "
         "streams: for each count N, N requests with distinct prompts of PP tokens each generate TG tokens; "
         "reports time to first token, the decode rate once all streams run, and the speed-up over one stream.",
         {{"1 to 32 streams, 64-token prompts, 32 tokens each", "batched_bench -m model.gguf -npp 64 -ntg 32 -npl 1,2,4,8,16,32"}}});
  auto& app = c.app();
  o.backend.backend = "cpu";
  add_model_option(app, o.model);
  const char* tests = "Tests";
  app.add_option("--pp", o.pp, "prompt tokens per stream")->type_name("N")->capture_default_str()
      ->check(in_range(1, 1 << 20))->group(tests);
  app.add_option("--tg", o.tg, "generated tokens per stream")->type_name("N")->capture_default_str()
      ->check(in_range(2, 1 << 20))->group(tests);
  app.add_option("--npl", o.npl, "stream counts to test")->type_name("N,...")->delimiter(',')->capture_default_str()
      ->group(tests);
  app.add_flag("!--no-record-ahead", o.record_ahead,
               "record step shapes on first use instead of before the first request (the scheduler's default)");
  app.add_flag("!--no-warmup", o.warmup, "skip the untimed short run of each stream count before its timed runs")
      ->group(tests);
  app.add_flag("--profile", o.profile,
               "Vulkan: per-kernel GPU time of each stream count's runs, per generated token (prompt steps "
               "included; serialises kernels, so a profiled run's rates are lower)")->group(tests);
  app.add_option("-r,--repetitions", o.reps, "runs per configuration (the best decode rate is reported)")
      ->type_name("N")->capture_default_str()->check(in_range(1, 1000))->group(tests);
  add_threads_option(app, o.threads);
  add_batch_option(app, o.batch, "most tokens per forward step");
  add_backend_options(app, o.backend);
  add_kv_options(app, o.kv);
  add_tier_options(app, o.tiers);
  c.add_log_options(o.log);
  return c.parse(argc, argv);
}

double since(clock_type::time_point t0, clock_type::time_point t) { return std::chrono::duration<double>(t - t0).count(); }

struct run_result {
  double ttft_mean_ms = 0, ttft_max_ms = 0, decode_tps = 0, e2e_tps = 0, wall_s = 0;
};

// One run: n streams submitted at once, each PP prompt tokens (distinct per stream, so no
// prefix is shared) and TG generated tokens.
run_result run_once(rt::model& m, const tokenizer::tokenizer& tok, const options& o, std::uint32_t n) {
  for (std::uint32_t s = 0; s < m.kv().n_seq(); ++s) m.kv().clear(s);  // no prefix reuse between runs
  rt::scheduler sched(m, tok, {.max_queue = n, .record_ahead = o.record_ahead});
  std::vector<std::shared_ptr<rt::generation_stream>> streams(n);
  std::vector<std::atomic<std::int64_t>> first_ns(n);  // time of each stream's first token
  const auto t0 = clock_type::now();
  for (std::uint32_t i = 0; i < n; ++i) {
    std::vector<std::int32_t> prompt(o.pp);
    for (std::uint32_t j = 0; j < o.pp; ++j) prompt[j] = std::int32_t((i * 7919u + j * 104729u + 13u) % tok.n_vocab());
    sampling::sampler_params p;
    p.temperature = 0;
    p.max_tokens = std::int32_t(o.tg);
    first_ns[i] = 0;
    streams[i] = std::make_shared<rt::generation_stream>();
    streams[i]->set_notify([&first_ns, i, t0] {
      if (first_ns[i].load() == 0)
        first_ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count();
    });
    if (!sched.submit(streams[i], {std::move(prompt), sampling::sampler(p, tok.n_vocab()),
                                   sampling::stop_conditions({}, std::int32_t(o.tg), {})}))
      throw error("queue refused a request");
  }
  rt::generation_stream::state st;
  for (std::uint32_t i = 0; i < n; ++i)
    while (true) {
      streams[i]->take(st);
      if (st.done) break;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  const double wall = since(t0, clock_type::now());
  double ttft_sum = 0, ttft_max = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const double t = double(first_ns[i].load()) * 1e-9;
    ttft_sum += t;
    ttft_max = std::max(ttft_max, t);
  }
  // Decode phase: from the moment every stream has its first token to the end; the tokens made
  // in it are all but each stream's first.
  const double decode_s = wall - ttft_max;
  return {1e3 * ttft_sum / n, 1e3 * ttft_max, decode_s > 0 ? double(n) * (o.tg - 1) / decode_s : 0.0,
          double(sched.stats().generated_tokens) / wall, wall};
}

}  // namespace

int main(int argc, char** argv) try {
  options o;
  if (const int rc = parse(argc, argv, o); rc >= 0) return rc;
  if (o.npl.empty() || std::find(o.npl.begin(), o.npl.end(), 0u) != o.npl.end())
    throw error("--npl: stream counts must be at least 1");
  const std::uint32_t max_n = *std::max_element(o.npl.begin(), o.npl.end());
  rt::engine_options eo;
  eo.threads = o.threads;
  app::apply(o.backend, eo);
  app::apply(o.kv, eo);
  app::apply(o.tiers, eo);
  eo.n_seq = max_n;
  eo.n_batch = std::max(o.batch, max_n);
  eo.max_outputs = max_n;
  eo.n_ctx = max_n * (o.pp + o.tg + 32);
  eo.gpu_profile = o.profile;
  auto m = rt::model::load(o.model, eo);
  const auto tok = tokenizer::tokenizer::from_gguf(m->gguf());
  std::printf("model %s, %s, KV %s/%s, PP %u, TG %u, n_batch %u, best of %u runs\n\n", o.model.c_str(),
              m->backend_description().c_str(), std::string(kv::name_of(eo.type_k)).c_str(),
              std::string(kv::name_of(eo.type_v)).c_str(), o.pp, o.tg, eo.n_batch, o.reps);
  // Steps recorded: how many steps of the timed runs the GPU recorded rather than replayed (new
  // step sizes; runtime/vulkan/step_buckets.hpp), and the host time that took.
  std::printf("| streams | TTFT mean ms | TTFT max ms | decode t/s (all streams) | speed-up vs 1 | end-to-end t/s | wall s | "
              "steps recorded (ms) |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  double single = 0;  // decode t/s per stream of the first configuration
  for (const std::uint32_t n : o.npl) {
    run_result best;
    if (o.warmup) {
      options w = o;
      w.tg = std::min<std::uint32_t>(o.tg, 4);
      run_once(*m, tok, w, n);
      if (o.profile) m->reset_kernel_profile();
    }
    const rt::model::recording_counters rec0 = m->step_recordings();
    for (std::uint32_t rep = 0; rep < o.reps; ++rep) {
      const run_result r = run_once(*m, tok, o, n);
      if (r.decode_tps > best.decode_tps) best = r;
    }
    if (n == o.npl.front()) single = best.decode_tps / n;
    const rt::model::recording_counters rec = m->step_recordings();
    std::printf("| %u | %.1f | %.1f | %.2f | %.2fx | %.2f | %.2f | %llu (%.1f) |\n", n, best.ttft_mean_ms, best.ttft_max_ms,
                best.decode_tps, single > 0 ? best.decode_tps / single : 0.0, best.e2e_tps, best.wall_s,
                static_cast<unsigned long long>(rec.steps - rec0.steps), rec.ms - rec0.ms);
    std::fflush(stdout);
    if (o.profile) {  // every step of this count's runs (prompt steps too), per generated token
      strata::bench::print_kernel_profile(m->kernel_profile(), double(n) * o.tg * o.reps,
                                          std::to_string(n) + " streams, per generated token");
      m->reset_kernel_profile();
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "batched_bench: error: %s\n", e.what());
  return 1;
}
