// strata-serve's HTTP server: Boost.Beast HTTP/1.1 with keep-alive over one Asio thread, routes
// for the OpenAI and Anthropic APIs plus /health, /metrics, /tokenize and /detokenize, and one
// rt::scheduler that batches every request's generation. The server listens before the model is
// loaded, answering 503 until it is ready.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "strata/runtime/engine.hpp"
#include "strata/runtime/scheduler.hpp"

namespace strata::serve {

// One finished request, for access logs (strata-serve --log-format json writes one per line).
struct request_record {
  std::string_view id;                 // request id (the x-request-id header)
  std::string_view route;              // /metrics label: known route, "/v1/models/{id}" or "other"
  int status = 0;                      // HTTP status; 499: the client left first
  std::uint32_t prompt_tokens = 0;     // generation requests only
  std::uint32_t cached_tokens = 0;     // prompt tokens reused from the prefix cache
  std::uint32_t completion_tokens = 0;
  double latency_ms = 0;               // from the request's arrival to its last byte
};

struct server_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;                    // 0: any free port (printed)
  std::string api_key;                          // empty: no authentication
  std::string model_id;                         // empty: the GGUF file name without extension
  std::size_t max_body_bytes = 8u << 20;        // larger bodies get 413
  std::uint32_t max_header_bytes = 8u << 10;    // request line + headers; larger: 400
  std::chrono::milliseconds read_timeout{30000};  // a request must arrive within this
  std::chrono::milliseconds ping_interval{10000}; // SSE keepalive while nothing else is sent
  std::chrono::milliseconds shutdown_timeout{10000};  // running generations' time to finish on SIGTERM
  // POST /v1/embeddings: with the model's pooling (GGUF <arch>.pooling_type) when `embeddings`
  // is set or the model carries one, or with `pooling` when given (it overrides the model's).
  bool embeddings = false;
  std::optional<rt::pooling> pooling;
  // Logging hooks: status lines (model ready, shutting down; empty: "strata-serve: ..." on
  // stderr) and one record per finished request (empty: none). Called from server threads.
  std::function<void(std::string_view message)> on_status;
  std::function<void(const request_record&)> on_request;
};

class server {
 public:
  explicit server(server_options opt);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Listens, loads the model, serves until SIGINT/SIGTERM (or stop()), then drains: new requests
  // get 503, running generations have shutdown_timeout to finish, the rest end with the API's
  // in-band error; a second signal exits at once. Throws strata::error when the address cannot be
  // bound or the model cannot be loaded. `on_listening` gets the bound port.
  void run(const std::filesystem::path& model_path, const rt::engine_options& eo, const rt::scheduler_options& so,
           const std::function<void(std::uint16_t)>& on_listening = {});
  // Starts the graceful shutdown (as SIGTERM does); run() returns when it is done.
  void stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::serve
