// One generation request from submission to the last byte (server_impl.hpp): queued on the
// scheduler, then one JSON body or an SSE stream, ended in-band if the server shuts down.
#include "server_impl.hpp"

namespace strata::serve {

// One generation request from submission to the last byte: submit() queues it (or answers an
// early error), then reply_whole() sends one JSON body or stream_events() streams SSE events.
net::awaitable<bool> server::impl::generate(beast::tcp_stream& s, const http::request<http::string_body>& req,
                                            const std::string& endpoint, const std::string& rid, parsed_request pr,
                                            std::unique_ptr<response_format> fmt, std::vector<std::int32_t> prompt) {
  struct in_flight_count {
    std::atomic<int>& n;
    explicit in_flight_count(std::atomic<int>& c) : n(c) { ++n; }
    ~in_flight_count() { --n; }
  } counted(in_flight);
  // The executor first, in its own statement: GCC 12 mishandles co_await inside a braced init.
  const auto ex = co_await net::this_coro::executor;
  generation g{s, req.keep_alive(), endpoint, rid, std::move(pr), std::move(fmt), std::make_shared<waker>(ex),
               std::make_shared<rt::generation_stream>(), std::chrono::steady_clock::now()};
  g.out->set_notify([w = g.w] {
    if (!w->pending.exchange(true))
      net::post(w->timer.get_executor(), [w] {
        w->pending = false;
        w->signaled = true;
        w->timer.cancel();
      });
  });
  if (std::optional<reply> early = submit(g, std::move(prompt))) {
    metrics.count_request(endpoint, int(early->status));
    co_return co_await send(s, *early, g.keep, rid);
  }
  // An if, not ?: with a co_await in each arm (GCC 12 runs both).
  if (g.pr.stream) co_return co_await stream_events(g);
  co_return co_await reply_whole(g);
}

reply server::impl::error_reply(const generation& g, const api_error& e) const {
  reply r{http::status(e.status), "application/json", error_body(g.fmt->flavor(), e, g.rid), 0};
  if (e.status == 429 || e.status == 503) r.retry_after = 1;
  return r;
}

// Queues the request; an answer when it cannot be queued (full queue, prompt too long).
std::optional<reply> server::impl::submit(generation& g, std::vector<std::int32_t> prompt) {
  try {
    if (!sched->submit(g.out, make_request(g.pr, std::move(prompt))))
      return error_reply(g, draining() ? shutting_down_error()
                                       : api_error(429, "rate_limit_error", "the request queue is full; retry later"));
  } catch (const api_error& e) {
    return error_reply(g, e);
  } catch (const error& e) {  // prompt too long for the context
    return error_reply(g, bad_request(e.what(), g.pr.chat ? "messages" : "prompt"));
  }
  return std::nullopt;
}

// Waits for output, a ping deadline or the client leaving (EOF while we wait: gone).
net::awaitable<server::impl::wake> server::impl::wait_output(generation& g) {
  waker& w = *g.w;
  if (w.signaled) {
    w.signaled = false;
    co_return wake::output;
  }
  w.timer.expires_after(opt.ping_interval);
  if (g.watch_socket) {
    auto r = co_await (w.timer.async_wait(tuple_awaitable) ||
                       g.s.socket().async_wait(tcp::socket::wait_read, tuple_awaitable));
    if (r.index() == 1) {
      char c;
      beast::error_code ec;
      const std::size_t n = g.s.socket().receive(net::buffer(&c, 1), tcp::socket::message_peek, ec);
      if (ec || n == 0) co_return wake::gone;
      g.watch_socket = false;  // the client pipelined its next request: stop watching
    }
  } else {
    co_await w.timer.async_wait(tuple_awaitable);
  }
  const bool sig = w.signaled;
  w.signaled = false;
  co_return sig ? wake::output : wake::timeout;
}

// Takes the stream's new state; counts the time to first token once.
void server::impl::take(generation& g) {
  g.out->take(g.st);
  if (!g.first_seen && g.st.prefill_done) {
    g.first_seen = true;
    metrics.add_ttft(std::chrono::duration<double>(std::chrono::steady_clock::now() - g.t0).count());
  }
}

generation_result server::impl::result_of(const generation& g, std::string text) const {
  generation_result res;
  res.text = std::move(text);
  res.reason = g.st.reason;
  res.prompt_tokens = g.st.prompt_tokens;
  res.cached_tokens = g.st.cached_tokens;
  res.completion_tokens = g.st.completion_tokens;
  if (g.st.reason == rt::finish_reason::stop_string && g.st.stop_index < g.pr.stop.size())
    res.stop_sequence = g.pr.stop[g.st.stop_index];
  return res;
}

// The error a generation that ended without a result reports (cancelled: only by shutdown, since
// a client that left hears nothing).
api_error server::impl::failure_of(const generation& g) const {
  return g.st.reason == rt::finish_reason::cancelled ? shutting_down_error()
                                                      : api_error(500, "server_error", "generation failed: " + g.st.error);
}

bool server::impl::failed(const generation& g) {
  return g.st.reason == rt::finish_reason::error || g.st.reason == rt::finish_reason::cancelled;
}

net::awaitable<bool> server::impl::reply_whole(generation& g) {
  std::string text;
  while (true) {
    take(g);
    text += g.st.text;
    if (g.st.done) break;
    if (co_await wait_output(g) == wake::gone) {
      g.out->cancel();
      metrics.count_request(g.endpoint, 499);
      co_return false;
    }
  }
  const reply r = failed(g) ? error_reply(g, failure_of(g))
                            : reply{http::status::ok, "application/json", g.fmt->body(result_of(g, std::move(text))), 0};
  metrics.count_request(g.endpoint, int(r.status));
  co_return co_await send(g.s, r, g.keep && !draining(), g.rid);
}

net::awaitable<bool> server::impl::stream_events(generation& g) {
  beast::tcp_stream& s = g.s;
  http::response<http::empty_body> head{http::status::ok, 11};
  head.set(http::field::server, "strata-serve");
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  head.set("x-accel-buffering", "no");
  head.set("request-id", g.rid);
  head.set("x-request-id", g.rid);
  head.keep_alive(g.keep);
  if (g.keep) head.set("keep-alive", "timeout=" + std::to_string(keep_alive_timeout.count() / 1000));
  head.chunked(true);
  http::response_serializer<http::empty_body> sr(head);
  s.expires_after(std::chrono::seconds(60));
  if (auto [ec, n] = co_await http::async_write_header(s, sr, tuple_awaitable); ec) {
    g.out->cancel();
    co_return false;
  }
  std::string buf;
  g.fmt->begin(buf);
  const auto flush = [&]() -> net::awaitable<bool> {
    if (buf.empty()) co_return true;
    s.expires_after(std::chrono::seconds(60));  // a client that stops reading is dropped
    auto [ec, n] = co_await net::async_write(s, http::make_chunk(net::buffer(buf)), tuple_awaitable);
    buf.clear();
    co_return !ec;
  };
  while (true) {
    take(g);
    g.fmt->text(g.st.text, buf);
    if (g.st.done) {
      if (failed(g)) g.fmt->error(failure_of(g), buf);
      else g.fmt->end(result_of(g, {}), buf);
      break;
    }
    if (!co_await flush()) {
      g.out->cancel();  // the client went away mid-stream: free its slot
      metrics.count_request(g.endpoint, 499);
      co_return false;
    }
    const wake wk = co_await wait_output(g);
    if (wk == wake::gone) {
      g.out->cancel();
      metrics.count_request(g.endpoint, 499);
      co_return false;
    }
    if (wk == wake::timeout) g.fmt->ping(buf);
  }
  metrics.count_request(g.endpoint, 200);
  if (!co_await flush()) co_return false;
  s.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await net::async_write(s, http::make_chunk_last(), tuple_awaitable);
  s.expires_never();
  co_return !ec && g.keep && !draining();
}

}  // namespace strata::serve
