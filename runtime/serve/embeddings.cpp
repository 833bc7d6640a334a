// /v1/embeddings: parsing, the response body, and the route (embeddings.hpp, server_impl.hpp).
#include "embeddings.hpp"

#include <bit>

#include "server_impl.hpp"

namespace strata::serve {
using namespace json_in;

embedding_request parse_embeddings(const object& body, std::uint32_t n_embd) {
  embedding_request r;
  const auto model = get_string(body, "model");
  if (!model) throw bad_request("'model' is required", "model");
  r.model = std::string(*model);
  if (auto f = get_string(body, "encoding_format")) {
    if (*f != "float" && *f != "base64")
      throw bad_request("'encoding_format' must be float or base64, got '" + std::string(*f) + "'", "encoding_format");
    r.base64 = *f == "base64";
  }
  if (auto d = get_int(body, "dimensions"); d && *d != std::int64_t(n_embd))
    throw bad_request("'dimensions' must be the model's embedding size " + std::to_string(n_embd) +
                          " (this model's vectors cannot be shortened)", "dimensions");
  const auto in = field(body, "input");
  if (!in) throw bad_request("'input' is required", "input");
  const auto ids = [](const array& a, const std::string& path) {
    std::vector<std::int32_t> out = token_ids(a, path);
    if (out.empty()) throw bad_request("'" + path + "' is empty", path);
    return out;
  };
  const auto add_text = [&](std::string_view s, const std::string& path) {
    if (s.empty()) throw bad_request("'" + path + "' is empty", path);
    r.texts.emplace_back(s);
    r.token_inputs.emplace_back();
  };
  if (in->is_string()) {
    add_text(std::string_view(*in), "input");
  } else if (in->is_array()) {
    const array a(*in);
    if (a.size() == 0) throw bad_request("'input' must not be empty", "input");
    if (a.at(0).value().is_int64()) {  // one input given as token ids
      r.texts.emplace_back();
      r.token_inputs.push_back(ids(a, "input"));
    } else {
      std::size_t i = 0;
      for (auto e : a) {
        const std::string path = "input[" + std::to_string(i++) + "]";
        if (e.is_string()) add_text(std::string_view(e), path);
        else if (e.is_array()) {
          r.texts.emplace_back();
          r.token_inputs.push_back(ids(array(e), path));
        } else {
          throw bad_request("'" + path + "' must be a string or an array of token ids", path);
        }
      }
    }
  } else {
    throw bad_request("'input' must be a string, an array of strings or token ids", "input");
  }
  if (r.size() > max_embedding_inputs)
    throw bad_request("'input' has " + std::to_string(r.size()) + " entries; at most " +
                          std::to_string(max_embedding_inputs) + " are allowed", "input");
  return r;
}

std::string base64_floats(std::span<const float> v) {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  bytes.reserve(v.size() * 4);
  for (const float f : v) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    for (int k = 0; k < 4; ++k) bytes += char((u >> (8 * k)) & 0xFF);  // little-endian on any host
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::uint32_t n = std::uint32_t(std::uint8_t(bytes[i])) << 16 |
                            (i + 1 < bytes.size() ? std::uint32_t(std::uint8_t(bytes[i + 1])) << 8 : 0) |
                            (i + 2 < bytes.size() ? std::uint32_t(std::uint8_t(bytes[i + 2])) : 0);
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[n & 63] : '=';
  }
  return out;
}

std::string embeddings_body(const std::string& model, std::span<const std::vector<float>> vectors, bool base64,
                            std::uint32_t prompt_tokens) {
  namespace json = boost::json;
  json::array data;
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    json::value emb;
    if (base64) {
      emb = base64_floats(vectors[i]);
    } else {
      json::array a;
      a.reserve(vectors[i].size());
      for (const float f : vectors[i]) a.push_back(double(f));
      emb = std::move(a);
    }
    data.push_back(json::object{{"object", "embedding"}, {"index", i}, {"embedding", std::move(emb)}});
  }
  return json::serialize(json::object{{"object", "list"},
                                      {"data", std::move(data)},
                                      {"model", model},
                                      {"usage", json::object{{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

namespace {

// Every input's tokens, each checked against the vocabulary and the context before anything is
// queued (nothing is generated, so an input may fill the context).
std::vector<std::vector<std::int32_t>> embedding_prompts(const embedding_request& er, const tokenizer::tokenizer& tok,
                                                         std::uint32_t n_ctx) {
  std::vector<std::vector<std::int32_t>> prompts;
  for (std::size_t i = 0; i < er.size(); ++i) {
    const std::string path = er.size() == 1 ? "input" : "input[" + std::to_string(i) + "]";
    prompts.push_back(er.texts[i].empty() ? er.token_inputs[i] : tok.encode(er.texts[i], true, true));
    for (const auto t : prompts.back())
      if (t >= tok.n_vocab()) throw bad_request("'" + path + "' holds token " + std::to_string(t) + ", outside the vocabulary", path);
    if (prompts.back().size() > n_ctx)
      throw bad_request("'" + path + "' has " + std::to_string(prompts.back().size()) +
                            " tokens, more than the context size of " + std::to_string(n_ctx), path);
  }
  return prompts;
}

}  // namespace

// Every input is a request of its own; the scheduler batches them into its embedding passes. At
// most `slots` are queued at a time (the next one as each finishes), so a 2048-input request
// neither fills the queue nor keeps other requests out of it.
net::awaitable<bool> server::impl::embed(beast::tcp_stream& s, bool keep, const std::string& rid, const json_in::object& body,
                                         std::chrono::steady_clock::time_point t0) {
  if (pooling == rt::pooling::none)
    throw api_error(404, "not_found_error",
                    "embeddings are off: this model has no pooling metadata; start strata-serve with --pooling mean|cls|last");
  const embedding_request er = parse_embeddings(body, model->hparams().n_embd);
  if (er.model != model_id)
    throw api_error(404, "not_found_error", "model '" + er.model + "' does not exist; this server serves '" + model_id + "'",
                    "model");
  std::vector<std::vector<std::int32_t>> prompts = embedding_prompts(er, *tok, sched->context_size());
  std::uint32_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += std::uint32_t(p.size());
  const auto ex = co_await net::this_coro::executor;
  auto w = std::make_shared<waker>(ex);
  std::vector<std::shared_ptr<rt::generation_stream>> outs(er.size());
  std::vector<std::vector<float>> vectors(er.size());
  const auto cancel_all = [&] {
    for (auto& o : outs)
      if (o) o->cancel();
  };
  const std::size_t window = std::max<std::size_t>(1, sched->slots());
  std::size_t next = 0, finished = 0;
  std::vector<bool> got(er.size(), false);
  rt::generation_stream::state st;
  bool watch = true;
  std::optional<api_error> err;
  while (finished < er.size() && !err) {
    for (; next < er.size() && next - finished < window && !err; ++next) {
      // Nothing is sampled for an embedding: a one-entry vocabulary keeps the unused sampler small.
      rt::generation_request req{std::move(prompts[next]), sampling::sampler({}, 1), {}};
      req.embed = pooling;
      auto out = std::make_shared<rt::generation_stream>();
      out->set_notify(wake_on_output(w));
      if (!sched->submit(out, std::move(req)))
        err = draining() ? shutting_down_error() : api_error(429, "rate_limit_error", "the request queue is full; retry later");
      else outs[next] = std::move(out);
    }
    bool progressed = false;
    for (std::size_t i = 0; i < next && !err; ++i) {
      if (got[i] || !outs[i]) continue;
      outs[i]->take(st);
      if (!st.done) continue;
      if (st.reason != rt::finish_reason::embedded)
        err = st.reason == rt::finish_reason::cancelled ? shutting_down_error()
                                                        : api_error(500, "server_error", "embedding failed: " + st.error);
      vectors[i] = std::move(st.embedding);
      got[i] = true;
      ++finished;
      progressed = true;
    }
    if (err || progressed || finished == er.size()) continue;
    if (co_await wait_for(s, *w, watch) == wake::gone) {
      cancel_all();
      this->finished("/v1/embeddings", 499, rid, t0, {prompt_tokens, 0, 0});
      co_return false;
    }
  }
  if (err) {
    cancel_all();
    const reply r = api_error_reply(api_flavor::openai, *err, rid);
    this->finished("/v1/embeddings", int(r.status), rid, t0, {prompt_tokens, 0, 0});
    co_return co_await send(s, r, keep && !draining(), rid);
  }
  const reply r{http::status::ok, "application/json", embeddings_body(model_id, vectors, er.base64, prompt_tokens), 0};
  this->finished("/v1/embeddings", 200, rid, t0, {prompt_tokens, 0, 0});
  co_return co_await send(s, r, keep && !draining(), rid);
}

}  // namespace strata::serve
