// sampler_params: llama.cpp defaults, validation naming the field, seed resolution.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "helpers.hpp"
#include "strata/sampling/chain.hpp"
#include "strata/sampling/sampler_params.hpp"

using namespace strata::sampling;
using sampling_test::inf;

namespace {
constexpr std::int32_t n_vocab = 100;
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

template <class Edit>
void check_rejected(Edit edit, const char* field) {
  sampler_params p;
  edit(p);
  CHECK_THROWS_WITH_AS(validate(p, n_vocab), doctest::Contains(field), strata::error);
  CHECK_THROWS_WITH_AS(sampler(p, n_vocab), doctest::Contains(field), strata::error);
}
}  // namespace

TEST_CASE("sampler_params: defaults are llama.cpp's") {
  const sampler_params p;
  CHECK(p.temperature == 0.8f);
  CHECK(p.top_k == 40);
  CHECK(p.top_p == 0.95f);
  CHECK(p.min_p == 0.05f);
  CHECK(p.repeat_penalty == 1.0f);
  CHECK(p.repeat_last_n == 64);
  CHECK(p.frequency_penalty == 0.0f);
  CHECK(p.presence_penalty == 0.0f);
  CHECK(p.seed == 0xFFFFFFFFu);
  CHECK(p.logit_bias.empty());
  CHECK(p.max_tokens == -1);
  CHECK_FALSE(is_greedy(p));
  CHECK_FALSE(penalties_active(p));  // repeat_penalty 1 with no frequency/presence: step skipped
  CHECK_NOTHROW(validate(p, n_vocab));
}

TEST_CASE("sampler_params: every invalid field is named in the error") {
  check_rejected([](sampler_params& p) { p.temperature = qnan; }, "temperature");
  check_rejected([](sampler_params& p) { p.temperature = inf; }, "temperature");
  check_rejected([](sampler_params& p) { p.top_k = -1; }, "top_k");
  check_rejected([](sampler_params& p) { p.top_p = 0.0f; }, "top_p");
  check_rejected([](sampler_params& p) { p.top_p = 1.5f; }, "top_p");
  check_rejected([](sampler_params& p) { p.top_p = qnan; }, "top_p");
  check_rejected([](sampler_params& p) { p.min_p = -0.1f; }, "min_p");
  check_rejected([](sampler_params& p) { p.min_p = 1.01f; }, "min_p");
  check_rejected([](sampler_params& p) { p.repeat_penalty = 0.0f; }, "repeat_penalty");
  check_rejected([](sampler_params& p) { p.repeat_penalty = -1.1f; }, "repeat_penalty");
  check_rejected([](sampler_params& p) { p.repeat_penalty = inf; }, "repeat_penalty");
  check_rejected([](sampler_params& p) { p.repeat_last_n = -1; }, "repeat_last_n");
  check_rejected([](sampler_params& p) { p.frequency_penalty = qnan; }, "frequency_penalty");
  check_rejected([](sampler_params& p) { p.presence_penalty = -inf; }, "presence_penalty");
  check_rejected([](sampler_params& p) { p.logit_bias = {{3, 1.0f}, {n_vocab, 1.0f}}; }, "logit_bias[1]");
  check_rejected([](sampler_params& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias[0]");
  check_rejected([](sampler_params& p) { p.logit_bias = {{5, inf}}; }, "logit_bias[0]");
  check_rejected([](sampler_params& p) { p.logit_bias = {{5, qnan}}; }, "logit_bias[0]");
  check_rejected([](sampler_params& p) { p.max_tokens = -2; }, "max_tokens");
  CHECK_THROWS_WITH_AS(validate(sampler_params{}, 0), doctest::Contains("n_vocab"), strata::error);
}

TEST_CASE("sampler_params: boundary values are accepted") {
  sampler_params p;
  p.temperature = -1.0f;  // greedy
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_last_n = 0;
  p.frequency_penalty = -2.0f;  // OpenAI allows negative (encourages repetition)
  p.logit_bias = {{0, -inf}, {n_vocab - 1, 100.0f}};
  p.max_tokens = 0;
  CHECK_NOTHROW(validate(p, n_vocab));
  CHECK(is_greedy(p));
  p.min_p = 1.0f;
  p.temperature = 0.0f;
  CHECK_NOTHROW(validate(p, n_vocab));
  CHECK(is_greedy(p));
}

TEST_CASE("seed: default_seed draws a random seed, explicit seeds are kept") {
  CHECK(resolve_seed(42) == 42);
  CHECK(resolve_seed(0) == 0);
  CHECK(resolve_seed(0x1'0000'0000ull) == 0x1'0000'0000ull);
  for (int i = 0; i < 16; ++i) {
    const auto s = resolve_seed(default_seed);
    CHECK(s != default_seed);
    CHECK(s <= 0xFFFFFFFFu);
  }
  const sampler a(sampler_params{}, n_vocab);
  CHECK(a.seed() != default_seed);
  sampler_params p;
  p.seed = 7;
  CHECK(sampler(p, n_vocab).seed() == 7);
}
