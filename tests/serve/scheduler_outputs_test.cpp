// What the scheduler returns besides text: log-probabilities of the raw logits, tokens restricted
// by a token_constraint mask, and pooled embeddings (mean, cls, last) evaluated beside running
// generations, each checked against the model called directly.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "scheduler_support.hpp"
#include "strata/sampling/logprobs.hpp"

using namespace strata;
using namespace scheduler_test;

namespace {

// Allows a fixed set of tokens, and end-of-generation only after `min_len` tokens; records
// what it was told.
struct set_constraint final : rt::token_constraint {
  std::vector<std::uint64_t> words, with_eog;
  std::size_t min_len = 0;
  std::vector<std::int32_t>* accepted;
  set_constraint(std::size_t n_vocab, const std::vector<std::int32_t>& ids, const std::vector<std::int32_t>& eog,
                 std::size_t n, std::vector<std::int32_t>* acc)
      : words((n_vocab + 63) / 64), min_len(n), accepted(acc) {
    for (auto id : ids) words[std::size_t(id) / 64] |= std::uint64_t(1) << (id % 64);
    with_eog = words;
    for (auto id : eog) with_eog[std::size_t(id) / 64] |= std::uint64_t(1) << (id % 64);
  }
  std::span<const std::uint64_t> allowed() override { return accepted->size() >= min_len ? with_eog : words; }
  bool allows(sampling::token_id t) override { return sampling::mask_allows(allowed(), t); }
  void accept(sampling::token_id t) override { accepted->push_back(t); }
};

// Pooled, normalized embedding of `prompt` computed with one direct forward_embeddings call.
std::vector<float> direct_embedding(rt::model& m, const std::vector<std::int32_t>& prompt, rt::pooling pool) {
  m.kv().clear(0);
  const std::uint32_t n = std::uint32_t(prompt.size()), E = m.hparams().n_embd;
  std::vector<std::int32_t> pos(n);
  std::vector<std::uint32_t> seq(n, 0);
  std::vector<std::uint8_t> want(n, 1);
  for (std::uint32_t i = 0; i < n; ++i) pos[i] = std::int32_t(i);
  std::vector<float> rows(std::size_t(n) * E), out(E, 0.0f);
  m.forward_embeddings({prompt, pos, seq, want}, rows);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t k = 0; k < E; ++k) {
      const float h = rows[std::size_t(i) * E + k];
      if (pool == rt::pooling::mean) out[k] += h;
      else if ((pool == rt::pooling::cls && i == 0) || (pool == rt::pooling::last && i + 1 == n)) out[k] = h;
    }
  if (pool == rt::pooling::mean)
    for (float& x : out) x /= float(n);
  rt::l2_normalize(out);
  return out;
}

}  // namespace

TEST_CASE("logprobs: the greedy token is the top entry, values are log_softmax of the raw logits") {
  auto m = load(1);
  const auto tok = tokenizer::tokenizer::from_gguf(m->gguf());
  const std::string prompt = "The capital of France is";
  std::vector<float> first;
  {
    rt::session s(*m);
    const auto lg = s.prefill(tok.encode(prompt, true, true));
    first.assign(lg.begin(), lg.end());
    s.clear();
  }
  rt::scheduler sched(*m, tok);
  auto out = std::make_shared<rt::generation_stream>();
  auto req = greedy(tok, prompt, 6);
  req.top_logprobs = 5;
  REQUIRE(sched.submit(out, std::move(req)));
  const auto o = wait(*out);
  REQUIRE(o.logprobs.size() == o.completion);
  REQUIRE(!o.logprobs.empty());
  for (const auto& lp : o.logprobs) {
    CHECK(lp.n_top == 5);
    CHECK(lp.top[0].id == lp.token);
    CHECK(lp.top[0].logprob == lp.logprob);
    CHECK(lp.logprob <= 0.0f);
    for (std::uint32_t i = 1; i < lp.n_top; ++i) CHECK(lp.top[i].logprob <= lp.top[i - 1].logprob);
  }
  const double lse = sampling::log_sum_exp(first);
  // 1e-5: the same float logits; both sides compute l - lse in double and round once.
  CHECK(o.logprobs[0].logprob == doctest::Approx(first[std::size_t(o.logprobs[0].token)] - lse).epsilon(1e-5));

  auto big = greedy(tok, prompt, 2);
  big.top_logprobs = 21;
  CHECK_THROWS_WITH_AS(sched.submit(std::make_shared<rt::generation_stream>(), std::move(big)),
                       doctest::Contains("top_logprobs 21 exceeds the maximum of 20"), error);
}

TEST_CASE("a token_constraint restricts every sampled token, greedy or not, and sees each one") {
  auto m = load(2);
  const auto tok = tokenizer::tokenizer::from_gguf(m->gguf());
  rt::scheduler sched(*m, tok);
  const std::vector<std::int32_t> ids = {17, 230, 499, 512, 800};
  for (const float temp : {0.0f, 1.0f}) {
    CAPTURE(temp);
    std::vector<std::int32_t> accepted;
    sampling::sampler_params p;
    p.temperature = temp;
    p.seed = 11;
    auto out = std::make_shared<rt::generation_stream>();
    rt::generation_request req{tok.encode("Once upon a time", true, true), sampling::sampler(p, tok.n_vocab()),
                               sampling::stop_conditions(eog_ids(tok), 12, {})};
    req.constraint = std::make_unique<set_constraint>(std::size_t(tok.n_vocab()), ids, eog_ids(tok), 3, &accepted);
    req.top_logprobs = 0;
    REQUIRE(sched.submit(out, std::move(req)));
    const auto o = wait(*out);
    CHECK(o.reason != rt::finish_reason::error);
    REQUIRE(accepted.size() >= 3);
    for (std::size_t i = 0; i < o.logprobs.size(); ++i) {
      CHECK(o.logprobs[i].token == accepted[i]);
      CHECK(std::find(ids.begin(), ids.end(), accepted[i]) != ids.end());
    }
  }
}

TEST_CASE("plain_greedy: only a greedy row the host adds nothing to") {
  constexpr std::int32_t n_vocab = 64;
  const auto row = [](auto&& change) {
    sampling::sampler_params p;
    p.temperature = 0.0f;
    rt::generation_request req{{1, 2}, sampling::sampler(p, n_vocab), {}};
    change(p, req);
    req.sampler = sampling::sampler(p, n_vocab);
    return req.plain_greedy();
  };
  CHECK(row([](auto&, auto&) {}));
  CHECK(!row([](auto& p, auto&) { p.temperature = 0.7f, p.seed = 3; }));  // sampled: the RNG decides
  CHECK(!row([](auto& p, auto&) { p.logit_bias = {{5, -INFINITY}}; }));
  CHECK(!row([](auto& p, auto&) { p.repeat_penalty = 1.1f; }));
  CHECK(!row([](auto&, auto& r) { r.top_logprobs = 0; }));
  CHECK(!row([](auto&, auto& r) { r.embed = rt::pooling::mean; }));
  std::vector<std::int32_t> accepted;
  CHECK(!row([&](auto&, auto& r) {
    r.constraint = std::make_unique<set_constraint>(std::size_t(n_vocab), std::vector<std::int32_t>{3},
                                                    std::vector<std::int32_t>{}, 0, &accepted);
  }));
}

TEST_CASE("embeddings: mean, cls and last pooling equal a direct pass, beside a running generation") {
  rt::engine_options eo;  // one pass over a whole input: every row is an output
  eo.threads = 1;
  eo.n_ctx = 256;
  eo.n_batch = 64;
  auto ref = rt::model::load(model_path, eo);
  const auto tok = tokenizer::tokenizer::from_gguf(ref->gguf());
  const std::vector<std::string> inputs = {"hello world", "The quick brown fox jumps over the lazy dog",
                                           "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"};
  const rt::pooling pools[] = {rt::pooling::mean, rt::pooling::cls, rt::pooling::last};
  auto m = load(4);
  rt::scheduler sched(*m, tok, {.max_queue = 16, .prefill_chunk = 5});
  for (const rt::pooling pool : pools) {
    CAPTURE(rt::name(pool));
    auto gen = std::make_shared<rt::generation_stream>();
    REQUIRE(sched.submit(gen, greedy(tok, "Once upon a time", 8)));
    std::vector<std::shared_ptr<rt::generation_stream>> outs;
    for (const auto& in : inputs) {
      rt::generation_request req{tok.encode(in, true, true), sampling::sampler({}, tok.n_vocab()), {}};
      req.embed = pool;
      outs.push_back(std::make_shared<rt::generation_stream>());
      REQUIRE(sched.submit(outs.back(), std::move(req)));
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto o = wait(*outs[i]);
      REQUIRE(o.reason == rt::finish_reason::embedded);
      const auto want = direct_embedding(*ref, tok.encode(inputs[i], true, true), pool);
      REQUIRE(o.embedding.size() == want.size());
      double dot = 0;
      float max_diff = 0;
      for (std::size_t k = 0; k < want.size(); ++k) {
        dot += double(o.embedding[k]) * want[k];
        max_diff = std::max(max_diff, std::abs(o.embedding[k] - want[k]));
      }
      // Row-wise ops make chunking exact; 1e-5 leaves room for the mean's summation order.
      CHECK(max_diff < 1e-5f);
      CHECK(dot == doctest::Approx(1.0).epsilon(1e-5));
      CHECK(o.completion == 0);
    }
    const auto g = wait(*gen);
    CHECK(g.reason != rt::finish_reason::error);
  }
  CHECK(sched.stats().embedded_tokens > 0);
}
