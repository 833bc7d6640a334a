// The Beast server (server.hpp, server_impl.hpp): listening, one coroutine per connection,
// routing, answers that need no generation, and the graceful shutdown.
#include "server_impl.hpp"

#include <cmath>

namespace strata::serve {

net::awaitable<bool> server::impl::send(beast::tcp_stream& s, const reply& r, bool keep_alive,
                                        const std::string& request_id) {
  http::response<http::string_body> res{r.status, 11};
  res.set(http::field::server, "strata-serve");
  res.set(http::field::content_type, r.content_type == "application/json" ? "application/json; charset=utf-8" : r.content_type);
  res.set("request-id", request_id);
  res.set("x-request-id", request_id);
  if (r.retry_after) res.set(http::field::retry_after, std::to_string(r.retry_after));
  const unsigned code = unsigned(r.status);
  // Deterministic client errors: retrying cannot help (the SDKs honour this header).
  if (code >= 400 && code < 500 && code != 429 && code != 408) res.set("x-should-retry", "false");
  keep_alive = keep_alive && !draining();  // while shutting down, every answer closes its connection
  res.keep_alive(keep_alive);
  if (keep_alive) res.set("keep-alive", "timeout=" + std::to_string(keep_alive_timeout.count() / 1000));
  res.body() = r.body;
  res.prepare_payload();
  s.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await http::async_write(s, res, tuple_awaitable);
  co_return !ec && keep_alive;
}

net::awaitable<void> server::impl::session(tcp::socket sock) {
  beast::tcp_stream s(std::move(sock));
  beast::flat_buffer buf;
  simdjson::dom::parser jp;
  while (true) {
    http::request_parser<http::string_body> p;
    p.body_limit(opt.max_body_bytes);
    p.header_limit(opt.max_header_bytes);
    if (buf.size() == 0) {
      // An idle keep-alive connection may wait keep_alive_timeout for its next request (clients
      // learn it from the Keep-Alive header and close first); once bytes arrive, the whole
      // request must come within read_timeout, so a slow client cannot hold the connection.
      s.expires_after(keep_alive_timeout);
      auto [ec0, n0] = co_await s.async_read_some(buf.prepare(4096), tuple_awaitable);
      if (ec0) break;
      buf.commit(n0);
    }
    s.expires_after(opt.read_timeout);
    auto [ec, n] = co_await http::async_read(s, buf, p, tuple_awaitable);
    if (ec == http::error::body_limit) {
      const api_error e(413, "invalid_request_error",
                        "request body larger than the limit of " + std::to_string(opt.max_body_bytes) + " bytes");
      const std::string target(p.get().target());
      const auto fl = target.starts_with("/v1/messages") ? api_flavor::anthropic : api_flavor::openai;
      const std::string rid = new_id("req_");
      finished(endpoint_label(target.substr(0, target.find('?'))), 413, rid, std::chrono::steady_clock::now());
      // Named, not a braced temporary: GCC 12 destroys temporaries in co_await operands twice.
      const reply r = api_error_reply(fl, e, rid);
      co_await send(s, r, false, rid);
      co_await drain(s);
      break;
    }
    if (ec) {
      // A malformed request (not a timeout or a closed connection) gets a 400 before closing.
      if (ec.category() == http::make_error_code(http::error::end_of_stream).category() && ec != http::error::end_of_stream &&
          ec != http::error::partial_message) {
        const std::string rid = new_id("req_");
        const api_error e(400, "invalid_request_error", "malformed HTTP request: " + ec.message());
        const reply r = api_error_reply(api_flavor::openai, e, rid);
        co_await send(s, r, false, rid);
        co_await drain(s);  // the client may still be sending (e.g. an over-long header)
      }
      break;
    }
    s.expires_never();
    auto req = p.release();
    if (!co_await handle(s, req, jp)) break;
  }
  beast::error_code ec;
  s.socket().shutdown(tcp::socket::shutdown_send, ec);
}

namespace {

// The generation routes: how each parses its body, names its ids and shapes its answer.
struct generation_route {
  std::string_view path, id_prefix;
  parsed_request (*parse)(const json_in::object& body);
  std::unique_ptr<response_format> (*format)(response_meta meta, const parsed_request& req);
};
constexpr generation_route generation_routes[] = {
    {"/v1/chat/completions", "chatcmpl-", openai::parse_chat, openai::chat_format},
    {"/v1/completions", "cmpl-", openai::parse_completion, openai::completion_format},
    {"/v1/responses", "resp_", openai::parse_responses, openai::responses_format},
    {"/v1/messages", "msg_", [](const json_in::object& body) { return anthropic::parse_messages(body); },
     anthropic::messages_format},
};

const generation_route* generation_route_of(std::string_view path) {
  for (const auto& r : generation_routes)
    if (r.path == path) return &r;
  return nullptr;
}

}  // namespace

reply server::impl::health() const {
  const auto unavailable = [](const char* status, const char* message) {
    reply r = json_reply(json::object{{"status", status},
                                      {"error", json::object{{"code", 503}, {"message", message}, {"type", "unavailable_error"}}}},
                         http::status::service_unavailable);
    r.retry_after = 1;
    return r;
  };
  // Draining: a load balancer stops sending here; requests still running are finishing.
  if (draining()) return unavailable("shutting_down", "Shutting down");
  if (!ready.load(std::memory_order_acquire)) return unavailable("loading", "Loading model");
  return json_reply(json::object{{"status", "ok"}});
}

void server::impl::check_api_key(const http::request<http::string_body>& req) const {
  if (opt.api_key.empty()) return;
  std::string_view key;
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    key = it->value();
    if (key.size() >= 7 && (key.substr(0, 7) == "Bearer " || key.substr(0, 7) == "bearer ")) key.remove_prefix(7);
  } else if (auto it2 = req.find("x-api-key"); it2 != req.end()) {
    key = it2->value();
  }
  if (key.empty() || !same_key(key, opt.api_key))
    throw api_error(401, "authentication_error",
                    key.empty() ? "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'" : "invalid API key");
}

reply server::impl::count_tokens(const json_in::object& body) const {
  const parsed_request pr = anthropic::parse_messages(body, true);
  check_model(pr);
  return json_reply(json::object{{"input_tokens", prompt_of(pr).size()}});
}

net::awaitable<bool> server::impl::handle(beast::tcp_stream& s, http::request<http::string_body>& req,
                                          simdjson::dom::parser& jp) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  const bool keep = req.keep_alive();
  const bool post = req.method() == http::verb::post, get = req.method() == http::verb::get;
  const api_flavor fl = path.starts_with("/v1/messages") ? api_flavor::anthropic : api_flavor::openai;
  const std::string rid = new_id("req_");
  reply r;
  try {
    if (path == "/health" || path == "/v1/health") {
      r = health();
      finished(endpoint_label(path), int(r.status), rid, t0);
      co_return co_await send(s, r, keep, rid);
    }
    if (draining()) throw shutting_down_error();
    if (!ready.load(std::memory_order_acquire))
      throw api_error(503, "unavailable_error", "the model is still loading; retry shortly");
    check_api_key(req);
    const generation_route* gen = generation_route_of(path);
    const bool is_post_route = gen || path == "/v1/messages/count_tokens" || path == "/v1/embeddings" ||
                               path == "/tokenize" || path == "/detokenize";
    if (get && (path == "/v1/models" || path == "/models")) {
      r = models_list();
    } else if (get && path.starts_with("/v1/models/")) {
      r = model_get(std::string_view(path).substr(11));
    } else if (get && path == "/metrics") {
      r = {http::status::ok, "text/plain; version=0.0.4; charset=utf-8", metrics.render(sched->stats(), sched->slots()), 0};
    } else if (is_post_route && !post) {
      throw api_error(405, "invalid_request_error", "method " + std::string(req.method_string()) + " not allowed on " + path + "; use POST");
    } else if (is_post_route) {
      // The body is JSON whatever Content-Type says (curl -d sends form-urlencoded).
      const json_in::object body = json_in::parse_object(jp, req.body());
      if (gen) {
        parsed_request pr = gen->parse(body);
        check_model(pr);
        auto prompt = prompt_of(pr);
        response_meta meta{new_id(gen->id_prefix), model_id,
                           std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count(),
                           std::uint32_t(prompt.size()), pr.n};
        std::unique_ptr<response_format> fmt = gen->format(std::move(meta), pr);
        co_return co_await generate(s, req, path, rid, std::move(pr), std::move(fmt), std::move(prompt));
      }
      if (path == "/v1/embeddings") co_return co_await embed(s, keep, rid, body, t0);
      r = path == "/tokenize" ? tokenize(body) : path == "/detokenize" ? detokenize(body) : count_tokens(body);
    } else {
      throw api_error(404, "not_found_error", "unknown route: " + std::string(req.method_string()) + " " + path);
    }
  } catch (const api_error& e) {
    r = api_error_reply(fl, e, rid);
  } catch (const std::exception& e) {
    // Internal failure: the message only, never a trace.
    const api_error ie(500, "server_error", std::string("internal error: ") + e.what());
    r = api_error_reply(fl, ie, rid);
  }
  finished(endpoint_label(path), int(r.status), rid, t0);
  co_return co_await send(s, r, keep, rid);
}

server::server(server_options opt) : impl_(std::make_unique<impl>(std::move(opt))) {}
server::~server() = default;

void server::stop() { impl_->request_stop(); }

// After a stop request: running generations get up to shutdown_timeout to finish; the scheduler
// then ends the rest, whose clients get the API's in-band error and a complete response, and the
// network loop stops once every generation has sent its last byte (or after a grace period).
void server::impl::drain_generations() {
  using clock = std::chrono::steady_clock;
  const auto running = [&] {
    const auto st = sched->stats();
    return st.running + st.waiting;
  };
  char msg[128];
  std::snprintf(msg, sizeof msg, "shutting down; %u requests running (up to %.1f s to finish)", unsigned(running()),
                opt.shutdown_timeout.count() / 1000.0);
  status(msg);
  const auto deadline = clock::now() + opt.shutdown_timeout;
  while (running() > 0 && clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  sched->shutdown();  // cancels what is left; their connections send the in-band error
  const auto grace = clock::now() + std::chrono::seconds(5);
  while (in_flight.load() > 0 && clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  halt();
}

void server::run(const std::filesystem::path& model_path, const rt::engine_options& eo,
                 const rt::scheduler_options& so, const std::function<void(std::uint16_t)>& on_listening) {
  impl& d = *impl_;
  const std::uint16_t port = d.listen();
  d.signals.add(SIGINT);
  d.signals.add(SIGTERM);
  // First signal: drain. Second: exit at once (the operator means it).
  d.signals.async_wait([&d](const beast::error_code& ec, int) {
    if (ec) return;
    d.request_stop();
    d.signals.async_wait([](const beast::error_code& ec2, int sig) {
      if (!ec2) std::_Exit(128 + sig);
    });
  });
  net::co_spawn(d.ioc, d.accept_loop(), net::detached);
  std::thread io([&d] { d.ioc.run(); });
  if (on_listening) on_listening(port);
  try {
    d.model = rt::model::load(model_path, eo);
    d.tok = std::make_unique<tokenizer::tokenizer>(tokenizer::tokenizer::from_gguf(d.model->gguf()));
    // The sampler draws ids below the logits' width and the detokenizer reads them: both must agree.
    if (std::uint32_t(d.tok->n_vocab()) != d.model->hparams().n_vocab)
      throw format_error(model_path.string() + ": the tokenizer has " + std::to_string(d.tok->n_vocab()) +
                         " tokens but token_embd.weight has " + std::to_string(d.model->hparams().n_vocab) + " rows");
    d.tmpl = chat::detect(d.model->gguf());
    for (std::int32_t id = 0; id < d.tok->n_vocab(); ++id)
      if (d.tok->is_eog(id)) d.eog.push_back(id);
    d.model_id = d.opt.model_id.empty() ? model_path.stem().string() : d.opt.model_id;
    d.sched = std::make_unique<rt::scheduler>(*d.model, *d.tok, so);
    d.grammars = std::make_unique<grammar_cache>(*d.tok);
    d.max_queue = so.max_queue;
    d.pooling = d.opt.pooling ? *d.opt.pooling : rt::pooling_of(d.model->gguf()).value_or(rt::pooling::none);
    if (d.opt.embeddings && d.pooling == rt::pooling::none)
      throw error("--embeddings: the model has no pooling metadata (<arch>.pooling_type); choose one with --pooling");
    if (d.pooling != rt::pooling::none && !d.model->supports_embeddings())
      throw error("embeddings (pooling " + std::string(rt::name(d.pooling)) + ") are not implemented on the " +
                  d.model->backend_description() + " backend; use --backend cpu or leave out --pooling/--embeddings");
  } catch (...) {
    d.halt();
    io.join();
    throw;
  }
  d.ready.store(true, std::memory_order_release);
  d.status("model '" + d.model_id + "' ready (" + d.model->backend_description() + ", " +
           std::to_string(d.sched->slots()) + " slots, context " + std::to_string(d.sched->context_size()) +
           (d.sched->recorded_ahead().steps ? ", " + std::to_string(d.sched->recorded_ahead().steps) + " step shapes recorded in " +
                                                  std::to_string(std::lround(d.sched->recorded_ahead().ms)) + " ms"
                                            : "") +
           (d.pooling != rt::pooling::none ? ", embeddings: " + std::string(rt::name(d.pooling)) + " pooling" : "") + ")");
  {
    std::unique_lock lk(d.stop_mu);
    d.stop_cv.wait(lk, [&d] { return d.draining(); });
  }
  d.drain_generations();
  io.join();
}

}  // namespace strata::serve
