// session::decode_argmax (the backend's own argmax: on the GPU only 4 bytes per token come
// back) picks exactly the argmax of the logits session::decode returns, lowest id among ties,
// on every backend.
#include <doctest/doctest.h>

#include <algorithm>

#include "strata/runtime/engine.hpp"
#include "strata/sampling/greedy.hpp"
#include "support/fixtures.hpp"
#include "support/vulkan_here.hpp"

namespace {

void check_backend(strata::rt::backend_kind backend) {
  strata::rt::engine_options opt;
  opt.backend = backend;
  opt.threads = 2;
  opt.n_ctx = 256;
  opt.n_batch = 64;
  auto m = strata::rt::model::load(strata::test::fixture_dir() / "models" / "qwen3-Q4_K_M.gguf", opt);
  strata::rt::session s(*m);
  const std::vector<std::int32_t> prompt{1, 17, 250, 33, 901, 4, 77};
  // Reference: logits back, argmax on the host.
  auto logits = s.prefill(prompt);
  std::vector<std::int32_t> want;
  std::int32_t t = strata::sampling::argmax(logits);
  for (int i = 0; i < 24; ++i) {
    want.push_back(t);
    t = strata::sampling::argmax(s.decode(t));
  }
  // Backend argmax from the same state.
  s.clear();
  logits = s.prefill(prompt);
  std::vector<std::int32_t> got;
  t = strata::sampling::argmax(logits);
  for (int i = 0; i < 24; ++i) {
    got.push_back(t);
    t = s.decode_argmax(t);
  }
  CHECK(got == want);
}

}  // namespace

TEST_CASE("greedy: backend argmax equals the argmax of the logits (CPU)") {
  check_backend(strata::rt::backend_kind::cpu);
}

TEST_CASE("greedy: backend argmax equals the argmax of the logits (Vulkan)") {
  if (!strata::test::vulkan_here("the Vulkan argmax check")) return;
  check_backend(strata::rt::backend_kind::vulkan);
}
