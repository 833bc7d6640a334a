// runtime/vulkan/step_cache.cpp: a step's layers and its output are recorded apart, and
// rt::model::record_steps records a scheduler's step shapes ahead. On the fixture model, a run of
// the batches a server forms (prefill of many prompts, decodes of changing stream counts, decodes
// beside prompt chunks, greedy steps) records nothing after record_steps, and gives the logits and
// ids of the same run recorded on use, bit for bit; the steps whose output reads every row in place
// (decodes) give those of one recording per step (STRATA_VK_OUTPUT_PART=0) bit for bit too.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "support/scoped_env.hpp"
#include "vulkan/vk_harness.hpp"

using namespace strata;

namespace step_cache_test {

struct run_result {
  std::vector<std::vector<float>> logits;       // per step (empty for greedy steps)
  std::vector<std::vector<std::int32_t>> ids;   // per step (empty for logits steps)
  std::vector<std::uint64_t> recorded;          // steps recorded after each step
  rt::model::recording_counters ahead;
};

struct row {
  std::uint32_t seq;
  std::uint32_t count;  // tokens continuing the sequence
  bool out;             // the last one's logits
};

run_result run(bool record_ahead) {
  auto m = rt::model::load(test::fixture_dir() / "models" / "qwen3-Q4_K_M.gguf", test::vk::twelve_stream_options());
  const std::uint32_t V = m->hparams().n_vocab;
  run_result out;
  if (record_ahead) out.ahead = m->record_steps({64, 12, 12});
  std::vector<std::int32_t> len(12, 0);
  const auto step = [&](const std::vector<row>& rows, bool greedy) {
    std::vector<std::int32_t> tok, pos;
    std::vector<std::uint32_t> seq;
    std::vector<std::uint8_t> want;
    std::uint32_t n_out = 0;
    for (const row& r : rows)
      for (std::uint32_t i = 0; i < r.count; ++i) {
        tok.push_back(std::int32_t((r.seq * 131 + std::uint32_t(len[r.seq]) * 17 + 5) % V));
        pos.push_back(len[r.seq]++);
        seq.push_back(r.seq);
        want.push_back(r.out && i + 1 == r.count);
        n_out += want.back();
      }
    const graph::batch b{tok, pos, seq, want};
    if (greedy) {
      std::vector<std::int32_t> ids(n_out);
      m->forward_argmax(b, ids);
      out.ids.push_back(std::move(ids));
      out.logits.emplace_back();
    } else {
      std::vector<float> logits(std::size_t(n_out) * V);
      m->forward(b, logits);
      out.logits.push_back(std::move(logits));
      out.ids.emplace_back();
    }
    out.recorded.push_back(m->step_recordings().steps);
  };
  const auto decodes = [](std::uint32_t k) {
    std::vector<row> rows;
    for (std::uint32_t s = 0; s < k; ++s) rows.push_back({s, 1, true});
    return rows;
  };
  std::vector<row> prefill;  // 12 prompts of 3-6 tokens in one step: 54 rows (56 padded), 12 out
  for (std::uint32_t s = 0; s < 12; ++s) prefill.push_back({s, 3 + s % 4, true});
  step(prefill, false);
  step(decodes(9), false);   // 10 rows, every row out
  step(decodes(12), false);
  auto mixed = decodes(5);   // 5 decodes + a 20-token chunk: 25 rows (28), 6 out gathered
  mixed.push_back({11, 20, true});
  step(mixed, false);
  step(decodes(7), true);    // greedy, every row out
  auto mixed_greedy = decodes(3);  // 3 decodes + a 10-token chunk: 13 rows (14), 4 out, greedy
  mixed_greedy.push_back({10, 10, true});
  step(mixed_greedy, true);
  step({{11, 30, true}}, false);   // one sequence's chunk: 30 rows (32), its last out
  step({{9, 40, false}}, false);   // a chunk without output rows: 40 rows, no output part
  auto few_mixed = decodes(2);     // 2 decodes + a 3-token chunk: 5 rows, one sequence with several
  few_mixed.push_back({8, 3, true});
  step(few_mixed, false);
  step(decodes(1), true);
  step(decodes(9), false);   // again: replays on use too
  return out;
}

}  // namespace step_cache_test

TEST_CASE("Vulkan: steps recorded ahead serve a server's batches without recording, with the results of steps recorded on use") {
  if (!test::vk::available()) return;
  const auto on_use = step_cache_test::run(false);
  const auto ahead = step_cache_test::run(true);
  CHECK(ahead.ahead.steps > 0);
  MESSAGE("recorded ahead: " << ahead.ahead.steps << " steps in " << ahead.ahead.ms << " ms");
  // Nothing recorded after record_steps; on use, the first steps record and later ones replay.
  for (const std::uint64_t r : ahead.recorded) CHECK(r == ahead.ahead.steps);
  CHECK(on_use.recorded.front() == 1);
  CHECK(on_use.recorded.back() == on_use.recorded[on_use.recorded.size() - 2]);
  REQUIRE(ahead.logits.size() == on_use.logits.size());
  for (std::size_t i = 0; i < on_use.logits.size(); ++i) {
    CAPTURE(i);
    CHECK(ahead.logits[i] == on_use.logits[i]);  // the same kernels on the same rows
    CHECK(ahead.ids[i] == on_use.ids[i]);
  }
  // In place, the output part starts after the output norm from the state the layers ended with:
  // the dispatches of one recording. (Gathered outputs fuse by their own rows: not compared.)
  step_cache_test::run_result one_part;
  {
    const test::scoped_env off("STRATA_VK_OUTPUT_PART", "0");
    one_part = step_cache_test::run(false);
  }
  REQUIRE(one_part.logits.size() == on_use.logits.size());
  for (const std::size_t i : {1, 2, 4, 9, 10}) {  // the decode steps
    CAPTURE(i);
    CHECK(one_part.logits[i] == on_use.logits[i]);
    CHECK(one_part.ids[i] == on_use.ids[i]);
  }
}
