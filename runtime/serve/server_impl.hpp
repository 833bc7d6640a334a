// strata-serve's server internals, shared by server.cpp (listening, connections, routing,
// shutdown) and generation.cpp (one generation request, streamed or not). The Beast server: one
// coroutine per connection on a single Asio thread; the scheduler thread wakes a connection
// through a timer cancel posted to that thread. Wire rules follow docs/spec/api.md §0: content
// types, SSE framing flushed per event, errors before the first byte as normal JSON responses and
// after it in-band, retry-after on 429/503.
#pragma once
#include "server.hpp"

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <simdjson.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <iostream>
#include <random>

#include "anthropic_api.hpp"
#include "choice_output.hpp"
#include "constraints.hpp"
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
inline constexpr auto tuple_awaitable = net::as_tuple(net::use_awaitable);


struct reply {
  http::status status = http::status::ok;
  std::string content_type = "application/json";
  std::string body;
  int retry_after = 0;  // seconds; 0: no header
};

inline reply json_reply(const json::value& v, http::status st = http::status::ok) {
  return {st, "application/json", json::serialize(v), 0};
}

// An error answer in the API's shape; 429 and 503 say when to retry.
inline reply api_error_reply(api_flavor f, const api_error& e, const std::string& request_id) {
  reply r{http::status(e.status), "application/json", error_body(f, e, request_id), 0};
  if (e.status == 429 || e.status == 503) r.retry_after = 1;
  return r;
}

// Wakes one connection coroutine from the scheduler thread: the timer it waits on is cancelled
// by a handler posted to the connection's executor (timers are not thread-safe).
struct waker {
  explicit waker(net::any_io_executor ex) : timer(ex) {}
  net::steady_timer timer;
  std::atomic<bool> pending{false};
  bool signaled = false;  // Asio thread only
};

// A stream's notify callback (called on the scheduler thread): wakes w's coroutine, once per
// batch of output.
inline auto wake_on_output(std::shared_ptr<waker> w) {
  return [w = std::move(w)] {
    if (!w->pending.exchange(true))
      net::post(w->timer.get_executor(), [w] {
        w->pending = false;
        w->signaled = true;
        w->timer.cancel();
      });
  };
}

// The /metrics label of a request path: known routes by name, anything else as "other" (a
// scanner probing random paths must not grow the label set without bound).
inline std::string endpoint_label(std::string_view path) {
  static constexpr std::string_view known[] = {
      "/health", "/v1/health", "/v1/models", "/models", "/metrics", "/v1/chat/completions", "/v1/completions",
      "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/embeddings", "/tokenize", "/detokenize"};
  for (const auto k : known)
    if (path == k) return std::string(k);
  return path.starts_with("/v1/models/") ? "/v1/models/{id}" : "other";
}

// Compares without an early exit, so response time does not reveal the key's prefix.
inline bool same_key(std::string_view a, std::string_view b) {
  unsigned diff = a.size() != b.size();
  for (std::size_t i = 0; i < a.size(); ++i) diff |= unsigned(a[i]) ^ unsigned(i < b.size() ? b[i] : 0);
  return diff == 0;
}

inline std::string param_of(const std::string& sampling_message) {
  // "sampling: top_p must be ..." -> "top_p"; "sampling: logit_bias[0] ..." -> "logit_bias"
  const std::string prefix = "sampling: ";
  if (sampling_message.rfind(prefix, 0) != 0) return {};
  std::string p = sampling_message.substr(prefix.size(), sampling_message.find(' ', prefix.size()) - prefix.size());
  if (const auto b = p.find('['); b != std::string::npos) p.resize(b);
  return p;
}

// Token counts of a finished request, as the API's usage reports them (a prompt of n choices
// counted once).
struct request_tokens {
  std::uint32_t prompt = 0, cached = 0, completion = 0;
};

struct server::impl {
  server_options opt;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::signal_set signals{ioc};
  std::atomic<bool> ready{false};
  // Shutdown: the first SIGTERM/SIGINT (or stop()) sets draining (new requests 503, /health 503)
  // and wakes run(), which lets running generations finish for up to shutdown_timeout.
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight{0};  // generate() coroutines still sending
  std::mutex stop_mu;
  std::condition_variable stop_cv;
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
  std::unique_ptr<grammar_cache> grammars;   // network thread only
  rt::pooling pooling = rt::pooling::none;   // none: /v1/embeddings is off
  std::uint32_t max_queue = 0;               // scheduler_options::max_queue

  explicit impl(server_options o) : opt(std::move(o)) {}

  bool draining() const noexcept { return draining_.load(std::memory_order_acquire); }
  static api_error shutting_down_error() { return api_error(503, "unavailable_error", "the server is shutting down"); }
  void request_stop() {
    {
      std::lock_guard lk(stop_mu);
      draining_.store(true, std::memory_order_release);
    }
    stop_cv.notify_all();
  }
  // Stops the network loop at once: connections still open are dropped.
  void halt() {
    net::post(ioc, [this] {
      beast::error_code ec;
      acceptor.close(ec);
      ioc.stop();
    });
  }
  void drain_generations();

  // A finished request: counted in /metrics and handed to the access log hook.
  void finished(const std::string& route, int status, const std::string& rid, std::chrono::steady_clock::time_point t0,
                request_tokens tokens = {}) {
    metrics.count_request(route, status);
    if (!opt.on_request) return;
    request_record r{rid, route, status};
    r.prompt_tokens = tokens.prompt;
    r.cached_tokens = tokens.cached;
    r.completion_tokens = tokens.completion;
    r.latency_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    opt.on_request(r);
  }
  void status(const std::string& message) const {
    if (opt.on_status) opt.on_status(message);
    else std::cerr << "strata-serve: " << message << "\n";
  }

  std::string new_id(std::string_view prefix) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string id(prefix);
    std::uint64_t a = id_rng(), b = id_rng();
    for (int i = 0; i < 12; ++i, a >>= 4) id += hex[a & 15];
    for (int i = 0; i < 12; ++i, b >>= 4) id += hex[b & 15];
    return id;
  }

  // ---- routes that answer at once -------------------------------------------------------

  // /health: 200 when the model is ready; 503 while it loads or the server drains.
  reply health() const;
  // 401 unless the request carries the API key (when one is set): Authorization: Bearer or x-api-key.
  void check_api_key(const http::request<http::string_body>& req) const;
  // POST /v1/messages/count_tokens: the prompt's token count, tools included.
  reply count_tokens(const json_in::object& body) const;

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
    if (id != model_id)
      throw api_error(404, "not_found_error", "model '" + std::string(id) + "' does not exist", "model");
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
    // Tools the model may call are shown to it; with tool_choice none they are left out, so it
    // is not told to call what it must not. Forced structure starts at once (Qwen3: an empty
    // think block closes the reasoning first).
    chat::render_options ro;
    if (r.may_call_tools()) ro.tools = &r.tools;
    std::string text;
    try {
      text = chat::render(tmpl, r.messages, ro);
    } catch (const error& e) {
      throw bad_request(e.what(), "messages");
    }
    if (r.forced_structure()) text += chat::forced_output_prefix(tmpl, ro);
    if (r.assistant_prefill) text += *r.assistant_prefill;
    return tok->encode(chat::prompt_for_tokenizer(text, tmpl, tok->add_bos()), true, true);
  }

  void check_model(const parsed_request& r) const {
    if (r.model != model_id)
      throw api_error(404, "not_found_error",
                      "model '" + r.model + "' does not exist; this server serves '" + model_id + "'", "model");
  }

  // The request's grammar, compiled (null automaton: free text). Network thread only.
  struct compiled_grammar {
    std::shared_ptr<grammar::automaton> automaton;
    chat::call_trigger trigger{};
  };
  compiled_grammar grammar_of(const parsed_request& r) {
    request_grammar g = grammar_for(r, tmpl);
    if (g.gbnf.empty()) return {};
    try {
      return {grammars->get(g.gbnf), std::move(g.trigger)};
    } catch (const error& e) {
      throw bad_request(e.what(), r.format != output_format::text ? r.schema_param : "tools");
    }
  }

  // Choice `index` of the request: its own sampler (seeded seed + index when a seed is given, so
  // choices differ yet replay) and its own position in the grammar.
  rt::generation_request make_request(const parsed_request& r, std::vector<std::int32_t> prompt, std::uint32_t index,
                                      const compiled_grammar& g) const {
    try {
      sampling::sampler_params sp = r.sampling;
      if (sp.seed != sampling::default_seed) sp.seed += index;
      sampling::sampler smp(sp, tok->n_vocab());
      sampling::stop_conditions stop(eog, r.sampling.max_tokens, r.stop);
      rt::generation_request req{std::move(prompt), std::move(smp), std::move(stop)};
      if (g.automaton) req.constraint = std::make_unique<grammar_constraint>(g.automaton, g.trigger);
      req.top_logprobs = r.top_logprobs;
      return req;
    } catch (const error& e) {
      const std::string m = e.what();
      throw bad_request(m, param_of(m));
    }
  }

  // POST /v1/embeddings (embeddings.cpp).
  net::awaitable<bool> embed(beast::tcp_stream& s, bool keep, const std::string& rid, const json_in::object& body,
                             std::chrono::steady_clock::time_point t0);

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

  // ---- one generation (generate() and its parts) -------------------------------------------
  // One choice (OpenAI n): a request of its own in the scheduler.
  struct choice_run {
    std::shared_ptr<rt::generation_stream> out;
    rt::generation_stream::state st{};
    choice_output output;
    bool ended = false;  // finished and its end sent
  };
  struct generation {
    beast::tcp_stream& s;
    bool keep;
    const std::string& endpoint;
    const std::string& rid;
    parsed_request pr;
    std::unique_ptr<response_format> fmt;
    std::shared_ptr<waker> w;
    std::vector<choice_run> choices;
    std::chrono::steady_clock::time_point t0;
    bool first_seen = false;    // the first token arrived (time to first token counted)
    bool watch_socket = true;   // until the client pipelines its next request
  };
  void finished(const generation& g, int status) {
    request_tokens t;
    if (!g.choices.empty()) {
      t.prompt = g.choices.front().st.prompt_tokens;
      t.cached = g.choices.front().st.cached_tokens;
    }
    for (const auto& c : g.choices) t.completion += c.st.completion_tokens;
    finished(g.endpoint, status, g.rid, g.t0, t);
  }
  enum class wake { output, timeout, gone };
  net::awaitable<bool> generate(beast::tcp_stream& s, const http::request<http::string_body>& req,
                                const std::string& endpoint, const std::string& request_id, parsed_request pr,
                                std::unique_ptr<response_format> fmt, std::vector<std::int32_t> prompt);
  std::optional<reply> submit(generation& g, std::vector<std::int32_t> prompt);
  net::awaitable<wake> wait_for(beast::tcp_stream& s, waker& w, bool& watch_socket);
  net::awaitable<wake> wait_output(generation& g);
  // Takes every choice's new output; streaming (buf non-null), its events go to *buf. True when
  // every choice has finished.
  bool take(generation& g, std::string* buf);
  void cancel(generation& g);
  net::awaitable<bool> reply_whole(generation& g);
  net::awaitable<bool> stream_events(generation& g);
  reply error_reply(const generation& g, const api_error& e) const;
  generation_result result_of(const generation& g) const;
  api_error failure_of(const generation& g) const;
  static bool failed(const generation& g);
};

}  // namespace strata::serve
