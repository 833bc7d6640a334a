// strata-serve's /v1/embeddings on the Vulkan backend, end to end in process: the vectors equal
// the CPU backend's pooled, normalized final-norm rows within the fixture's tolerance, an input
// that fills the context is embedded, and bad requests (empty input, an input longer than the
// context, another model's name) are refused naming the field and the limit.
#include <doctest/doctest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "serve/server.hpp"
#include "strata/runtime/pooling.hpp"
#include "strata/tokenizer/tokenizer.hpp"
#include "support/fidelity.hpp"
#include "support/vulkan_here.hpp"

namespace {

using namespace strata;
namespace http = boost::beast::http;
namespace bjson = boost::json;

const char* model_file = STRATA_TEST_FIXTURES "/models/qwen3-Q4_K_M.gguf";
constexpr std::uint32_t n_ctx = 64;

struct answer {
  int status = 0;
  bjson::object body;
};

answer post(std::uint16_t port, const std::string& target, const std::string& body) {
  boost::asio::io_context ioc;
  boost::beast::tcp_stream s(ioc);
  s.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> req{body.empty() ? http::verb::get : http::verb::post, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(s, req);
  boost::beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res);
  answer a{int(res.result_int()), {}};
  if (const auto v = bjson::parse(res.body()); v.is_object()) a.body = v.as_object();
  return a;
}

// The server on its own thread, ready (its /health answers 200) when constructed.
struct running_server {
  serve::server srv;
  std::promise<std::uint16_t> bound;
  std::string failure;  // what run() threw, once `failed` is set
  std::atomic<bool> failed{false};
  std::thread th;
  std::uint16_t port = 0;
  bool ready = false;  // /health answered 200 before the deadline
  explicit running_server(rt::engine_options eo) : srv(options()) {
    th = std::thread([this, eo] {
      bool listening = false;
      try {
        srv.run(model_file, eo, {}, [&](std::uint16_t p) {
          listening = true;
          bound.set_value(p);
        });
      } catch (const std::exception& e) {
        failure = e.what();
        failed = true;
        if (!listening) bound.set_exception(std::current_exception());
      }
    });
    port = bound.get_future().get();
    // /health answers 503 while the model loads; under a sanitizer on a software Vulkan device
    // loading takes tens of seconds, so wait on a generous deadline rather than a count.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (!failed && !(ready = post(port, "/health", {}).status == 200) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ~running_server() {
    srv.stop();
    th.join();
  }
  static serve::server_options options() {
    serve::server_options o;
    o.port = 0;
    o.model_id = "m";
    o.pooling = rt::pooling::mean;
    o.on_status = [](std::string_view) {};
    return o;
  }
};

// Mean of the CPU backend's final-norm rows of `ids`, L2-normalized (what the server returns).
std::vector<float> cpu_embedding(const std::vector<std::int32_t>& ids) {
  rt::engine_options eo;
  eo.threads = 2;
  eo.n_ctx = n_ctx;
  auto m = rt::model::load(model_file, eo);
  const std::uint32_t n = std::uint32_t(ids.size()), E = m->hparams().n_embd;
  std::vector<std::int32_t> pos(n);
  for (std::uint32_t i = 0; i < n; ++i) pos[i] = std::int32_t(i);
  const std::vector<std::uint32_t> seq(n, 0);
  const std::vector<std::uint8_t> want(n, 1);
  std::vector<float> rows(std::size_t(n) * E), out(E, 0.0f);
  m->forward_embeddings({ids, pos, seq, want}, rows);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t k = 0; k < E; ++k) out[k] += rows[std::size_t(i) * E + k] / float(n);
  rt::l2_normalize(out);
  return out;
}

std::string error_message(const answer& a) { return std::string(a.body.at("error").at("message").as_string()); }

}  // namespace

TEST_CASE("embeddings: strata-serve on the Vulkan backend returns the CPU backend's vectors, and bad inputs are named") {
  if (!strata::test::vulkan_here("the Vulkan embeddings check")) return;
  rt::engine_options eo;
  eo.backend = rt::backend_kind::vulkan;
  eo.threads = 2;
  eo.n_ctx = n_ctx;
  eo.n_seq = 1;
  running_server s(eo);
  REQUIRE_MESSAGE(!s.failed, s.failure);
  REQUIRE_MESSAGE(s.ready, "strata-serve's /health did not answer 200 within 5 minutes");

  const std::string text = "The quick brown fox";
  const gguf::file f(model_file);
  const auto tok = tokenizer::tokenizer::from_gguf(f.gguf());
  const auto want = cpu_embedding(tok.encode(text, true, true));
  const answer a = post(s.port, "/v1/embeddings", R"({"model":"m","input":")" + text + R"(","encoding_format":"float"})");
  REQUIRE(a.status == 200);
  std::vector<float> got;
  for (const auto& x : a.body.at("data").at(0).at("embedding").as_array()) got.push_back(float(x.as_double()));
  REQUIRE(got.size() == want.size());
  // Each backend's logits are within tolerance_nmse of llama.cpp's, so within 4x of each other
  // (the triangle inequality on the RMS error); the rows the logits are a linear map of are held
  // to the same bound.
  double tol = 0;
  for (const auto& g : test::local_golden())
    if (g.name == "qwen3-Q4_K_M") tol = 4 * g.tolerance_nmse;
  REQUIRE(tol > 0);
  const double e = test::nmse(got, want);
  MESSAGE("Vulkan vs CPU pooled embedding: nmse " << e << " (bound " << tol << ")");
  CHECK(e <= tol);

  // Token-id inputs: one that fills the context is embedded, one token more is refused.
  std::string ids = "[1";
  for (std::uint32_t i = 1; i < n_ctx; ++i) (ids += ',') += std::to_string(100 + i);
  CHECK(post(s.port, "/v1/embeddings", R"({"model":"m","input":)" + ids + "]}").status == 200);
  const answer longer = post(s.port, "/v1/embeddings", R"({"model":"m","input":)" + ids + ",7]}");
  CHECK(longer.status == 400);
  CHECK(error_message(longer) == "'input' has 65 tokens, more than the context size of 64");
  CHECK(longer.body.at("error").at("param") == "input");

  const answer empty = post(s.port, "/v1/embeddings", R"({"model":"m","input":["a",""]})");
  CHECK(empty.status == 400);
  CHECK(error_message(empty) == "'input[1]' is empty");
  const answer other = post(s.port, "/v1/embeddings", R"({"model":"gpt-4","input":"a"})");
  CHECK(other.status == 404);
  CHECK(error_message(other) == "model 'gpt-4' does not exist; this server serves 'm'");
}
