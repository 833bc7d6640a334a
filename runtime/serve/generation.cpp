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
               {}, std::chrono::steady_clock::now()};
  const auto notify = wake_on_output(g.w);
  const std::string call_prefix = g.fmt->flavor() == api_flavor::anthropic ? "toolu_" : "call_";
  for (std::uint32_t c = 0; c < g.pr.n; ++c) {
    auto out = std::make_shared<rt::generation_stream>();
    out->set_notify(notify);
    choice_output co(c, *tok, g.pr.tool_calls_possible() ? std::optional(tmpl) : std::nullopt,
                     [this, call_prefix] { return new_id(call_prefix); });
    g.choices.push_back({std::move(out), {}, std::move(co)});
  }
  if (std::optional<reply> early = submit(g, std::move(prompt))) {
    finished(endpoint, int(early->status), rid, g.t0);
    co_return co_await send(s, *early, g.keep, rid);
  }
  // An if, not ?: with a co_await in each arm (GCC 12 runs both).
  if (g.pr.stream) co_return co_await stream_events(g);
  co_return co_await reply_whole(g);
}

reply server::impl::error_reply(const generation& g, const api_error& e) const {
  return api_error_reply(g.fmt->flavor(), e, g.rid);
}

// Queues every choice; an answer when they cannot all be queued (full queue, prompt too long,
// bad parameters), in which case the ones already queued are cancelled.
std::optional<reply> server::impl::submit(generation& g, std::vector<std::int32_t> prompt) {
  std::size_t queued = 0;
  std::optional<api_error> err;
  // Choices queue like requests: more than the slots and the queue can hold would never fit.
  if (g.pr.n > sched->slots() + max_queue)
    return error_reply(g, bad_request("'n' is " + std::to_string(g.pr.n) + "; this server runs at most " +
                                          std::to_string(sched->slots() + max_queue) + " sequences at once (slots + queue)",
                                      "n"));
  try {
    const auto grammar = grammar_of(g.pr);
    for (auto& c : g.choices) {
      const bool last = &c == &g.choices.back();
      if (!sched->submit(c.out, make_request(g.pr, last ? std::move(prompt) : prompt, std::uint32_t(queued), grammar))) {
        err = draining() ? shutting_down_error() : api_error(429, "rate_limit_error", "the request queue is full; retry later");
        break;
      }
      ++queued;
    }
  } catch (const api_error& e) {
    err = e;
  } catch (const error& e) {  // prompt too long for the context
    err = bad_request(e.what(), g.pr.chat ? "messages" : "prompt");
  }
  if (!err) return std::nullopt;
  for (std::size_t i = 0; i < queued; ++i) g.choices[i].out->cancel();
  return error_reply(g, *err);
}

// Waits for output, a ping deadline or the client leaving (EOF while we wait: gone).
net::awaitable<server::impl::wake> server::impl::wait_for(beast::tcp_stream& s, waker& w, bool& watch_socket) {
  if (w.signaled) {
    w.signaled = false;
    co_return wake::output;
  }
  w.timer.expires_after(opt.ping_interval);
  if (watch_socket) {
    auto r = co_await (w.timer.async_wait(tuple_awaitable) ||
                       s.socket().async_wait(tcp::socket::wait_read, tuple_awaitable));
    if (r.index() == 1) {
      char c;
      beast::error_code ec;
      const std::size_t n = s.socket().receive(net::buffer(&c, 1), tcp::socket::message_peek, ec);
      if (ec || n == 0) co_return wake::gone;
      watch_socket = false;  // the client pipelined its next request: stop watching
    }
  } else {
    co_await w.timer.async_wait(tuple_awaitable);
  }
  const bool sig = w.signaled;
  w.signaled = false;
  co_return sig ? wake::output : wake::timeout;
}

net::awaitable<server::impl::wake> server::impl::wait_output(generation& g) {
  co_return co_await wait_for(g.s, *g.w, g.watch_socket);
}

bool server::impl::take(generation& g, std::string* buf) {
  bool all_done = true;
  std::string sink;
  for (auto& c : g.choices) {
    if (c.ended) continue;
    c.out->take(c.st);
    if (!g.first_seen && c.st.prefill_done) {
      g.first_seen = true;
      metrics.add_ttft(std::chrono::duration<double>(std::chrono::steady_clock::now() - g.t0).count());
    }
    response_format* fmt = buf ? g.fmt.get() : nullptr;
    std::string& out = buf ? *buf : sink;
    c.output.feed(c.st, fmt, out);
    if (!c.st.done) {
      all_done = false;
      continue;
    }
    c.ended = true;
    // A failed choice ends the whole response with an error: no finish chunk for it.
    if (!failed(g)) c.output.finish(c.st, g.pr.stop, fmt, out);
  }
  return all_done;
}

void server::impl::cancel(generation& g) {
  for (auto& c : g.choices) c.out->cancel();
}

generation_result server::impl::result_of(const generation& g) const {
  generation_result res;
  for (const auto& c : g.choices) res.choices.push_back(c.output.result());
  // n choices of one prompt: the prompt is counted once, as the API does.
  res.prompt_tokens = g.choices.front().st.prompt_tokens;
  res.cached_tokens = g.choices.front().st.cached_tokens;
  return res;
}

// The error a generation that ended without a result reports (cancelled: only by shutdown, since
// a client that left hears nothing).
api_error server::impl::failure_of(const generation& g) const {
  for (const auto& c : g.choices)
    if (c.st.reason == rt::finish_reason::error) return api_error(500, "server_error", "generation failed: " + c.st.error);
  return shutting_down_error();
}

bool server::impl::failed(const generation& g) {
  for (const auto& c : g.choices)
    if (c.st.reason == rt::finish_reason::error || c.st.reason == rt::finish_reason::cancelled) return true;
  return false;
}

net::awaitable<bool> server::impl::reply_whole(generation& g) {
  while (!take(g, nullptr) && !failed(g)) {
    if (co_await wait_output(g) == wake::gone) {
      cancel(g);
      finished(g, 499);
      co_return false;
    }
  }
  if (failed(g)) cancel(g);
  const reply r = failed(g) ? error_reply(g, failure_of(g))
                            : reply{http::status::ok, "application/json", g.fmt->body(result_of(g)), 0};
  finished(g, int(r.status));
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
    cancel(g);
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
    const bool done = take(g, &buf);
    if (failed(g)) {  // one choice failed: the response ends with the error
      cancel(g);
      g.fmt->error(failure_of(g), buf);
      break;
    }
    if (done) {
      g.fmt->end(result_of(g), buf);
      break;
    }
    if (!co_await flush()) {
      cancel(g);  // the client went away mid-stream: free its slots
      finished(g, 499);
      co_return false;
    }
    const wake wk = co_await wait_output(g);
    if (wk == wake::gone) {
      cancel(g);
      finished(g, 499);
      co_return false;
    }
    if (wk == wake::timeout) g.fmt->ping(buf);
  }
  finished(g, 200);
  if (!co_await flush()) co_return false;
  s.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await net::async_write(s, http::make_chunk_last(), tuple_awaitable);
  s.expires_never();
  co_return !ec && g.keep && !draining();
}

}  // namespace strata::serve
