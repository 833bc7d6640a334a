// Shared by the scheduler tests: the fixture model with a given number of sequences, greedy
// requests, and a polling wait for a stream's outcome.
#pragma once
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "strata/runtime/scheduler.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace scheduler_test {

using namespace strata;

inline const char* model_path = STRATA_TEST_FIXTURES "/models/qwen3-Q4_K_M.gguf";

inline std::unique_ptr<rt::model> load(std::uint32_t n_seq, std::uint32_t n_ctx = 1024,
                                       rt::backend_kind backend = rt::backend_kind::cpu) {
  rt::engine_options eo;
  eo.backend = backend;
  eo.threads = 1;
  eo.n_ctx = n_ctx;
  eo.n_seq = n_seq;
  eo.n_batch = 64;
  eo.max_outputs = n_seq;
  return rt::model::load(model_path, eo);
}

inline std::vector<std::int32_t> eog_ids(const tokenizer::tokenizer& tok) {
  std::vector<std::int32_t> out;
  for (std::int32_t i = 0; i < tok.n_vocab(); ++i)
    if (tok.is_eog(i)) out.push_back(i);
  return out;
}

inline rt::generation_request greedy(const tokenizer::tokenizer& tok, const std::string& prompt, std::int32_t n) {
  sampling::sampler_params p;
  p.temperature = 0;
  p.max_tokens = n;
  return {tok.encode(prompt, true, true), sampling::sampler(p, tok.n_vocab()), sampling::stop_conditions(eog_ids(tok), n, {})};
}

struct outcome {
  std::string text;
  rt::finish_reason reason = rt::finish_reason::none;
  std::uint32_t cached = 0, completion = 0;
  std::vector<rt::token_logprobs> logprobs;
  std::vector<float> embedding;
  std::string error;
};

inline outcome wait(rt::generation_stream& s) {
  outcome o;
  rt::generation_stream::state st;
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    s.take(st);
    o.text += st.text;
    o.logprobs.insert(o.logprobs.end(), st.logprobs.begin(), st.logprobs.end());
    if (st.done) break;
    REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  o.reason = st.reason;
  o.cached = st.cached_tokens;
  o.completion = st.completion_tokens;
  o.embedding = st.embedding;
  o.error = st.error;
  return o;
}

}  // namespace scheduler_test
