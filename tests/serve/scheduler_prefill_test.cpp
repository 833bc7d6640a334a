// rt::scheduler's chunked prefill, counted in steps (not time) over a stand-in model whose
// forward pass waits for the test's permission: running streams advance every step while a long
// prompt prefills, no step holds more prompt tokens than prefill_chunk, a short request starts
// within two steps plus its own prefill, and a long prompt is not starved by short ones; with a
// step granule, steps that decode are fitted to whole token tiles.
#include <doctest/doctest.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

#include "strata/runtime/engine.hpp"
#include "strata/runtime/scheduler.hpp"
#include "strata/tokenizer/tokenizer.hpp"

using namespace strata;

namespace {

constexpr std::uint32_t vocab = 128;
constexpr std::uint32_t prompt_rows = 1000;  // key of the step's prompt-token count in its record

// A model that computes nothing: every output row's argmax is token 1. Each forward() blocks
// until the test grants a step, and records how many rows each sequence had in it (and under
// key prompt_rows, how many were prompt tokens).
class gated_model final : public rt::model {
 public:
  gated_model(const rt::model& real, std::uint32_t n_seq, std::uint32_t n_batch, std::uint32_t granule = 1)
      : real_(&real), granule_(granule), kv_(8192, 16, n_seq) {
    hp_ = real.hparams();
    hp_.n_vocab = vocab;
    opt_.n_batch = n_batch;
    opt_.n_seq = n_seq;
    opt_.max_outputs = n_seq;
  }
  const arch::hparams& hparams() const noexcept override { return hp_; }
  const gguf::reader& gguf() const noexcept override { return real_->gguf(); }
  const rt::engine_options& options() const noexcept override { return opt_; }
  std::string backend_description() const override { return "gated test model"; }
  kv::block_table& kv() noexcept override { return kv_; }
  std::uint32_t step_granule() const noexcept override { return granule_; }
  void forward(const graph::batch& b, std::span<float> logits) override {
    gated_step(b, [&](std::size_t row) {
      for (std::uint32_t t = 0; t < vocab; ++t) logits[row * vocab + t] = t == 1 ? 1.0f : 0.0f;
    });
  }
  // Greedy steps (every row plain greedy, as here) ask for the argmax only.
  void forward_argmax(const graph::batch& b, std::span<std::int32_t> ids) override {
    gated_step(b, [&](std::size_t row) { ids[row] = 1; });
  }

  // Lets one forward pass run and waits until the scheduler is back in forward() (the step's
  // sampling is then done and its results are visible). Returns that step's rows per sequence.
  std::map<std::uint32_t, std::uint32_t> step() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return blocked_; });
    const std::size_t before = steps_.size();
    ++permits_;
    cv_.notify_all();
    cv_.wait(lk, [&] { return steps_.size() > before && blocked_; });
    return steps_.back();
  }

 private:
  template <class Output>
  void gated_step(const graph::batch& b, Output&& output_row) {
    std::unique_lock lk(mu_);
    blocked_ = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return permits_ > 0; });
    --permits_;
    blocked_ = false;
    std::map<std::uint32_t, std::uint32_t> rows;
    for (std::size_t i = 0; i < b.tokens.size(); ++i) {
      kv_.reserve_append(b.seq_ids[i], 1);
      kv_.commit(b.seq_ids[i], b.tokens.subspan(i, 1));
      ++rows[b.seq_ids[i]];
      rows[prompt_rows] += b.tokens[i] != 1;  // generated tokens are 1, prompt tokens not
    }
    std::size_t row = 0;
    for (std::size_t i = 0; i < b.tokens.size(); ++i)
      if (b.logits[i]) output_row(row++);
    steps_.push_back(std::move(rows));
    cv_.notify_all();
  }

 public:
  // Lets every later step run freely (for the scheduler's shutdown).
  void release() {
    std::lock_guard lk(mu_);
    permits_ = 1 << 30;
    cv_.notify_all();
  }

 private:
  const rt::model* real_;
  std::uint32_t granule_;
  arch::hparams hp_;
  rt::engine_options opt_;
  kv::block_table kv_;
  std::mutex mu_;
  std::condition_variable cv_;
  int permits_ = 0;
  bool blocked_ = false;
  std::vector<std::map<std::uint32_t, std::uint32_t>> steps_;
};

// `first` starts the prompt (tokens >= 2): prompts with different first tokens share no prefix,
// so the prefix cache cannot shorten them.
rt::generation_request prompt_request(std::uint32_t prompt_len, std::int32_t max_tokens, std::int32_t first = 2) {
  sampling::sampler_params p;
  p.temperature = 0;
  std::vector<std::int32_t> prompt(prompt_len, 2);
  prompt[0] = first;
  return {std::move(prompt), sampling::sampler(p, vocab), sampling::stop_conditions({}, max_tokens, {})};
}

bool started(rt::generation_stream& s) {
  rt::generation_stream::state st;
  s.take(st);
  return st.prefill_done;
}

struct fixture {
  std::unique_ptr<rt::model> real;
  std::unique_ptr<tokenizer::tokenizer> tok;
  fixture() {
    rt::engine_options eo;
    eo.threads = 1;
    eo.n_ctx = 64;
    real = rt::model::load(STRATA_TEST_FIXTURES "/models/qwen3-Q4_K_M.gguf", eo);
    tok = std::make_unique<tokenizer::tokenizer>(tokenizer::tokenizer::from_gguf(real->gguf()));
  }
};

}  // namespace

TEST_CASE("chunked prefill: streams advance every step, a short request starts within 2 steps + its prefill") {
  fixture f;
  constexpr std::uint32_t chunk = 16;
  gated_model m(*f.real, 4, 64);
  {
    rt::scheduler sched(m, *f.tok, {.max_queue = 8, .prefill_chunk = chunk});
    // A running stream (slot 0 once admitted).
    auto a = std::make_shared<rt::generation_stream>();
    REQUIRE(sched.submit(a, prompt_request(4, 100000)));
    for (int i = 0; i < 3 && !started(*a); ++i) m.step();
    REQUIRE(started(*a));

    // A long prompt: 200 tokens need ceil(200 / 16) = 13 steps of prefill.
    auto longp = std::make_shared<rt::generation_stream>();
    REQUIRE(sched.submit(longp, prompt_request(200, 4)));
    int long_steps = 0;
    std::shared_ptr<rt::generation_stream> shortp;
    int short_wait = -1;
    for (int i = 0; i < 40 && !started(*longp); ++i) {
      if (i == 3) {  // a short request arrives while the long prompt is prefilling
        shortp = std::make_shared<rt::generation_stream>();
        REQUIRE(sched.submit(shortp, prompt_request(10, 4)));
        short_wait = 0;
      }
      const auto rows = m.step();
      ++long_steps;
      if (short_wait >= 0 && short_wait < 1000) {
        ++short_wait;
        if (started(*shortp)) short_wait += 1000;  // stop counting
      }
      CAPTURE(i);
      // The running stream got its decode row in every step: it never stalls.
      CHECK(rows.at(0) == 1);
      CHECK(rows.at(prompt_rows) <= chunk);
    }
    CHECK(started(*longp));
    CHECK(long_steps <= 200 / chunk + 3);  // the short prompt took one step's budget
    REQUIRE(short_wait >= 1000);
    // The step already gathered when it was submitted, then its own one-chunk prefill.
    CHECK(short_wait - 1000 <= 2);
    m.release();
  }
}

TEST_CASE("chunked prefill: a long prompt is not starved by a stream of short ones") {
  fixture f;
  constexpr std::uint32_t chunk = 8;
  gated_model m(*f.real, 4, 64);
  {
    rt::scheduler sched(m, *f.tok, {.max_queue = 64, .prefill_chunk = chunk, .max_prefill_skips = 3});
    auto longp = std::make_shared<rt::generation_stream>();
    REQUIRE(sched.submit(longp, prompt_request(40, 1, 3)));
    m.step();  // the long prompt is admitted and takes its first chunk
    std::vector<std::shared_ptr<rt::generation_stream>> shorts;
    int steps = 0;
    for (; steps < 60 && !started(*longp); ++steps) {
      // Two new short prompts every step: alone they would take the whole budget forever.
      for (int k = 0; k < 2; ++k) {
        shorts.push_back(std::make_shared<rt::generation_stream>());
        sched.submit(shorts.back(), prompt_request(4, 1, std::int32_t(4 + shorts.size())));
      }
      m.step();
    }
    CHECK(started(*longp));
    // 4 more chunks of 8 at least every max_prefill_skips + 1 steps.
    CHECK(steps <= 4 * (3 + 1) + 2);
    m.release();
  }
}

TEST_CASE("chunked prefill: beside decoding streams, steps are fitted to the model's step granule") {
  fixture f;
  constexpr std::uint32_t chunk = 16, granule = 8;
  gated_model m(*f.real, 4, 64, granule);
  {
    rt::scheduler sched(m, *f.tok, {.max_queue = 8, .prefill_chunk = chunk});
    std::vector<std::shared_ptr<rt::generation_stream>> running;
    for (int k = 0; k < 3; ++k) {  // three running streams: 3 decode rows a step
      running.push_back(std::make_shared<rt::generation_stream>());
      REQUIRE(sched.submit(running.back(), prompt_request(4, 100000, 10 + k)));
    }
    for (int i = 0; i < 6 && !std::all_of(running.begin(), running.end(), [](auto& s) { return started(*s); }); ++i)
      m.step();
    auto longp = std::make_shared<rt::generation_stream>();
    REQUIRE(sched.submit(longp, prompt_request(100, 4)));
    int steps = 0;
    std::uint32_t prompt_total = 0;
    bool trimmed = false, filled = false;
    for (; steps < 40 && !started(*longp); ++steps) {
      const auto rows = m.step();
      std::uint32_t total = 0;
      for (const auto& [seq, count] : rows)
        if (seq != prompt_rows) total += count;
      const std::uint32_t prompt = rows.count(prompt_rows) ? rows.at(prompt_rows) : 0;
      CAPTURE(steps);
      CAPTURE(total);
      prompt_total += prompt;
      // The running streams decode every step; a step of more than one tile fills whole tiles.
      for (std::uint32_t seq = 0; seq < 3; ++seq) CHECK(rows.at(seq) == 1);
      CHECK((total <= granule || total % granule == 0));
      CHECK(prompt <= chunk + granule - 1);
      filled |= prompt > chunk;                   // 3 + 16 -> 24 rows: 21 prompt tokens
      trimmed |= prompt > 0 && prompt < chunk && total > granule;  // 16 left: 3 + 13 rows, not 19
    }
    CHECK(started(*longp));
    CHECK(prompt_total == 100);
    CHECK(filled);
    CHECK(trimmed);
    // The step gathered before the prompt was submitted, then 21 x 4, 13, 3 (16 a step unfitted: 8).
    CHECK(steps <= 7);
    m.release();
  }
}
