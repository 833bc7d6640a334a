// strata-bench: llama-bench-style throughput. pp<N>: prompt processing of N tokens in batches;
// tg<N>: N single-token decode steps; "@ d<D>": after D tokens already in the KV cache.
// Repetitions report mean ± sample standard deviation of tokens/s; --json prints one object.
// Each row also gives the memory-tier cost model's prediction for the placement that ran
// (include/strata/tiers/, link speeds from `strata-run --plan --probe`'s cache, else assumed):
// a gap over 20% between predicted and measured is a fault in the model or the engine.
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

#include "cli.hpp"
#include "kernel_profile_table.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/kernels/cpu/kv_storage.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/runtime/link_probe.hpp"
#include "strata/tiers/engine_layout.hpp"
#include "strata/tiers/routing_prior.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct result {
  std::string model, test, backend;
  unsigned threads = 0;
  std::uint32_t n_prompt = 0, n_gen = 0, depth = 0;
  std::uint64_t model_bytes = 0, params = 0;
  std::vector<double> samples{};  // tokens/s per repetition
  std::string type_k{}, type_v{};  // KV cache types
  std::uint64_t kv_bytes_per_token = 0;  // K + V over all layers, compressed rows
  double predicted_ts = 0;      // cost model (tiers/cost.hpp) for the placement that ran
  strata::tiers::phase_cost predicted{};  // ... with its bytes per token on each link
  std::uint32_t n_gpu_layers = 0, cpu_expert_layers = 0;  // the layout: GPU blocks, hand-offs per step
  strata::rt::model::expert_cache_counters cache{};  // GPU expert cache over the timed runs (--expert-cache)
  double prior_hit = -1;  // the planner's routing prior for that cache and the test's steps (-1: no cache)
  strata::rt::model::stream_counters stream{};     // dense layer streaming over the timed runs
  strata::rt::model::disk_counters disk{};         // the disk tier (CPU blocks read from the file) over the timed runs
  double wall_seconds = 0;                         // of the timed repetitions
  strata::rt::model::stream_counters xstream{};    // CPU experts streamed in prompt steps over the timed runs
  // Decode tests on a recording backend: the decode step (the last step run), its dispatches and
  // the barriers between them: a token runs through barriers + 1 levels.
  std::uint32_t step_dispatches = 0, step_barriers = 0;
  strata::rt::model::handoff_counters handoffs{};  // the GPU's hand-offs to the CPU over the timed runs
  bool links_assumed = false;  // the prediction's links are the assumed desktop's (no probe cached)
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

// The untimed runs of a test's own shape before its repetitions go on until they have taken
// min_warmup_s: a GPU left near idle while a large model uploads drops its clocks (an H200 fell from
// 1,980 to 345-800 MHz after ~3.5 s of a 30B upload at 10% load, nvidia-smi every 250 ms) and
// ramps back only under load, so a single 55 ms warm-up left the first one or two repetitions of
// qwen3-30b-a3b pp512 at 45-85% of the rest (bench/RESULTS.md, session 18).
constexpr double min_warmup_s = 0.3;
constexpr unsigned max_warmup_runs = 20;
bool warm_again(double& spent, unsigned& runs, double sec) {
  spent += sec;
  return ++runs < max_warmup_runs && spent < min_warmup_s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata::app;
  cli c({"strata-bench",
         "-m FILE [options]",
         "Prompt-processing (pp) and generation (tg) throughput, llama-bench style: each test runs -r times "
         "on random tokens and reports mean and standard deviation of tokens/s. Comma-separated lists run "
         "every combination.",
         {{"pp512 and tg128 on 8 threads", "strata-bench -m model.gguf -p 512 -n 128 -t 8"},
          {"decode after 4096 tokens of context, 3-bit KV", "strata-bench -m model.gguf -p 0 -n 32 -d 4096 --kv-type tq3"},
          {"on the GPU with per-kernel times", "strata-bench -m model.gguf --backend vulkan --profile"},
          {"a MoE model in 12 GiB of GPU memory, placed by the planner",
           "strata-bench -m qwen3-30b-a3b-Q4_K_M.gguf --backend vulkan --gpu-budget 12G --fit -p 512 -n 128"},
          {"experts of the first 30 layers on the CPU", "strata-bench -m model.gguf --backend vulkan --n-cpu-moe 30"},
          {"machine-readable", "strata-bench -m model.gguf --json"}}});
  auto& app = c.app();
  std::vector<std::string> models;
  std::vector<std::uint32_t> n_prompt{512}, n_gen{128}, depths{0};
  std::vector<unsigned> threads{0};
  unsigned reps = 5;
  std::uint32_t n_batch = 0;  // -b; 0: the engine chooses (rt::prompt_step_tokens)
  backend_options bo;
  bo.backend = "cpu";  // a benchmark names its backend; auto would depend on the machine
  kv_options ko;
  tier_options to;
  log_options lo;
  bool json = false, profile = false, argmax = false, no_warmup = false, probe_links = false;
  app.add_option("-m,--model", models, "GGUF model file(s)")->type_name("FILE")->required()->group(group::model);
  const char* tests = "Tests";
  app.add_option("-p,--n-prompt", n_prompt, "prompt lengths to test (0 disables)")->type_name("N,...")
      ->delimiter(',')->capture_default_str()->group(tests);
  app.add_option("-n,--n-gen", n_gen, "generation lengths to test (0 disables)")->type_name("N,...")
      ->delimiter(',')->capture_default_str()->group(tests);
  app.add_option("-d,--n-depth", depths, "tokens already in the KV cache before each test")->type_name("N,...")
      ->delimiter(',')->capture_default_str()->group(tests);
  app.add_option("-r,--repetitions", reps, "repetitions per test")->type_name("N")->capture_default_str()
      ->check(in_range(1, 1000))->group(tests);
  app.add_flag("--argmax", argmax,
               "tg: decode with the backend's greedy argmax (session::decode_argmax: ids come back, not logits)")
      ->group(tests);
  app.add_flag("--no-warmup", no_warmup,
               "skip the untimed runs of each prompt and generation test before its repetitions (as "
               "llama-bench's --no-warmup; without it they repeat until 0.3 s have passed, so a GPU "
               "whose clocks fell during the model upload is back at speed)")->group(tests);
  app.add_flag("--profile", profile,
               "Vulkan: per-kernel GPU time of each test from timestamp queries (serialises kernels: "
               "throughput figures of a profiled run are lower)")->group(tests);
  app.add_flag("--probe", probe_links,
               "measure this machine's links (DRAM, GPU copies and reads, O_DIRECT reads of the model's drive) "
               "before loading each model, as `strata-run --plan --probe` does, and cache them: the planner (--fit) "
               "and the predicted column use them; without a cached probe both use assumed desktop links")
      ->group(tests);
  app.add_option("-t,--threads", threads, "CPU threads (0: one per physical core)")->type_name("N,...")
      ->delimiter(',')->capture_default_str()->group(group::backend);
  add_batch_option(app, n_batch, "tokens per prefill step");
  add_backend_options(app, bo);
  add_kv_options(app, ko);
  add_tier_options(app, to);
  app.add_flag("--json", json, "print one JSON object instead of a table")->group(group::output);
  c.add_log_options(lo);
  if (const int rc = c.parse(argc, argv); rc >= 0) return rc;
  std::unique_ptr<logger> log;

  std::vector<result> results;
  try {
    log = make_logger(lo);
    for (const auto& path : models) {
      for (unsigned th : threads) {
        std::uint32_t need = 1;
        for (auto d : depths) {
          for (auto p : n_prompt) need = std::max(need, d + p);
          for (auto g : n_gen) need = std::max(need, d + g);
        }
        strata::rt::engine_options opt;
        opt.threads = th;
        apply(bo, opt);
        opt.gpu_profile = profile;
        opt.n_ctx = need;
        opt.n_batch = n_batch;
        opt.max_outputs = 1;
        apply(ko, opt);
        apply(to, opt);
        // The links are keyed by the backend model::load resolves (the planner reads them there)
        // and measured before it, so --fit plans with them too.
        strata::rt::probe_options probe;
        probe.disk_file = path;
        probe.threads = th;
        probe.gpu = strata::rt::resolve_backend(opt.backend, opt.device) == strata::rt::backend_kind::vulkan;
        probe.device = bo.device;
        std::optional<strata::tiers::link_speeds> probed;
        if (probe_links) {
          probed = strata::rt::probe_links(probe);
          if (const auto cache = strata::rt::link_cache_path(probe); !cache.empty()) strata::rt::save_cached_links(cache, *probed);
          log->info("bench", "probed links: " + probed->source);
        }
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
        // The cost model's links: this run's probe, else the machine's cached one, else assumed.
        auto cached = probed;
        if (const auto cache = strata::rt::link_cache_path(probe); !cached && !cache.empty()) cached = strata::rt::load_cached_links(cache);
        const strata::tiers::link_speeds links = cached ? *cached : strata::tiers::assumed_desktop_links();
        log->info("bench", "predicted t/s from link speeds: " + links.source);
        const auto tag = [&](result r) {
          r.type_k = std::string(strata::kv::name_of(opt.type_k));
          r.type_v = std::string(strata::kv::name_of(opt.type_v));
          r.kv_bytes_per_token = kv_bytes;
          r.links_assumed = links.assumed();
          r.n_gpu_layers = m->n_gpu_layers();
          r.cpu_expert_layers = std::uint32_t(m->cpu_expert_layers().size());
          return r;
        };
        // The cost model's view of this run: the layout the engine chose (GPU blocks, experts on
        // the CPU), links from the probe cache.
        strata::tiers::engine_layout layout;
        layout.n_gpu_layers = m->n_gpu_layers();
        layout.cpu_experts.assign(hp.n_layer, 0);
        for (const auto il : m->cpu_expert_layers()) layout.cpu_experts.at(il) = 1;
        layout.cached_experts.assign(hp.n_layer, 0);
        for (const auto il : m->cached_expert_layers()) layout.cached_experts.at(il) = 1;
        layout.expert_slots = m->expert_cache().slots;
        layout.expert_cpu_misses = m->expert_cache().cpu_miss_tokens > 0;  // decode steps (1 token) split for their misses
        layout.expert_cache_stage = m->expert_cache().stage_bytes > 0;   // prompt steps stage each block's experts
        layout.streamed_ffn.assign(hp.n_layer, 0);
        for (const auto il : m->streamed_layers()) layout.streamed_ffn.at(il) = 1;
        layout.stream_cpu_tokens = m->streaming().cpu_tokens;  // the per-phase choice the backend runs
        layout.stream_link_blocks = m->streaming().link_layers;  // ... and the blocks the link carries then
        layout.streamed_experts.assign(hp.n_layer, 0);
        for (const auto il : m->expert_streamed_layers()) layout.streamed_experts.at(il) = 1;
        if (m->expert_streaming().layers) layout.expert_cpu_tokens = m->expert_streaming().cpu_tokens;
        const std::vector<std::uint32_t> disk_layers = m->disk_layers();
        const auto count_stream = [&](result& r, const strata::rt::model::stream_counters& before) {
          const auto a = m->streaming();
          r.stream.layers = a.layers;
          r.stream.ring_bytes = a.ring_bytes;
          r.stream.bytes_per_step = a.bytes_per_step;
          r.stream.bytes_streamed += a.bytes_streamed - before.bytes_streamed;
          r.stream.tokens += a.tokens - before.tokens;
          r.stream.steps += a.steps - before.steps;
          r.stream.cpu_steps += a.cpu_steps - before.cpu_steps;
          r.stream.cpu_tokens = a.cpu_tokens;
          r.stream.link_layers = a.link_layers;
        };
        const auto count_xstream = [&](result& r, const strata::rt::model::stream_counters& before) {
          const auto a = m->expert_streaming();
          r.xstream.layers = a.layers, r.xstream.ring_bytes = a.ring_bytes, r.xstream.bytes_per_step = a.bytes_per_step;
          r.xstream.bytes_streamed += a.bytes_streamed - before.bytes_streamed;
          r.xstream.tokens += a.tokens - before.tokens;
          r.xstream.steps += a.steps - before.steps;
          r.xstream.cpu_steps += a.cpu_steps - before.cpu_steps;
          r.xstream.cpu_tokens = a.cpu_tokens;
          r.xstream.share_blocks += a.share_blocks - before.share_blocks;
          r.xstream.share_bytes += a.share_bytes - before.share_bytes;
        };
        // The disk tier's counters over the timed part of a test only.
        const auto count_disk = [&](result& r, const strata::rt::model::disk_counters& before) {
          const auto a = m->disk_tier();
          r.disk.blocks = a.blocks, r.disk.slots = a.slots, r.disk.slot_bytes = a.slot_bytes;
          r.disk.bytes_per_step = a.bytes_per_step;
          r.disk.bytes_read += a.bytes_read - before.bytes_read;
          r.disk.block_reads += a.block_reads - before.block_reads;
          r.disk.stalls += a.stalls - before.stalls;
          r.disk.steps += a.steps - before.steps;
          r.disk.tokens += a.tokens - before.tokens;
          r.disk.read_seconds += a.read_seconds - before.read_seconds;
          r.disk.stall_seconds += a.stall_seconds - before.stall_seconds;
        };
        // The hand-offs of the timed part of a test only.
        const auto count_handoffs = [&](result& r, const strata::rt::model::handoff_counters& before) {
          const auto a = m->handoffs();
          r.handoffs.steps += a.steps - before.steps;
          r.handoffs.tokens += a.tokens - before.tokens;
          r.handoffs.handoff_steps += a.handoff_steps - before.handoff_steps;
          r.handoffs.handoffs += a.handoffs - before.handoffs;
        };
        // The expert cache's counters over the timed part of a test only.
        const auto count_cache = [&](result& r, const strata::rt::model::expert_cache_counters& before) {
          const auto a = m->expert_cache();
          r.cache.layers = a.layers;
          r.cache.slots = a.slots;
          r.cache.hits += a.hits - before.hits;
          r.cache.misses += a.misses - before.misses;
          r.cache.evictions += a.evictions - before.evictions;
          r.cache.bytes_uploaded += a.bytes_uploaded - before.bytes_uploaded;
          r.cache.tokens += a.tokens - before.tokens;
          r.cache.gpu_blocks += a.gpu_blocks - before.gpu_blocks;
          r.cache.cpu_blocks += a.cpu_blocks - before.cpu_blocks;
          r.cache.predictors = a.predictors;
          r.cache.prefetched += a.prefetched - before.prefetched;
          r.cache.prefetch_bytes += a.prefetch_bytes - before.prefetch_bytes;
          r.cache.prefetch_used += a.prefetch_used - before.prefetch_used;
          r.cache.prefetch_wasted += a.prefetch_wasted - before.prefetch_wasted;
          r.cache.predicted_routed += a.predicted_routed - before.predicted_routed;
          r.cache.routed_with_prediction += a.routed_with_prediction - before.routed_with_prediction;
          r.cache.lookup_blocks += a.lookup_blocks - before.lookup_blocks;
          r.cache.host_read_bytes += a.host_read_bytes - before.host_read_bytes;
          r.cache.staged_bytes += a.staged_bytes - before.staged_bytes;
          r.cache.staged_blocks += a.staged_blocks - before.staged_blocks;
        };
        // The routing prior's hit rate for the cache that ran, per distinct expert of a step.
        const auto prior_hit = [&](std::uint32_t tokens, bool prefill) {
          if (!layout.expert_slots || !hp.n_expert || !hp.n_expert_used) return -1.0;
          const std::uint32_t batch = prefill ? std::min(tokens, m->options().n_batch) : 1;
          return strata::tiers::cache_step_hit_rate(hp.n_expert, hp.n_expert_used, layout.expert_slots, batch);
        };
        const auto predict = [&](std::uint32_t depth, std::uint32_t tokens, bool prefill) {
          strata::tiers::demand_options dopt;
          dopt.n_ctx = depth + (prefill ? tokens : tokens / 2 + 1);  // the average context a token sees
          dopt.kv_bytes_per_element = double(kv_bytes) / (2.0 * hp.n_layer * hp.n_embd_kv());
          dopt.max_batch = m->options().n_batch;
          const auto demand = strata::tiers::demand_from_gguf(m->gguf(), hp, dopt);
          const std::uint32_t batch = prefill ? std::min(tokens, m->options().n_batch) : 1;
          // The blocks the engine reads from the file every step cost their bytes over the drive.
          auto run_layout = layout;
          if (!disk_layers.empty()) {
            run_layout.disk.on_disk.assign(demand.tensors.size(), 0);
            for (std::size_t i = 0; i < demand.tensors.size(); ++i) {
              const std::int32_t il = demand.tensors[i].layer;
              run_layout.disk.on_disk[i] = char(il >= 0 && std::count(disk_layers.begin(), disk_layers.end(), std::uint32_t(il)));
            }
          }
          const auto plan = strata::tiers::layout_plan(demand, run_layout, links, 1ull << 62, batch);
          return prefill ? plan.prefill : plan.decode;
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
        if (const auto st = m->startup_report(); !st.empty()) log->info("bench", name + ": " + st);
        log->info("bench", name + ": prompt steps of up to " + std::to_string(m->options().n_batch) + " tokens" +
                               (n_batch ? " (-b)" : " (the engine's choice; -b sets it)"));
        // Per-kernel GPU time of one test, per evaluated token (from the last repetition set).
        const auto report_profile = [&](const std::string& test, std::uint64_t tokens) {
          if (!profile) return;
          strata::bench::print_kernel_profile(m->kernel_profile(), double(tokens), name + " " + test);
          m->reset_kernel_profile();
        };
        for (auto d : depths) {
          for (auto p : n_prompt) {
            if (!p) continue;
            result r{.model = name, .test = "pp" + std::to_string(p), .backend = m->backend_description(), .threads = th,
                     .n_prompt = p, .depth = d, .model_bytes = bytes, .params = params};
            // One untimed run of the test's own shape first (llama-bench does the same): the
            // 16-token warm-up above does not build the pipelines or touch the memory a p-token
            // step needs (GPU: tiled and grouped-expert kernels, larger scratch), so without it
            // the first repetition pays for them and inflates the spread.
            double warm_s = 0;
            unsigned warm_runs = 0;
            for (unsigned i = no_warmup ? 1 : 0; i <= reps; ++i) {
              s.clear();
              if (d) s.prefill(random_tokens(d, hp.n_vocab, rng));
              m->reset_kernel_profile();
              // The timed prompt continues the depth tokens, so only the new p tokens are evaluated.
              const auto cached = s.get_model().kv().tokens(0);
              std::vector<std::int32_t> all(cached.begin(), cached.end());
              const auto toks = random_tokens(p, hp.n_vocab, rng);
              all.insert(all.end(), toks.begin(), toks.end());
              const auto c0 = m->expert_cache();
              const auto s0 = m->streaming();
              const auto x0 = m->expert_streaming();
              const auto k0 = m->disk_tier();
              const auto h0 = m->handoffs();
              const auto t0 = clock_type::now();
              s.prefill(all);
              const double sec = std::chrono::duration<double>(clock_type::now() - t0).count();
              if (i > 0) {  // the first run of the prompt shape is the warm-up
                count_cache(r, c0);
                count_stream(r, s0);
                count_xstream(r, x0);
                count_disk(r, k0);
                count_handoffs(r, h0);
                r.wall_seconds += sec;
                r.samples.push_back(double(p) / sec);
              } else if (warm_again(warm_s, warm_runs, sec)) {
                --i;  // unsigned: the loop's ++i makes it 0 again, another untimed run
              }
            }
            report_profile(r.test, p);
            r.predicted = predict(d, p, true);
            r.predicted_ts = r.predicted.tokens_per_second();
            r.prior_hit = prior_hit(p, true);
            results.push_back(tag(r));
          }
          for (auto g : n_gen) {
            if (!g) continue;
            result r{.model = name, .test = "tg" + std::to_string(g), .backend = m->backend_description(), .threads = th,
                     .n_gen = g, .depth = d, .model_bytes = bytes, .params = params};
            // One untimed run of the test first, as for the prompt tests: besides first-use costs,
            // a GPU left idle while a large model uploads drops its clocks (an H200 fell to
            // 345-800 MHz during a 4 s upload), and a short first repetition then ran at them:
            // the 30B's tg64 spread was +-40-140 t/s across repetitions.
            double warm_s = 0;
            unsigned warm_runs = 0;
            for (unsigned i = no_warmup ? 1 : 0; i <= reps; ++i) {
              s.clear();
              if (d) s.prefill(random_tokens(d, hp.n_vocab, rng));
              m->reset_kernel_profile();
              const auto toks = random_tokens(g, hp.n_vocab, rng);
              const auto c0 = m->expert_cache();
              const auto s0 = m->streaming();
              const auto x0 = m->expert_streaming();
              const auto k0 = m->disk_tier();
              const auto h0 = m->handoffs();
              const auto t0 = clock_type::now();
              if (argmax)
                for (auto t : toks) s.decode_argmax(t);
              else
                for (auto t : toks) s.decode(t);
              const double sec = std::chrono::duration<double>(clock_type::now() - t0).count();
              if (i == 0) {  // a warm-up run
                if (warm_again(warm_s, warm_runs, sec)) --i;  // unsigned: ++i makes it 0 again
                continue;
              }
              count_cache(r, c0);
              count_stream(r, s0);
              count_xstream(r, x0);
              count_disk(r, k0);
              count_handoffs(r, h0);
              r.wall_seconds += sec;
              r.samples.push_back(double(g) / sec);
            }
            report_profile(r.test, g);
            if (const auto rc = m->step_recordings(); !profile) {  // a profile puts a barrier after every dispatch
              r.step_dispatches = rc.last_dispatches;
              r.step_barriers = rc.last_barriers;
            }
            r.predicted = predict(d, g, false);
            r.predicted_ts = r.predicted.tokens_per_second();
            r.prior_hit = prior_hit(g, false);
            results.push_back(tag(r));
          }
        }
      }
    }
  } catch (const std::exception& e) {
    if (log) log->error("bench", e.what());
    else std::fprintf(stderr, "strata-bench: error: %s\n", e.what());
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
                                           {"samples_ts", std::move(samples)},
                                           {"predicted_ts", r.predicted_ts},
                                           {"predicted_links_assumed", r.links_assumed},
                                           {"predicted_bytes_per_token",
                                            boost::json::object{{"gpu_read", r.predicted.gpu_read_bytes},
                                                                {"host_to_gpu", r.predicted.host_to_gpu_bytes},
                                                                {"cpu_read", r.predicted.cpu_read_bytes},
                                                                {"nvme", r.predicted.nvme_bytes}}},
                                           {"predicted_handoffs_per_step", r.predicted.handoffs},
                                           {"handoffs_per_step", r.handoffs.per_step()},
                                           {"handoffs_per_token", r.handoffs.per_token()},
                                           {"step_dispatches", r.step_dispatches},
                                           {"step_barriers", r.step_barriers},
                                           {"n_gpu_layers", r.n_gpu_layers},
                                           {"cpu_expert_layers", r.cpu_expert_layers},
                                           {"expert_cache",
                                            boost::json::object{{"layers", r.cache.layers},
                                                                {"slots", r.cache.slots},
                                                                {"hit_rate", r.cache.hit_rate()},
                                                                {"prior_hit_rate", r.prior_hit},
                                                                {"bytes_uploaded_per_token", r.cache.bytes_per_token()},
                                                                {"evictions", r.cache.evictions},
                                                                {"gpu_block_steps", r.cache.gpu_blocks},
                                                                {"lookup_block_steps", r.cache.lookup_blocks},
                                                                {"host_read_bytes_per_token",
                                                                 r.cache.tokens ? double(r.cache.host_read_bytes) / double(r.cache.tokens) : 0.0},
                                                                {"staged_bytes_per_token",
                                                                 r.cache.tokens ? double(r.cache.staged_bytes) / double(r.cache.tokens) : 0.0},
                                                                {"cpu_block_steps", r.cache.cpu_blocks},
                                                                {"prefetch_blocks", r.cache.predictors},
                                                                {"prefetch_recall", r.cache.prefetch_recall()},
                                                                {"prefetch_accuracy", r.cache.prefetch_accuracy()},
                                                                {"prefetched_bytes_per_token",
                                                                 r.cache.tokens ? double(r.cache.prefetch_bytes) / double(r.cache.tokens) : 0.0}}},
                                           {"layer_streaming",
                                            boost::json::object{{"layers", r.stream.layers},
                                                                {"ring_bytes", r.stream.ring_bytes},
                                                                {"bytes_per_step", r.stream.bytes_per_step},
                                                                {"streamed_bytes_per_token", r.stream.bytes_per_token()},
                                                                {"cpu_tokens", r.stream.cpu_tokens},
                                                                {"steps", r.stream.steps},
                                                                {"cpu_steps", r.stream.cpu_steps},
                                                                {"predicted_host_to_gpu_bytes_per_token",
                                                                 r.predicted.host_to_gpu_bytes}}},
                                           {"expert_streaming",
                                            boost::json::object{{"layers", r.xstream.layers},
                                                                {"ring_bytes", r.xstream.ring_bytes},
                                                                {"bytes_per_step", r.xstream.bytes_per_step},
                                                                {"streamed_bytes_per_token", r.xstream.bytes_per_token()},
                                                                {"cpu_tokens", r.xstream.cpu_tokens},
                                                                {"steps", r.xstream.steps},
                                                                {"cpu_steps", r.xstream.cpu_steps}}},
                                           {"disk_tier",
                                            boost::json::object{{"blocks", r.disk.blocks},
                                                                {"slots", r.disk.slots},
                                                                {"slot_bytes", r.disk.slot_bytes},
                                                                {"bytes_per_step", r.disk.bytes_per_step},
                                                                {"bytes_read_per_token", r.disk.bytes_per_token()},
                                                                {"read_seconds", r.disk.read_seconds},
                                                                {"stall_seconds", r.disk.stall_seconds},
                                                                {"stalls", r.disk.stalls},
                                                                {"steps", r.disk.steps},
                                                                {"read_gbps", r.disk.read_gbps()},
                                                                {"wall_gbps", r.wall_seconds > 0
                                                                                  ? double(r.disk.bytes_read) / r.wall_seconds / 1e9
                                                                                  : 0.0}}},
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
  // Where the bytes of a token go in the layout that ran (the cost model's count per link), and
  // how far the measurement is from the prediction.
  std::printf("\n| %-14s | %-11s | %13s | %13s | %13s | %9s | %9s | %10s | %10s | %6s |\n", "test", "layout", "GPU read GB/t",
              "host->GPU GB/t", "CPU read GB/t", "switches", "CPU parts", "predicted", "measured", "ratio");
  for (const auto& r : results) {
    char test[64], layout[32];
    std::snprintf(test, sizeof test, "%s%s", r.test.c_str(), r.depth ? (" @ d" + std::to_string(r.depth)).c_str() : "");
    std::snprintf(layout, sizeof layout, r.stream.layers ? "ngl %u, %u cx, %u st" : "ngl %u, %u cx", r.n_gpu_layers,
                  r.cpu_expert_layers, r.stream.layers);
    const auto& c = r.predicted;
    char measured[24] = "-";
    if (r.handoffs.steps) std::snprintf(measured, sizeof measured, "%.2f", r.handoffs.per_step());
    std::printf("| %-14s | %-11s | %13.4f | %13.4f | %13.4f | %9.0f | %9s | %10.2f | %10.2f | %6.2f |\n", test, layout,
                c.gpu_read_bytes / 1e9, c.host_to_gpu_bytes / 1e9, c.cpu_read_bytes / 1e9, c.handoffs, measured, r.predicted_ts,
                r.mean(), r.predicted_ts > 0 ? r.mean() / r.predicted_ts : 0.0);
  }
  std::printf("(layout: GPU blocks (-ngl), MoE blocks whose experts the CPU computes (cx), blocks whose dense FFN streams "
              "(st); per step: GPU <-> CPU switches the cost model predicts (a CPU block, or a cached block whose misses "
              "the CPU computes: two; a cached block's split: one), and the CPU parts the GPU backend's steps ran, "
              "measured (hand-offs); then t/s predicted and measured)\n");
  if (std::any_of(results.begin(), results.end(), [](const result& r) { return r.links_assumed; }))
    std::printf("(predicted from assumed desktop links: no probe of this machine is cached; --probe measures them)\n");
  // The GPU expert cache (--expert-cache), measured over the timed runs.
  if (std::any_of(results.begin(), results.end(), [](const result& r) { return r.cache.layers > 0; })) {
    std::printf("\n| %-14s | %-15s | %8s | %9s | %13s | %13s | %11s | %11s | %11s | %15s | %17s |\n", "test", "expert cache",
                "hit rate", "prior hit", "uploaded MB/t", "miss-read MB/t", "staged MB/t", "evictions/t", "CPU blocks", "prefetch recall",
                "prefetch accuracy");
    for (const auto& r : results) {
      if (!r.cache.layers) continue;
      char test[64], cache[40];
      std::snprintf(test, sizeof test, "%s%s", r.test.c_str(), r.depth ? (" @ d" + std::to_string(r.depth)).c_str() : "");
      std::snprintf(cache, sizeof cache, "%u slots x %u", r.cache.slots, r.cache.layers);
      const double t = r.cache.tokens ? double(r.cache.tokens) : 1.0;
      char recall[24] = "-", accuracy[24] = "-";
      if (r.cache.predictors) {
        std::snprintf(recall, sizeof recall, "%.3f", r.cache.prefetch_recall());
        std::snprintf(accuracy, sizeof accuracy, "%.3f", r.cache.prefetch_accuracy());
      }
      char prior[24] = "-";
      if (r.prior_hit >= 0) std::snprintf(prior, sizeof prior, "%.3f", r.prior_hit);
      std::printf("| %-14s | %-15s | %8.3f | %9s | %13.3f | %13.3f | %11.3f | %11.3f | %11llu | %15s | %17s |\n", test, cache,
                  r.cache.hit_rate(), prior, r.cache.bytes_per_token() / 1e6, double(r.cache.host_read_bytes) / t / 1e6,
                  double(r.cache.staged_bytes) / t / 1e6, double(r.cache.evictions) / t, (unsigned long long)r.cache.cpu_blocks, recall,
                  accuracy);
    }
    std::printf("(hit rate per distinct expert of a block and step, prefetched experts counted as hits; prior hit: the "
                "planner's expectation under a trained router's skew (tiers/routing_prior.hpp); miss-read: expert bytes the "
                "kernels read from host memory on a miss, in the lookup form (the default), where a miss is not uploaded first; "
                "staged: expert bytes prompt steps copied whole into the GPU's staging pair before a block's kernels; "
                "CPU blocks: block-steps "
                "that ran on the CPU (more experts than slots, or misses sent there: STRATA_VK_CACHE_CPU_MISSES); prefetch recall: routed experts the block before "
                "predicted; accuracy: experts uploaded ahead that their step used)\n");
  }
  // Dense layer streaming (--stream-layers, --fit), measured over the timed runs beside the cost
  // model's host->GPU bytes per token for the same layout.
  if (std::any_of(results.begin(), results.end(), [](const result& r) { return r.stream.layers > 0; })) {
    std::printf("\n| %-14s | %-16s | %12s | %15s | %18s | %19s |\n", "test", "streamed blocks", "ring MiB",
                "CPU steps/all", "streamed MB/token", "predicted MB/token");
    std::printf("| %.14s | %.16s | %.12s | %.15s | %.18s | %.19s |\n", "---------------", "-----------------", "-------------",
                "----------------", "-------------------", "--------------------");
    for (const result& r : results) {
      if (!r.stream.layers) continue;
      char test[64];
      std::snprintf(test, sizeof test, "%s%s", r.test.c_str(), r.depth ? (" @ d" + std::to_string(r.depth)).c_str() : "");
      char steps[40];
      std::snprintf(steps, sizeof steps, "%llu/%llu", (unsigned long long)r.stream.cpu_steps,
                    (unsigned long long)r.stream.steps);
      char blocks[40];
      std::snprintf(blocks, sizeof blocks, r.stream.link_layers ? "%u (%u on link)" : "%u", r.stream.layers, r.stream.link_layers);
      std::printf("| %-14s | %16s | %12.1f | %15s | %18.3f | %19.3f |\n", test, blocks,
                  double(r.stream.ring_bytes) / double(1 << 20), steps, r.stream.bytes_per_token() / 1e6,
                  r.predicted.host_to_gpu_bytes / 1e6);
    }
    std::printf("(every streamed step copies each streamed block's dense FFN once: a prompt step's tokens share the "
                "bytes; CPU steps: steps of few tokens that computed those FFNs on the CPU instead, but for those on the "
                "link, copied meanwhile: --stream-link)\n");
  }
  // CPU experts streamed in prompt steps (the default with CPU experts; --no-stream-experts).
  if (std::any_of(results.begin(), results.end(), [](const result& r) { return r.xstream.layers > 0; })) {
    std::printf("\n| %-14s | %-15s | %12s | %15s | %18s | %19s |\n", "test", "expert blocks", "ring MiB", "CPU steps/all",
                "streamed MB/token", "GPU-share MB/token");
    std::printf("| %.14s | %.15s | %.12s | %.15s | %.18s | %.19s |\n", "---------------", "----------------", "-------------",
                "----------------", "-------------------", "--------------------");
    for (const result& r : results) {
      if (!r.xstream.layers) continue;
      char steps[40];
      std::snprintf(steps, sizeof steps, "%llu/%llu", (unsigned long long)r.xstream.cpu_steps,
                    (unsigned long long)r.xstream.steps);
      std::printf("| %-14s | %15u | %12.1f | %15s | %18.3f | %19.3f |\n", r.test.c_str(), r.xstream.layers,
                  double(r.xstream.ring_bytes) / double(1 << 20), steps, r.xstream.bytes_per_token() / 1e6,
                  r.xstream.share_bytes_per_token() / 1e6);
    }
    std::printf("(prompt steps of more than %u tokens read every expert of those blocks over the link once: copied into "
                "the GPU ring, or in steps the backend's description names read by the kernels from pinned memory; "
                "shorter steps hand them to the CPU; GPU share: in 1-token steps the GPU computes some of each "
                "token's experts from their pinned copy while the CPU computes the rest)\n",
                std::find_if(results.begin(), results.end(), [](const result& r) { return r.xstream.layers > 0; })->xstream.cpu_tokens);
  }
  // The decode step as recorded: what each token's step waits through, level by level.
  for (const result& r : results)
    if (r.step_dispatches)
      std::printf("(%s%s: the decode step runs %u dispatches in %u dependency levels)\n", r.test.c_str(),
                  r.depth ? (" @ d" + std::to_string(r.depth)).c_str() : "", r.step_dispatches, r.step_barriers + 1);
  // The disk tier (CPU blocks beyond --ram-budget or -ot ...=disk, read from the model file every
  // step), measured over the timed runs: the drive's rate while the reader reads, over the whole
  // test, and how long the compute waited for it.
  if (std::any_of(results.begin(), results.end(), [](const result& r) { return r.disk.blocks > 0; })) {
    std::printf("\n| %-14s | %-14s | %12s | %11s | %11s | %12s | %12s | %11s |\n", "test", "disk blocks", "ring MiB",
                "read MB/t", "read s", "read GB/s", "wall GB/s", "stall s");
    std::printf("| %.14s | %.14s | %.12s | %.11s | %.11s | %.12s | %.12s | %.11s |\n", "---------------",
                "---------------", "-------------", "------------", "------------", "-------------", "-------------",
                "------------");
    for (const result& r : results) {
      if (!r.disk.blocks) continue;
      char test[64], blocks[40];
      std::snprintf(test, sizeof test, "%s%s", r.test.c_str(), r.depth ? (" @ d" + std::to_string(r.depth)).c_str() : "");
      std::snprintf(blocks, sizeof blocks, "%u, %u slots", r.disk.blocks, r.disk.slots);
      std::printf("| %-14s | %-14s | %12.1f | %11.2f | %11.3f | %12.2f | %12.2f | %11.3f |\n", test, blocks,
                  double(r.disk.slot_bytes * r.disk.slots) / double(1 << 20), r.disk.bytes_per_token() / 1e6,
                  r.disk.read_seconds, r.disk.read_gbps(),
                  r.wall_seconds > 0 ? double(r.disk.bytes_read) / r.wall_seconds / 1e9 : 0.0, r.disk.stall_seconds);
    }
    std::printf("(read GB/s: bytes over the reader's busy time; wall GB/s: bytes over the timed runs; stall: the compute "
                "thread waiting for a block)\n");
  }
  return 0;
}
