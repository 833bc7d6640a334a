// rt::scheduler on the fixture model: batched greedy generations equal single-sequence runs
// (rt::session), small prefill chunks change nothing, the prefix cache is reused, cancellation
// frees the slot, a full queue refuses, an oversized prompt is an error; on the GPU, every step
// shape is recorded before the first request and none while serving.
#include <doctest/doctest.h>

#include "scheduler_support.hpp"
#include "strata/core/utf8.hpp"
#include "support/vulkan_here.hpp"

using namespace strata;

namespace {

using namespace scheduler_test;

// Greedy generation with one rt::session: the reference every batched run must equal.
std::string solo(rt::model& m, const tokenizer::tokenizer& tok, const std::string& prompt, std::int32_t n) {
  rt::session s(m);
  auto logits = s.prefill(tok.encode(prompt, true, true));
  std::vector<std::int32_t> ids;
  for (std::int32_t i = 0; i < n; ++i) {
    const auto t = std::int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tok.is_eog(t)) break;
    ids.push_back(t);
    if (i + 1 < n) logits = s.decode(t);
  }
  return utf8::sanitize(tok.decode(ids));
}

const std::vector<std::string> prompts = {"Once upon a time", "The capital of France is", "1, 2, 3, 4,",
                                          "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
                                          "A long time ago in a galaxy far", "def fib(n):"};

// The model with a step granule of its own (what the Vulkan backend reports), so the scheduler
// fits its mixed steps: a forwarding wrapper.
class granular_model final : public rt::model {
 public:
  granular_model(std::unique_ptr<rt::model> m, std::uint32_t granule) : m_(std::move(m)), granule_(granule) {}
  const arch::hparams& hparams() const noexcept override { return m_->hparams(); }
  const gguf::reader& gguf() const noexcept override { return m_->gguf(); }
  const rt::engine_options& options() const noexcept override { return m_->options(); }
  std::string backend_description() const override { return m_->backend_description(); }
  kv::block_table& kv() noexcept override { return m_->kv(); }
  void forward(const graph::batch& b, std::span<float> logits) override { m_->forward(b, logits); }
  void forward_argmax(const graph::batch& b, std::span<std::int32_t> ids) override { m_->forward_argmax(b, ids); }
  std::uint32_t step_granule() const noexcept override { return granule_; }

 private:
  std::unique_ptr<rt::model> m_;
  std::uint32_t granule_;
};

}  // namespace

TEST_CASE("batched greedy generations equal single-sequence runs, whatever the prefill chunk or step granule") {
  auto ref_model = load(1);
  const auto tok = tokenizer::tokenizer::from_gguf(ref_model->gguf());
  std::vector<std::string> want;
  for (std::size_t i = 0; i < prompts.size(); ++i) want.push_back(solo(*ref_model, tok, prompts[i], 12 + std::int32_t(i)));

  // Chunks of 3 with a granule of 4: steps beside decodes take 1-5 prompt tokens (fitted).
  for (const auto& [chunk, granule] : {std::pair{0u, 1u}, std::pair{3u, 1u}, std::pair{3u, 4u}}) {
    CAPTURE(chunk);
    CAPTURE(granule);
    auto m = std::make_unique<granular_model>(load(4), granule);
    rt::scheduler sched(*m, tok, {.max_queue = 16, .prefill_chunk = chunk});
    std::vector<std::shared_ptr<rt::generation_stream>> streams;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      streams.push_back(std::make_shared<rt::generation_stream>());
      REQUIRE(sched.submit(streams.back(), greedy(tok, prompts[i], 12 + std::int32_t(i))));
    }
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const auto o = wait(*streams[i]);
      CAPTURE(i);
      CHECK(o.text == want[i]);
      CHECK((o.reason == rt::finish_reason::max_tokens || o.reason == rt::finish_reason::eog));
    }
    CHECK(sched.stats().running == 0);
  }
}

TEST_CASE("the prefix cache reuses a slot's tokens across requests") {
  auto m = load(2);
  const auto tok = tokenizer::tokenizer::from_gguf(m->gguf());
  rt::scheduler sched(*m, tok);
  const std::string p = "The quick brown fox jumps over the lazy dog";
  const auto n_prompt = std::uint32_t(tok.encode(p, true, true).size());
  auto a = std::make_shared<rt::generation_stream>();
  REQUIRE(sched.submit(a, greedy(tok, p, 4)));
  const auto oa = wait(*a);
  CHECK(oa.cached == 0);
  auto b = std::make_shared<rt::generation_stream>();
  REQUIRE(sched.submit(b, greedy(tok, p + " again", 4)));
  const auto ob = wait(*b);
  CHECK(ob.cached == n_prompt);  // the whole first prompt (its last token is not the new last)
  auto c = std::make_shared<rt::generation_stream>();
  REQUIRE(sched.submit(c, greedy(tok, p, 4)));
  const auto oc = wait(*c);
  CHECK(oc.cached == n_prompt - 1);  // the last prompt token is evaluated again for its logits
  CHECK(oc.text == oa.text);
  const auto st = sched.stats();
  CHECK(st.prefix_cache_hits == 2);
  CHECK(st.cached_prompt_tokens == 2 * n_prompt - 1);
}

TEST_CASE("cancel frees the slot, a full queue refuses, oversized prompts are errors") {
  auto m = load(1, 256);
  const auto tok = tokenizer::tokenizer::from_gguf(m->gguf());
  rt::scheduler sched(*m, tok, {.max_queue = 0});
  auto a = std::make_shared<rt::generation_stream>();
  REQUIRE(sched.submit(a, greedy(tok, "Once upon a time", 100000)));
  rt::generation_stream::state st;
  while (!st.prefill_done) {
    a->take(st);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto b = std::make_shared<rt::generation_stream>();
  CHECK_FALSE(sched.submit(b, greedy(tok, "Hello", 4)));  // the one slot is busy, no queue
  a->cancel();
  const auto oa = wait(*a);
  CHECK((oa.reason == rt::finish_reason::cancelled || oa.reason == rt::finish_reason::context_full ||
         oa.reason == rt::finish_reason::eog));
  CHECK(sched.stats().running == 0);
  CHECK(sched.submit(b, greedy(tok, "Hello", 4)));
  CHECK(wait(*b).completion > 0);

  std::string huge;
  for (int i = 0; i < 300; ++i) huge += " word";
  auto c = std::make_shared<rt::generation_stream>();
  CHECK_THROWS_WITH_AS(sched.submit(c, greedy(tok, huge, 4)), doctest::Contains("context size is 256"), error);
}

TEST_CASE("a generation that fills the context ends with context_full") {
  auto m = load(1, 32);
  const auto tok = tokenizer::tokenizer::from_gguf(m->gguf());
  rt::scheduler sched(*m, tok);
  auto a = std::make_shared<rt::generation_stream>();
  auto req = greedy(tok, "Once upon a time", 1000);
  req.stop = sampling::stop_conditions({}, 1000, {});  // no end-of-generation tokens: run until full
  REQUIRE(sched.submit(a, std::move(req)));
  const auto o = wait(*a);
  CHECK(o.reason == rt::finish_reason::context_full);
  CHECK(m->kv().length(0) <= 32);
}

TEST_CASE("a KV pool smaller than the demand: idle caches are evicted, nothing fails") {
  auto m = load(4, 64);  // 64 token slots shared by 4 sequences
  const auto tok = tokenizer::tokenizer::from_gguf(m->gguf());
  rt::scheduler sched(*m, tok);
  std::vector<std::shared_ptr<rt::generation_stream>> streams;
  for (int round = 0; round < 2; ++round)
    for (std::size_t i = 0; i < 4; ++i) {
      streams.push_back(std::make_shared<rt::generation_stream>());
      auto req = greedy(tok, prompts[i], 40);
      req.stop = sampling::stop_conditions({}, 40, {});
      REQUIRE(sched.submit(streams.back(), std::move(req)));
    }
  for (auto& s : streams) {
    const auto o = wait(*s);
    CHECK((o.reason == rt::finish_reason::max_tokens || o.reason == rt::finish_reason::context_full));
    CHECK(o.completion > 0);
  }
  CHECK(m->kv().used_slots() <= m->kv().n_slots());
}

// Issue 13 item 4: the scheduler records every step shape ahead (model::record_steps), so the
// changing batches of a run (prompt chunks of 3 beside decodes, fitted to the step granule,
// greedy steps taking the argmax on the GPU) replay recorded steps only.
TEST_CASE("on the GPU, the scheduler records its step shapes before the first request and none while serving") {
  if (!strata::test::vulkan_here("the Vulkan scheduler check")) return;
  auto m = load(4, 1024, rt::backend_kind::vulkan);
  const auto tok = tokenizer::tokenizer::from_gguf(m->gguf());
  rt::scheduler sched(*m, tok, {.max_queue = 16, .prefill_chunk = 3});
  const rt::model::recording_counters ahead = sched.recorded_ahead();
  CHECK(ahead.steps > 0);
  CHECK(m->step_recordings().steps == ahead.steps);
  std::vector<std::shared_ptr<rt::generation_stream>> streams;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    streams.push_back(std::make_shared<rt::generation_stream>());
    auto req = greedy(tok, prompts[i], 10 + std::int32_t(i));
    req.stop = sampling::stop_conditions({}, 10 + std::int32_t(i), {});
    REQUIRE(sched.submit(streams.back(), std::move(req)));
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto o = wait(*streams[i]);
    CAPTURE(i);
    CHECK(o.reason == rt::finish_reason::max_tokens);
    CHECK(o.completion == 10 + i);
  }
  CHECK(sched.stats().steps > prompts.size());
  CHECK(m->step_recordings().steps == ahead.steps);  // every step replayed
}
