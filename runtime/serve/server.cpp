// The Beast server (server.hpp): one coroutine per connection on a single Asio thread; the
// scheduler thread wakes a connection through a timer cancel posted to that thread. Wire rules
// follow docs/spec/api.md §0: content types, SSE framing flushed per event, errors before the
// first byte as normal JSON responses and after it in-band, retry-after on 429/503.
#include "server.hpp"

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <simdjson.h>

#include <array>
#include <atomic>
#include <csignal>
#include <iostream>
#include <random>

#include "anthropic_api.hpp"
#include "metrics.hpp"
#include "openai_api.hpp"
#include "strata/chat/template.hpp"
#include "strata/core/utf8.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace strata::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;
using namespace net::experimental::awaitable_operators;
constexpr auto tuple_awaitable = net::as_tuple(net::use_awaitable);

namespace {

struct reply {
  http::status status = http::status::ok;
  std::string content_type = "application/json";
  std::string body;
  int retry_after = 0;  // seconds; 0: no header
};

reply json_reply(const json::value& v, http::status st = http::status::ok) {
  return {st, "application/json", json::serialize(v), 0};
}

// Wakes one connection coroutine from the scheduler thread: the timer it waits on is cancelled
// by a handler posted to the connection's executor (timers are not thread-safe).
struct waker {
  explicit waker(net::any_io_executor ex) : timer(ex) {}
  net::steady_timer timer;
  std::atomic<bool> pending{false};
  bool signaled = false;  // Asio thread only
};

// Compares without an early exit, so response time does not reveal the key's prefix.
// The /metrics label of a request path: known routes by name, anything else as "other" (a
// scanner probing random paths must not grow the label set without bound).
std::string endpoint_label(std::string_view path) {
  static constexpr std::string_view known[] = {
      "/health", "/v1/health", "/v1/models", "/models", "/metrics", "/v1/chat/completions", "/v1/completions",
      "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/tokenize", "/detokenize"};
  for (const auto k : known)
    if (path == k) return std::string(k);
  return path.starts_with("/v1/models/") ? "/v1/models/{id}" : "other";
}

bool same_key(std::string_view a, std::string_view b) {
  unsigned diff = a.size() != b.size();
  for (std::size_t i = 0; i < a.size(); ++i) diff |= unsigned(a[i]) ^ unsigned(i < b.size() ? b[i] : 0);
  return diff == 0;
}

std::string param_of(const std::string& sampling_message) {
  // "sampling: top_p must be ..." -> "top_p"; "sampling: logit_bias[0] ..." -> "logit_bias"
  const std::string prefix = "sampling: ";
  if (sampling_message.rfind(prefix, 0) != 0) return {};
  std::string p = sampling_message.substr(prefix.size(), sampling_message.find(' ', prefix.size()) - prefix.size());
  if (const auto b = p.find('['); b != std::string::npos) p.resize(b);
  return p;
}

}  // namespace

struct server::impl {
  server_options opt;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::signal_set signals{ioc};
  std::atomic<bool> ready{false};
  server_metrics metrics;
  std::mt19937_64 id_rng{std::random_device{}()};  // Asio thread only
  std::int64_t started = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch()).count();

  // Set once before `ready`; read-only afterwards.
  std::unique_ptr<rt::model> model;
  std::unique_ptr<tokenizer::tokenizer> tok;
  std::unique_ptr<rt::scheduler> sched;
  chat::template_kind tmpl = chat::template_kind::generic;
  std::vector<std::int32_t> eog;
  std::string model_id;

  explicit impl(server_options o) : opt(std::move(o)) {}

  std::string new_id(std::string_view prefix) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string id(prefix);
    std::uint64_t a = id_rng(), b = id_rng();
    for (int i = 0; i < 12; ++i, a >>= 4) id += hex[a & 15];
    for (int i = 0; i < 12; ++i, b >>= 4) id += hex[b & 15];
    return id;
  }

  // ---- routes that answer at once -------------------------------------------------------

  reply models_list() const {
    // One body both SDKs accept (docs/spec/api.md rule 13).
    const std::string created_at = [&] {
      char buf[32];
      const std::time_t t = std::time_t(started);
      std::tm tm{};
      gmtime_r(&t, &tm);
      std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
      return std::string(buf);
    }();
    json::object m{{"id", model_id},           {"object", "model"},         {"created", started},
                   {"owned_by", "strata"},     {"type", "model"},           {"display_name", model_id},
                   {"created_at", created_at}};
    return json_reply(json::object{{"object", "list"},
                                   {"data", json::array{m}},
                                   {"has_more", false},
                                   {"first_id", model_id},
                                   {"last_id", model_id}});
  }

  reply model_get(std::string_view id) const {
    if (id != model_id) throw api_error(404, "not_found_error", "model '" + std::string(id) + "' does not exist");
    auto list = json::parse(models_list().body).as_object();
    return json_reply(list["data"].as_array()[0]);
  }

  reply tokenize(const json_in::object& body) const {
    const auto content = json_in::get_string(body, "content");
    if (!content) throw bad_request("'content' is required", "content");
    const bool add_special = json_in::get_bool(body, "add_special").value_or(false);
    const bool parse_special = json_in::get_bool(body, "parse_special").value_or(true);
    const bool with_pieces = json_in::get_bool(body, "with_pieces").value_or(false);
    const auto ids = tok->encode(*content, add_special, parse_special);
    json::array out;
    for (const auto id : ids) {
      if (with_pieces) out.push_back(json::object{{"id", id}, {"piece", utf8::sanitize(tok->token_to_piece(id, true))}});
      else out.push_back(id);
    }
    return json_reply(json::object{{"tokens", std::move(out)}});
  }

  reply detokenize(const json_in::object& body) const {
    const auto arr = json_in::get_array(body, "tokens");
    if (!arr) throw bad_request("'tokens' is required", "tokens");
    std::vector<std::int32_t> ids;
    std::size_t i = 0;
    for (auto t : *arr) {
      const std::string path = "tokens[" + std::to_string(i++) + "]";
      if (!t.is_int64() || std::int64_t(t) < 0 || std::int64_t(t) >= tok->n_vocab())
        throw bad_request("'" + path + "' must be a token id in [0, " + std::to_string(tok->n_vocab()) + ")", path);
      ids.push_back(std::int32_t(std::int64_t(t)));
    }
    return json_reply(json::object{{"content", utf8::sanitize(tok->decode(ids))}});
  }

  // ---- generation --------------------------------------------------------------------------

  std::vector<std::int32_t> prompt_of(const parsed_request& r) const {
    if (!r.chat) {
      if (!r.prompt_tokens.empty()) {
        for (std::size_t i = 0; i < r.prompt_tokens.size(); ++i)
          if (r.prompt_tokens[i] >= tok->n_vocab())
            throw bad_request("'prompt[" + std::to_string(i) + "]' is not a token id (vocabulary size " +
                                  std::to_string(tok->n_vocab()) + ")", "prompt");
        return r.prompt_tokens;
      }
      return tok->encode(r.prompt, true, true);
    }
    std::string text;
    try {
      text = chat::render(tmpl, r.messages, {.add_generation_prompt = true, .enable_thinking = true});
    } catch (const error& e) {
      throw bad_request(e.what(), "messages");
    }
    if (r.assistant_prefill) text += *r.assistant_prefill;
    return tok->encode(chat::prompt_for_tokenizer(text, tmpl, tok->add_bos()), true, true);
  }

  void check_model(const parsed_request& r) const {
    if (r.model != model_id)
      throw api_error(404, "not_found_error",
                      "model '" + r.model + "' does not exist; this server serves '" + model_id + "'", "model");
  }

  rt::generation_request make_request(const parsed_request& r, std::vector<std::int32_t> prompt) const {
    try {
      sampling::sampler smp(r.sampling, tok->n_vocab());
      sampling::stop_conditions stop(eog, r.sampling.max_tokens, r.stop);
      return {std::move(prompt), std::move(smp), std::move(stop)};
    } catch (const error& e) {
      const std::string m = e.what();
      throw bad_request(m, param_of(m));
    }
  }

  std::uint16_t listen() {
    beast::error_code ec;
    const auto addr = net::ip::make_address(opt.host, ec);
    if (ec) throw error("--host: '" + opt.host + "' is not an IP address");
    const tcp::endpoint ep(addr, opt.port);
    acceptor.open(ep.protocol());
    acceptor.set_option(net::socket_base::reuse_address(true));
    acceptor.bind(ep, ec);
    if (ec) throw error("cannot listen on " + opt.host + ":" + std::to_string(opt.port) + ": " + ec.message());
    acceptor.listen(net::socket_base::max_listen_connections);
    return acceptor.local_endpoint().port();
  }

  net::awaitable<void> accept_loop() {
    while (acceptor.is_open()) {
      auto [ec, sock] = co_await acceptor.async_accept(tuple_awaitable);
      if (ec) {
        if (ec == net::error::operation_aborted) co_return;
        continue;  // e.g. EMFILE: keep serving the connections we have
      }
      net::co_spawn(ioc, session(std::move(sock)), net::detached);
    }
  }

  // How long an idle keep-alive connection is kept (advertised in the Keep-Alive header).
  std::chrono::milliseconds keep_alive_timeout{5000};

  // After refusing a body we will not read, keep reading (and discarding) what the client still
  // sends for a moment: closing at once would reset the connection before it reads the answer.
  net::awaitable<void> drain(beast::tcp_stream& s) {
    beast::error_code ec;
    s.socket().shutdown(tcp::socket::shutdown_send, ec);
    std::array<char, 65536> sink;
    std::size_t total = 0;
    s.expires_after(std::chrono::seconds(2));
    while (total < 64 * opt.max_body_bytes) {
      auto [e, n] = co_await s.async_read_some(net::buffer(sink), tuple_awaitable);
      if (e) break;
      total += n;
    }
  }

  net::awaitable<void> session(tcp::socket sock);
  net::awaitable<bool> handle(beast::tcp_stream& s, http::request<http::string_body>& req, simdjson::dom::parser& jp);
  net::awaitable<bool> send(beast::tcp_stream& s, const reply& r, bool keep_alive, const std::string& request_id);
  net::awaitable<bool> generate(beast::tcp_stream& s, const http::request<http::string_body>& req,
                                const std::string& endpoint, const std::string& request_id, parsed_request pr,
                                std::unique_ptr<response_format> fmt, std::vector<std::int32_t> prompt);
};

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
      metrics.count_request(endpoint_label(target.substr(0, target.find('?'))), 413);
      // Named, not a braced temporary: GCC 12 destroys temporaries in co_await operands twice.
      const reply r{http::status::payload_too_large, "application/json", error_body(fl, e, rid), 0};
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
        const reply r{http::status::bad_request, "application/json", error_body(api_flavor::openai, e, rid), 0};
        co_await send(s, r, false, rid);
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

net::awaitable<bool> server::impl::handle(beast::tcp_stream& s, http::request<http::string_body>& req,
                                          simdjson::dom::parser& jp) {
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  const bool keep = req.keep_alive();
  const bool post = req.method() == http::verb::post, get = req.method() == http::verb::get;
  const api_flavor fl = path.starts_with("/v1/messages") ? api_flavor::anthropic : api_flavor::openai;
  const std::string rid = new_id("req_");
  reply r;
  try {
    if (path == "/health" || path == "/v1/health") {
      if (!ready.load(std::memory_order_acquire)) {
        r = json_reply(json::object{{"status", "loading"},
                                    {"error", json::object{{"code", 503}, {"message", "Loading model"}, {"type", "unavailable_error"}}}},
                       http::status::service_unavailable);
        r.retry_after = 1;
      } else {
        r = json_reply(json::object{{"status", "ok"}});
      }
      metrics.count_request(endpoint_label(path), int(r.status));
      co_return co_await send(s, r, keep, rid);
    }
    if (!ready.load(std::memory_order_acquire)) {
      api_error e(503, "unavailable_error", "the model is still loading; retry shortly");
      throw e;
    }
    if (!opt.api_key.empty()) {
      std::string_view key;
      if (auto it = req.find(http::field::authorization); it != req.end()) {
        key = it->value();
        if (key.size() >= 7 && (key.substr(0, 7) == "Bearer " || key.substr(0, 7) == "bearer ")) key.remove_prefix(7);
      } else if (auto it2 = req.find("x-api-key"); it2 != req.end()) {
        key = it2->value();
      }
      if (key.empty() || !same_key(key, opt.api_key))
        throw api_error(401, "authentication_error",
                        key.empty() ? "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
                                    : "invalid API key");
    }
    static constexpr std::string_view gen_routes[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses",
                                                      "/v1/messages"};
    const bool is_gen = std::find(std::begin(gen_routes), std::end(gen_routes), path) != std::end(gen_routes);
    const bool is_post_route = is_gen || path == "/v1/messages/count_tokens" || path == "/tokenize" ||
                               path == "/detokenize";
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
      if (path == "/tokenize") r = tokenize(body);
      else if (path == "/detokenize") r = detokenize(body);
      else if (path == "/v1/messages/count_tokens") {
        const parsed_request pr = anthropic::parse_messages(body, true);
        check_model(pr);
        r = json_reply(json::object{{"input_tokens", prompt_of(pr).size()}});
      } else {
        parsed_request pr = path == "/v1/chat/completions" ? openai::parse_chat(body)
                            : path == "/v1/completions"    ? openai::parse_completion(body)
                            : path == "/v1/responses"      ? openai::parse_responses(body)
                                                           : anthropic::parse_messages(body);
        check_model(pr);
        auto prompt = prompt_of(pr);
        response_meta meta{new_id(path == "/v1/messages" ? "msg_" : path == "/v1/responses" ? "resp_"
                                  : path == "/v1/completions" ? "cmpl-" : "chatcmpl-"),
                           model_id,
                           std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count(),
                           std::uint32_t(prompt.size())};
        std::unique_ptr<response_format> fmt =
            path == "/v1/chat/completions" ? openai::chat_format(std::move(meta), pr.include_usage)
            : path == "/v1/completions"    ? openai::completion_format(std::move(meta), pr.include_usage)
            : path == "/v1/responses"      ? openai::responses_format(std::move(meta), pr)
                                           : anthropic::messages_format(std::move(meta));
        co_return co_await generate(s, req, path, rid, std::move(pr), std::move(fmt), std::move(prompt));
      }
    } else {
      throw api_error(404, "not_found_error", "unknown route: " + std::string(req.method_string()) + " " + path);
    }
  } catch (const api_error& e) {
    r = {http::status(e.status), "application/json", error_body(fl, e, rid), 0};
    if (e.status == 429 || e.status == 503) r.retry_after = 1;
  } catch (const std::exception& e) {
    // Internal failure: the message only, never a trace.
    const api_error ie(500, "server_error", std::string("internal error: ") + e.what());
    r = {http::status::internal_server_error, "application/json", error_body(fl, ie, rid), 0};
  }
  metrics.count_request(endpoint_label(path), int(r.status));
  co_return co_await send(s, r, keep, rid);
}

net::awaitable<bool> server::impl::generate(beast::tcp_stream& s, const http::request<http::string_body>& req,
                                            const std::string& endpoint, const std::string& rid, parsed_request pr,
                                            std::unique_ptr<response_format> fmt, std::vector<std::int32_t> prompt) {
  const bool keep = req.keep_alive();
  const auto ex = co_await net::this_coro::executor;
  auto w = std::make_shared<waker>(ex);
  auto out = std::make_shared<rt::generation_stream>();
  out->set_notify([w] {
    if (!w->pending.exchange(true))
      net::post(w->timer.get_executor(), [w] {
        w->pending = false;
        w->signaled = true;
        w->timer.cancel();
      });
  });
  const auto t0 = std::chrono::steady_clock::now();
  const api_flavor fl = fmt->flavor();
  const auto fail = [&](const api_error& e) -> reply {
    reply r{http::status(e.status), "application/json", error_body(fl, e, rid), 0};
    if (e.status == 429 || e.status == 503) r.retry_after = 1;
    return r;
  };
  std::optional<reply> early;
  try {
    if (!sched->submit(out, make_request(pr, std::move(prompt))))
      early = fail(api_error(429, "rate_limit_error", "the request queue is full; retry later"));
  } catch (const api_error& e) {
    early = fail(e);
  } catch (const error& e) {  // prompt too long for the context
    early = fail(bad_request(e.what(), pr.chat ? "messages" : "prompt"));
  }
  if (early) {
    metrics.count_request(endpoint, int(early->status));
    co_return co_await send(s, *early, keep, rid);
  }

  // Waits for output, a ping deadline or the client leaving (EOF while we wait: cancel).
  enum class wake { output, timeout, gone };
  bool watch_socket = true;
  auto wait = [&]() -> net::awaitable<wake> {
    if (w->signaled) {
      w->signaled = false;
      co_return wake::output;
    }
    w->timer.expires_after(opt.ping_interval);
    if (watch_socket) {
      auto r = co_await (w->timer.async_wait(tuple_awaitable) ||
                         s.socket().async_wait(tcp::socket::wait_read, tuple_awaitable));
      if (r.index() == 1) {
        char c;
        beast::error_code ec;
        const std::size_t n = s.socket().receive(net::buffer(&c, 1), tcp::socket::message_peek, ec);
        if (ec || n == 0) co_return wake::gone;
        watch_socket = false;  // the client pipelined its next request: stop watching
      }
    } else {
      co_await w->timer.async_wait(tuple_awaitable);
    }
    const bool sig = w->signaled;
    w->signaled = false;
    co_return sig ? wake::output : wake::timeout;
  };

  rt::generation_stream::state st;
  generation_result res;
  bool first = true;
  const auto to_result = [&] {
    res.reason = st.reason;
    res.prompt_tokens = st.prompt_tokens;
    res.cached_tokens = st.cached_tokens;
    res.completion_tokens = st.completion_tokens;
    if (st.reason == rt::finish_reason::stop_string && st.stop_index < pr.stop.size())
      res.stop_sequence = pr.stop[st.stop_index];
  };
  const auto error_of = [&]() {
    return st.reason == rt::finish_reason::cancelled
               ? api_error(503, "unavailable_error", "the server is shutting down")
               : api_error(500, "server_error", "generation failed: " + st.error);
  };

  if (!pr.stream) {
    while (true) {
      out->take(st);
      res.text += st.text;
      if (first && st.prefill_done) {
        first = false;
        metrics.add_ttft(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      if (st.done) break;
      if (co_await wait() == wake::gone) {
        out->cancel();
        metrics.count_request(endpoint, 499);
        co_return false;
      }
    }
    to_result();
    reply r = (st.reason == rt::finish_reason::error || st.reason == rt::finish_reason::cancelled)
                  ? fail(error_of())
                  : reply{http::status::ok, "application/json", fmt->body(res), 0};
    metrics.count_request(endpoint, int(r.status));
    co_return co_await send(s, r, keep, rid);
  }

  http::response<http::empty_body> head{http::status::ok, 11};
  head.set(http::field::server, "strata-serve");
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  head.set("x-accel-buffering", "no");
  head.set("request-id", rid);
  head.set("x-request-id", rid);
  head.keep_alive(keep);
  if (keep) head.set("keep-alive", "timeout=" + std::to_string(keep_alive_timeout.count() / 1000));
  head.chunked(true);
  http::response_serializer<http::empty_body> sr(head);
  s.expires_after(std::chrono::seconds(60));
  if (auto [ec, n] = co_await http::async_write_header(s, sr, tuple_awaitable); ec) {
    out->cancel();
    co_return false;
  }
  std::string buf;
  fmt->begin(buf);
  const auto flush = [&]() -> net::awaitable<bool> {
    if (buf.empty()) co_return true;
    s.expires_after(std::chrono::seconds(60));  // a client that stops reading is dropped
    auto [ec, n] = co_await net::async_write(s, http::make_chunk(net::buffer(buf)), tuple_awaitable);
    buf.clear();
    co_return !ec;
  };
  while (true) {
    out->take(st);
    if (first && st.prefill_done) {
      first = false;
      metrics.add_ttft(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    fmt->text(st.text, buf);
    if (st.done) {
      to_result();
      if (st.reason == rt::finish_reason::error || st.reason == rt::finish_reason::cancelled) fmt->error(error_of(), buf);
      else fmt->end(res, buf);
      break;
    }
    if (!co_await flush()) {
      out->cancel();  // the client went away mid-stream: free its slot
      metrics.count_request(endpoint, 499);
      co_return false;
    }
    const wake wk = co_await wait();
    if (wk == wake::gone) {
      out->cancel();
      metrics.count_request(endpoint, 499);
      co_return false;
    }
    if (wk == wake::timeout) fmt->ping(buf);
  }
  metrics.count_request(endpoint, 200);
  if (!co_await flush()) co_return false;
  s.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await net::async_write(s, http::make_chunk_last(), tuple_awaitable);
  s.expires_never();
  co_return !ec && keep;
}

server::server(server_options opt) : impl_(std::make_unique<impl>(std::move(opt))) {}
server::~server() = default;

void server::stop() {
  net::post(impl_->ioc, [i = impl_.get()] {
    beast::error_code ec;
    i->acceptor.close(ec);
    i->ioc.stop();
  });
}

void server::run(const std::filesystem::path& model_path, const rt::engine_options& eo,
                 const rt::scheduler_options& so, const std::function<void(std::uint16_t)>& on_listening) {
  impl& d = *impl_;
  const std::uint16_t port = d.listen();
  d.signals.add(SIGINT);
  d.signals.add(SIGTERM);
  d.signals.async_wait([this](const beast::error_code& ec, int) {
    if (!ec) stop();
  });
  net::co_spawn(d.ioc, d.accept_loop(), net::detached);
  std::thread io([&d] { d.ioc.run(); });
  if (on_listening) on_listening(port);
  try {
    d.model = rt::model::load(model_path, eo);
    d.tok = std::make_unique<tokenizer::tokenizer>(tokenizer::tokenizer::from_gguf(d.model->gguf()));
    d.tmpl = chat::detect(d.model->gguf());
    for (std::int32_t id = 0; id < d.tok->n_vocab(); ++id)
      if (d.tok->is_eog(id)) d.eog.push_back(id);
    d.model_id = d.opt.model_id.empty() ? model_path.stem().string() : d.opt.model_id;
    d.sched = std::make_unique<rt::scheduler>(*d.model, *d.tok, so);
  } catch (...) {
    stop();
    io.join();
    throw;
  }
  d.ready.store(true, std::memory_order_release);
  std::cerr << "strata-serve: model '" << d.model_id << "' ready (" << d.model->backend_description() << ", "
            << d.sched->slots() << " slots, context " << d.sched->context_size() << ")\n";
  io.join();
  // Connections are gone; end the generations and stop the worker before the Asio objects die.
  d.sched->shutdown();
}

}  // namespace strata::serve
