// strata-serve: OpenAI- and Anthropic-compatible HTTP server for one GGUF model, with
// continuous batching over --parallel sequences. Flags follow llama-server's where they exist.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>

#include "serve/server.hpp"
#include "strata/runtime/default_model.hpp"
#include "strata/kv/kv_config.hpp"

int main(int argc, char** argv) {
  using namespace strata;
  std::string model_path, backend = "auto", kv_type = "f16", kv_type_k, kv_type_v;
  serve::server_options so;
  rt::engine_options eo;
  rt::scheduler_options sched;
  std::uint32_t parallel = 4, ctx = 4096;
  double read_timeout = 30, ping = 10, shutdown_timeout = 10;
  std::size_t max_body_mb = 8;
  std::uint32_t max_header_kb = 8;
  CLI::App app{"strata-serve: OpenAI and Anthropic APIs over HTTP for a GGUF model"};
  app.add_option("-m,--model", model_path, "GGUF model file (default: the bundled demo model, id strata-demo)");
  app.add_option("--host", so.host, "address to listen on")->capture_default_str();
  app.add_option("--port", so.port, "port (0: any free port)")->capture_default_str();
  app.add_option("--api-key", so.api_key, "require this key (Authorization: Bearer KEY or x-api-key: KEY)");
  app.add_option("--alias", so.model_id, "model id in the API (default: the file name without extension)");
  app.add_option("-c,--ctx-size", ctx, "KV cache tokens shared by all sequences; also the longest sequence")
      ->capture_default_str()->check(CLI::Range(16u, 1u << 24));
  app.add_option("--parallel", parallel, "sequences decoded together (slots)")->capture_default_str()
      ->check(CLI::Range(1u, 256u));
  app.add_option("-b,--batch-size", eo.n_batch, "most tokens per forward step (prompt chunk + decodes)")
      ->capture_default_str()->check(CLI::Range(1u, 1u << 16));
  app.add_option("-t,--threads", eo.threads, "CPU threads (0: physical cores)");
  app.add_option("--backend", backend, "compute backend: auto (Vulkan on a GPU, else CPU), cpu, vulkan")
      ->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "vulkan"}));
  app.add_option("--device", eo.device, "Vulkan device index (default: the best GPU)");
  app.add_option("--n-gpu-layers", eo.n_gpu_layers, "layers on the GPU, the rest on the CPU (-ngl; -1: all)");
  app.add_option("--kv-type", kv_type, "KV cache type for K and V: f16, f32, q8_0, tq4, tq3, tq2")->capture_default_str();
  app.add_option("--kv-type-k", kv_type_k, "KV cache type for K only (overrides --kv-type)");
  app.add_option("--kv-type-v", kv_type_v, "KV cache type for V only (overrides --kv-type)");
  app.add_option("--kv-window", eo.kv_window,
                 "recent tokens attention reads at full precision with compressed KV types (0: none)")
      ->capture_default_str();
  // 128 keeps each step short, so running streams keep their pace while a long prompt is
  // prefilled; 0 (the batch size) favours prompt throughput instead.
  sched.prefill_chunk = 128;
  app.add_option("--prefill-chunk", sched.prefill_chunk,
                 "most prompt tokens per step beside the decodes (0: the batch size); smaller keeps streams smoother")
      ->capture_default_str();
  app.add_option("--queue", sched.max_queue, "requests waiting beyond the slots before 429")->capture_default_str();
  app.add_option("--timeout", read_timeout, "seconds a client has to send its request")->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--sse-ping", ping, "seconds of silence before an SSE keepalive")->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("--shutdown-timeout", shutdown_timeout,
                 "seconds running generations get to finish after SIGTERM/SIGINT (a second signal exits at once)")
      ->capture_default_str()->check(CLI::Range(0.0, 86400.0));
  std::string pooling;
  app.add_flag("--embeddings", so.embeddings,
               "serve POST /v1/embeddings with the model's pooling (GGUF <arch>.pooling_type; an error if it has none)");
  app.add_option("--pooling", pooling,
                 "serve POST /v1/embeddings with this pooling of the final hidden states: mean, cls or last "
                 "(overrides the model's); embedding models carrying pooling metadata need neither flag")
      ->check(CLI::IsMember({"mean", "cls", "last", "none"}));
  app.add_option("--max-body-mb", max_body_mb, "largest request body in MiB (larger: 413)")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--max-header-kb", max_header_kb, "largest request line + headers in KiB (larger: 400)")
      ->capture_default_str()->check(CLI::Range(1u, 1024u));
  // llama-server spells the slot count -np; CLI11 cannot declare a two-letter single-dash flag.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {
    const std::string a = argv[i];
    args.push_back(a == "-np" ? "--parallel" : a == "-ngl" ? "--n-gpu-layers" : a);
  }
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (model_path.empty()) model_path = rt::find_default_model().string();
    if (!pooling.empty()) so.pooling = rt::parse_pooling(pooling);
    eo.backend = rt::parse_backend_kind(backend);
    const auto kv_types = kv::parse_kv_cache_types(kv_type, kv_type_k, kv_type_v);
    eo.type_k = kv_types.k;
    eo.type_v = kv_types.v;
    eo.n_ctx = ctx;
    eo.n_seq = parallel;
    if (eo.n_batch < parallel) eo.n_batch = parallel;  // every slot must fit one step
    eo.max_outputs = parallel;  // one logits row per sequence per step is all the scheduler asks
    so.read_timeout = std::chrono::milliseconds(std::int64_t(read_timeout * 1000));
    so.ping_interval = std::chrono::milliseconds(std::int64_t(ping * 1000));
    so.max_body_bytes = max_body_mb << 20;
    so.max_header_bytes = max_header_kb << 10;
    so.shutdown_timeout = std::chrono::milliseconds(std::int64_t(shutdown_timeout * 1000));
    serve::server srv(so);
    srv.run(model_path, eo, sched, [&](std::uint16_t port) {
      std::cerr << "strata-serve: listening on http://" << so.host << ":" << port << " (loading " << model_path
                << ")\n";
    });
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "strata-serve: error: " << e.what() << "\n";
    return 1;
  }
}
