// runtime/vulkan/step_buckets.hpp: the token counts Vulkan steps run as (every count up to 8, then
// four an octave, growing a step by less than a quarter); and, on the fixture model, steps padded
// to them give every token the logits of the same steps unpadded, while a changing batch replays
// the steps recorded for its sizes instead of recording new ones.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "support/scoped_env.hpp"
#include "vulkan/vk_harness.hpp"
#ifdef STRATA_HAS_VULKAN
#include "../../runtime/vulkan/step_buckets.hpp"
#endif

using namespace strata;

#ifdef STRATA_HAS_VULKAN
TEST_CASE("step sizes: every count to 8, then four an octave, each at least n and less than 1.25 n") {
  std::set<std::uint32_t> sizes;
  std::uint32_t last = 0;
  for (std::uint32_t n = 1; n <= 4096; ++n) {
    const std::uint32_t r = gpu::padded_step_rows(n);
    CAPTURE(n);
    CHECK(r >= n);
    CHECK(r >= last);  // monotone: a bigger batch never runs as a smaller step
    CHECK(4 * r < 5 * n + 4);  // r < 1.25 n (n = 9 -> 10 is the worst at the small end)
    CHECK(gpu::padded_step_rows(r) == r);  // a size runs as itself
    if (n <= 8) CHECK(r == n);
    sizes.insert(r);
    last = r;
  }
  CHECK(gpu::padded_step_rows(9) == 10);
  CHECK(gpu::padded_step_rows(17) == 20);
  CHECK(gpu::padded_step_rows(64) == 64);
  CHECK(gpu::padded_step_rows(65) == 80);
  CHECK(gpu::padded_step_rows(300) == 320);
  CHECK(gpu::padded_step_rows(513) == 640);
  std::size_t to_512 = 0;
  for (const auto s : sizes) to_512 += s <= 512;
  CHECK(to_512 == 32);
  CHECK(sizes.size() == 32 + 4 * 3);  // and four an octave to 4,096
}
#endif

namespace {

struct step_logits {
  std::vector<std::vector<float>> steps;  // each step's logits rows
  std::vector<std::uint64_t> recorded;    // steps recorded after each step
};

// Prefills 12 sequences in one step (prompts of 3-6 tokens), then decodes 9, 10, 11, 12 and
// again 9 of them (steps of 10, 10, 12, 12, 10 rows when padded), logits for every row.
step_logits run_steps(const std::filesystem::path& model) {
  auto m = rt::model::load(model, test::vk::twelve_stream_options());
  const std::uint32_t V = m->hparams().n_vocab;
  step_logits out;
  const auto step = [&](const std::vector<std::int32_t>& tok, const std::vector<std::int32_t>& pos,
                        const std::vector<std::uint32_t>& seq, const std::vector<std::uint8_t>& want) {
    std::uint32_t n_out = 0;
    for (auto w : want) n_out += w;
    std::vector<float> logits(std::size_t(n_out) * V);
    m->forward({tok, pos, seq, want}, logits);
    out.steps.push_back(std::move(logits));
    out.recorded.push_back(m->step_recordings().steps);
  };
  std::vector<std::int32_t> tok, pos;
  std::vector<std::uint32_t> seq;
  std::vector<std::uint8_t> want;
  std::vector<std::int32_t> len(12);
  for (std::uint32_t s = 0; s < 12; ++s) {
    len[s] = 3 + std::int32_t(s % 4);
    for (std::int32_t i = 0; i < len[s]; ++i) {
      tok.push_back(std::int32_t((s * 131 + std::uint32_t(i) * 17 + 5) % V));
      pos.push_back(i);
      seq.push_back(s);
      want.push_back(i + 1 == len[s]);
    }
  }
  step(tok, pos, seq, want);
  for (const std::uint32_t k : {9u, 10u, 11u, 12u, 9u}) {
    tok.clear(), pos.clear(), seq.clear(), want.assign(k, 1);
    for (std::uint32_t s = 0; s < k; ++s) {
      tok.push_back(std::int32_t((s * 7 + std::uint32_t(len[s]) * 3 + 11) % V));
      pos.push_back(len[s]++);
      seq.push_back(s);
    }
    step(tok, pos, seq, want);
  }
  return out;
}

}  // namespace

TEST_CASE("Vulkan: steps padded to their recorded size give every token the unpadded logits, and replay") {
  if (!test::vk::available()) return;
  const auto model = test::fixture_dir() / "models" / "qwen3-Q4_K_M.gguf";
  step_logits exact;
  {
    const test::scoped_env off("STRATA_VK_STEP_BUCKETS", "0");
    exact = run_steps(model);
  }
  const step_logits padded = run_steps(model);
  REQUIRE(padded.steps.size() == exact.steps.size());
  for (std::size_t i = 0; i < exact.steps.size(); ++i) {
    CAPTURE(i);
    REQUIRE(padded.steps[i].size() == exact.steps[i].size());
    const double e = test::nmse(padded.steps[i], exact.steps[i]);
    MESSAGE("step " << i << ": padded vs exact nmse " << e);
    CHECK(e <= 1e-6);  // the same kernels on the same rows: padding only adds rows
  }
  // Unpadded, every step size (54, 9, 10, 11, 12 tokens) records; padded, 56, 10 and 12 do and
  // the steps of 10 and 11 tokens replay the steps of 9 and 12's sizes... (10 -> 10, 11 -> 12).
  CHECK(exact.recorded == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 5});
  CHECK(padded.recorded == std::vector<std::uint64_t>{1, 2, 2, 3, 3, 3});
}

// The fusions of 5+-token steps (the f16 copies beside the norm, SwiGLU and attention, gate/up
// with the SwiGLU, the residual add in the store) change no bit: the same steps without them
// give the same logits (on devices without mul_mm_reg nothing differs).
TEST_CASE("Vulkan: multi-sequence steps give the logits of the unfused steps (STRATA_VK_MM_FUSE=0)") {
  if (!test::vk::available()) return;
  const auto model = test::fixture_dir() / "models" / "qwen3-Q4_K_M.gguf";
  step_logits plain;
  {
    const test::scoped_env off("STRATA_VK_MM_FUSE", "0");
    plain = run_steps(model);
  }
  const step_logits fused = run_steps(model);
  REQUIRE(fused.steps.size() == plain.steps.size());
  for (std::size_t i = 0; i < plain.steps.size(); ++i) {
    CAPTURE(i);
    REQUIRE(fused.steps[i].size() == plain.steps[i].size());
    const double e = test::nmse(fused.steps[i], plain.steps[i]);
    MESSAGE("step " << i << ": fused vs unfused nmse " << e);
    CHECK(fused.steps[i] == plain.steps[i]);
  }
}
