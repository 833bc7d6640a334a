// model::forward_embeddings (the final-norm rows embedding models pool) on the Vulkan backend,
// whole and split with the CPU (-ngl), equals the CPU backend's rows within the model's fidelity
// tolerance; and a recorded Vulkan step of the same shape that ends in logits is never replayed
// for an embedding step (or the other way round).
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "support/fidelity.hpp"
#include "support/vulkan_here.hpp"

namespace {

using strata::rt::backend_kind;

const strata::test::golden_model& qwen3_fixture() {
  static const auto models = strata::test::local_golden();
  const auto it = std::find_if(models.begin(), models.end(), [](const auto& g) { return g.name == "qwen3-Q4_K_M"; });
  REQUIRE_MESSAGE(it != models.end(), "tests/fixtures/models/manifest.json lists no qwen3-Q4_K_M");
  return *it;
}

std::unique_ptr<strata::rt::model> load(backend_kind kind, int n_gpu_layers = -1) {
  strata::rt::engine_options opt;
  opt.backend = kind;
  opt.n_gpu_layers = n_gpu_layers;
  opt.threads = 2;
  opt.n_ctx = 64;
  opt.n_batch = 16;
  opt.n_seq = 2;
  return strata::rt::model::load(qwen3_fixture().path, opt);
}

// n tokens of sequence `seq` from position 0, every row flagged (what mean pooling asks for).
struct prompt {
  std::vector<std::int32_t> ids, pos;
  std::vector<std::uint32_t> seq;
  std::vector<std::uint8_t> want;
  prompt(std::uint32_t s, std::vector<std::int32_t> t) : ids(std::move(t)) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      pos.push_back(std::int32_t(i));
      seq.push_back(s);
      want.push_back(1);
    }
  }
  strata::graph::batch view() const { return {ids, pos, seq, want}; }
};

const std::vector<std::int32_t> tokens_a{1, 17, 250, 33, 901, 4, 77}, tokens_b{5, 600, 42, 8, 300, 11, 2};

// Each backend's logits are within tolerance_nmse of llama.cpp's; by the triangle inequality on
// the RMS error two backends' logits are then within (2·sqrt(tol))² = 4·tol of each other. The
// logits are one fixed linear map of these rows, so the rows are held to the same relative bound.
double backend_tolerance() { return 4 * qwen3_fixture().tolerance_nmse; }

std::vector<float> embed_rows(strata::rt::model& m, const prompt& p) {
  std::vector<float> rows(p.ids.size() * m.hparams().n_embd);
  m.forward_embeddings(p.view(), rows);
  return rows;
}


void check_against_cpu(backend_kind kind, int n_gpu_layers) {
  auto cpu = load(backend_kind::cpu);
  auto gpu = load(kind, n_gpu_layers);
  CHECK(gpu->supports_embeddings());
  const prompt a(0, tokens_a);
  const auto want = embed_rows(*cpu, a);
  // A logits step of the same shape (7 tokens, 7 output rows, one sequence) first, on the other
  // sequence: the embedding step after it must record its own command buffer, not replay this one.
  std::vector<float> logits(tokens_b.size() * gpu->hparams().n_vocab);
  gpu->forward(prompt(1, tokens_b).view(), logits);
  const auto got = embed_rows(*gpu, a);
  const double e = strata::test::nmse(got, want);
  MESSAGE(gpu->backend_description() << ": embedding rows nmse " << e << " vs CPU (bound " << backend_tolerance() << ")");
  CHECK(e <= backend_tolerance());
  // The same shape with only its last row out (last-token pooling) after the every-row step: the
  // Vulkan step shares the layers' part's shape but gathers its output row (step_cache.cpp).
  gpu->kv().clear(0);
  prompt last = a;
  std::fill(last.want.begin(), last.want.end() - 1, std::uint8_t(0));
  const std::uint32_t E = gpu->hparams().n_embd;
  std::vector<float> last_row(E);
  gpu->forward_embeddings(last.view(), last_row);
  const std::vector<float> want_last(want.end() - E, want.end());
  CHECK(strata::test::nmse(last_row, want_last) <= backend_tolerance());
  {  // the other order, on a fresh model: the every-row step replays the gathered step's layers
    auto fresh = load(kind, n_gpu_layers);
    std::vector<float> first(E);
    fresh->forward_embeddings(last.view(), first);
    fresh->kv().clear(0);
    CHECK(strata::test::nmse(first, want_last) <= backend_tolerance());
    CHECK(strata::test::nmse(embed_rows(*fresh, a), want) <= backend_tolerance());
  }
  // And the other way round: a logits step after the embedding step of its shape.
  gpu->kv().clear(1);
  std::vector<float> cpu_logits(logits.size());
  cpu->forward(prompt(1, tokens_b).view(), cpu_logits);
  gpu->forward(prompt(1, tokens_b).view(), logits);
  CHECK(strata::test::nmse(logits, cpu_logits) <= backend_tolerance());
}

}  // namespace

TEST_CASE("embeddings: Vulkan rows equal the CPU rows within the fixture's tolerance") {
  if (!strata::test::vulkan_here("the Vulkan embeddings checks")) return;
  check_against_cpu(backend_kind::vulkan, -1);
}

TEST_CASE("embeddings: Vulkan/CPU layer split (-ngl 2) rows equal the CPU rows") {
  if (!strata::test::vulkan_here("the Vulkan embeddings checks")) return;
  check_against_cpu(backend_kind::vulkan, 2);
}
