// strata-serve: OpenAI- and Anthropic-compatible HTTP server for one GGUF model, with
// continuous batching over --parallel sequences. Flags follow llama-server's where they exist;
// the shared ones come from apps/common/cli.hpp. --log-format json writes one JSON object per
// line: status messages, and one access record per request (id, route, status, tokens, latency).
#include <exception>
#include <string>

#include "cli.hpp"
#include "progress.hpp"
#include "serve/server.hpp"
#include "strata/runtime/default_model.hpp"
#include "strata/runtime/placement.hpp"

int main(int argc, char** argv) {
  using namespace strata;
  using namespace strata::app;
  cli c({"strata-serve",
         "[-m FILE] [options]",
         "Serve a GGUF model (without -m, the bundled demo model) over HTTP with the OpenAI (chat completions, completions, responses) and Anthropic "
         "(messages) APIs, streaming (SSE), continuous batching of --parallel sequences and a shared prefix "
         "cache. Runs until SIGTERM/SIGINT, then lets running requests finish.",
         {{"serve on port 8080 with 8 slots and an API key",
           "strata-serve -m model.gguf --port 8080 -np 8 -c 16384 --api-key sk-local"},
          {"all layers on the GPU, 3-bit KV cache", "strata-serve -m model.gguf --backend vulkan -ngl -1 --kv-type tq3"},
          {"JSON access log, one object per request", "strata-serve -m model.gguf --log-format json 2> access.jsonl"}}});
  auto& app = c.app();
  std::string model_path;
  serve::server_options so;
  rt::engine_options eo;
  rt::scheduler_options sched;
  backend_options bo;
  kv_options ko;
  log_options lo;
  std::uint32_t parallel = 4, ctx = 4096;
  double read_timeout = 30, ping = 10, shutdown_timeout = 10;
  std::size_t max_body_mb = 8;
  std::uint32_t max_header_kb = 8;
  add_model_option(app, model_path, "GGUF model file (default: the bundled demo model, models/strata-demo.gguf)");
  app.add_option("--alias", so.model_id, "model id in the API (default: the file name without extension)")
      ->type_name("NAME")->group(group::model);
  app.add_option("--host", so.host, "address to listen on")->type_name("ADDR")->capture_default_str()->group(group::server);
  app.add_option("--port", so.port, "port (0: any free port)")->type_name("N")->capture_default_str()->group(group::server);
  app.add_option("--api-key", so.api_key, "require this key (Authorization: Bearer KEY or x-api-key: KEY)")
      ->type_name("KEY")->group(group::server);
  app.add_option("--parallel", parallel, "sequences decoded together (slots)")->type_name("N")->capture_default_str()
      ->check(in_range(1, 256))->group(group::server);
  // 128 keeps each step short, so running streams keep their pace while a long prompt is
  // prefilled; 0 (the batch size) favours prompt throughput instead.
  sched.prefill_chunk = 128;
  app.add_option("--prefill-chunk", sched.prefill_chunk,
                 "most prompt tokens per step beside the decodes (0: the batch size; a GPU step may take up to one "
                 "token tile more to fill the tile it pays for); smaller keeps streams smoother")
      ->type_name("N")->capture_default_str()->group(group::server);
  app.add_flag("!--no-record-ahead", sched.record_ahead,
               "record GPU step shapes on first use instead of at start-up (a faster start, the first steps of each "
               "shape slower)")
      ->group(group::server);
  app.add_option("--queue", sched.max_queue, "requests waiting beyond the slots before 429")->type_name("N")
      ->capture_default_str()->group(group::server);
  app.add_option("--timeout", read_timeout, "seconds a client has to send its request")->type_name("S")
      ->capture_default_str()->check(in_range(0.1, 86400.0))->group(group::server);
  app.add_option("--sse-ping", ping, "seconds of silence before an SSE keepalive")->type_name("S")
      ->capture_default_str()->check(in_range(0.05, 3600.0))->group(group::server);
  app.add_option("--shutdown-timeout", shutdown_timeout,
                 "seconds running generations get to finish after SIGTERM/SIGINT (a second signal exits at once)")
      ->type_name("S")->capture_default_str()->check(in_range(0.0, 86400.0))->group(group::server);
  app.add_option("--max-body-mb", max_body_mb, "largest request body in MiB (larger: 413)")->type_name("N")
      ->capture_default_str()->check(in_range(1, 1024))->group(group::server);
  app.add_option("--max-header-kb", max_header_kb, "largest request line + headers in KiB (larger: 400)")->type_name("N")
      ->capture_default_str()->check(in_range(1u, 1024u))->group(group::server);
  std::string pooling;
  app.add_flag("--embeddings", so.embeddings,
               "serve POST /v1/embeddings with the model's pooling (GGUF <arch>.pooling_type; an error if it has none)")
      ->group(group::server);
  app.add_option("--pooling", pooling,
                 "serve POST /v1/embeddings with this pooling of the final hidden states: mean, cls or last "
                 "(overrides the model's); embedding models carrying pooling metadata need neither flag")
      ->type_name("NAME")->check(CLI::IsMember({"mean", "cls", "last", "none"}))->group(group::server);
  add_ctx_option(app, ctx, "KV cache tokens shared by all sequences; also the longest sequence");
  app.get_option("--ctx-size")->check(in_range(16, 1 << 24));
  // The server's steps are --prefill-chunk prompt tokens beside the decodes: longer steps would
  // only take memory, so it keeps the short step unless told otherwise.
  eo.n_batch = rt::short_prompt_step;
  add_batch_option(app, eo.n_batch, "most tokens per forward step (prompt chunk + decodes)");
  add_threads_option(app, eo.threads);
  add_backend_options(app, bo);
  add_kv_options(app, ko);
  tier_options to;
  add_tier_options(app, to);
  c.add_log_options(lo, /*with_format=*/true);
  if (const int rc = c.parse(argc, argv); rc >= 0) return rc;

  std::unique_ptr<logger> log;
  try {
    log = make_logger(lo);
    if (model_path.empty()) model_path = rt::find_default_model().string();
    if (!pooling.empty()) so.pooling = rt::parse_pooling(pooling);
    apply(bo, eo);
    apply(ko, eo);
    apply(to, eo);
    eo.n_ctx = ctx;
    eo.n_seq = parallel;
    if (eo.n_batch < parallel) eo.n_batch = parallel;  // every slot must fit one step
    eo.max_outputs = parallel;  // one logits row per sequence per step is all the scheduler asks
    eo.progress = progress_sink(*log, "serve");
    so.read_timeout = std::chrono::milliseconds(std::int64_t(read_timeout * 1000));
    so.ping_interval = std::chrono::milliseconds(std::int64_t(ping * 1000));
    so.max_body_bytes = max_body_mb << 20;
    so.max_header_bytes = max_header_kb << 10;
    so.shutdown_timeout = std::chrono::milliseconds(std::int64_t(shutdown_timeout * 1000));
    so.on_status = [&log](std::string_view m) { log->info("serve", m); };
    so.on_request = [&log](const serve::request_record& r) {
      const auto ms = double(std::int64_t(r.latency_ms * 1000)) / 1000;  // µs resolution
      log->log(r.status >= 500 ? log_level::warn : log_level::info, "http", {},
               {{"request_id", r.id}, {"route", r.route}, {"status", std::int64_t(r.status)},
                {"prompt_tokens", std::int64_t(r.prompt_tokens)}, {"cached_tokens", std::int64_t(r.cached_tokens)},
                {"completion_tokens", std::int64_t(r.completion_tokens)}, {"latency_ms", ms}});
    };
    serve::server srv(so);
    srv.run(model_path, eo, sched, [&](std::uint16_t port) {
      log->info("serve", "listening on http://" + so.host + ":" + std::to_string(port) + " (loading " + model_path + ")");
    });
    return 0;
  } catch (const std::exception& e) {
    if (log) log->error("serve", e.what());
    else std::fprintf(stderr, "strata-serve: error: %s\n", e.what());
    return 1;
  }
}
