// kv::block_table, the model's one KV bookkeeping: slots by block, prefix reuse (common prefix,
// truncate, append), whole blocks returned to the pool, the step protocol (reserve_step checks
// positions, commit_step records tokens) and the two ways to run out of room.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "strata/kv/block_table.hpp"
#include "support/error_of.hpp"

namespace {

using strata::kv::block_table;

using strata::test::error_of;

// Appends tokens to seq as one step would.
void append(block_table& t, std::uint32_t seq, const std::vector<std::int32_t>& toks) {
  std::vector<std::uint32_t> seqs(toks.size(), seq);
  std::vector<std::int32_t> pos(toks.size());
  for (std::size_t i = 0; i < toks.size(); ++i) pos[i] = std::int32_t(t.length(seq) + i);
  t.reserve_step(seqs, pos);
  t.commit_step(seqs, toks);
}

}  // namespace

TEST_CASE("block_table: geometry, slots within a sequence's blocks, distinct slots across sequences") {
  block_table t(100, 16, 2);  // 100 slots round up to 7 blocks of 16
  CHECK(t.n_blocks() == 7);
  CHECK(t.n_slots() == 112);
  CHECK(t.capacity() == 100);
  CHECK(t.free_blocks() == 7);
  std::vector<std::int32_t> a(40), b(20);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::int32_t(i);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::int32_t(100 + i);
  append(t, 0, a);
  append(t, 1, b);
  CHECK(t.length(0) == 40);
  CHECK(t.length(1) == 20);
  CHECK(t.blocks(0).size() == 3);
  CHECK(t.blocks(1).size() == 2);
  CHECK(t.free_blocks() == 2);
  CHECK(t.used_slots() == 60);
  std::set<std::uint32_t> slots;
  for (std::uint32_t p = 0; p < 40; ++p) {
    const std::uint32_t s = t.slot(0, p);
    CHECK(s / 16 == t.blocks(0)[p / 16]);
    CHECK(s % 16 == p % 16);
    slots.insert(s);
  }
  for (std::uint32_t p = 0; p < 20; ++p) slots.insert(t.slot(1, p));
  CHECK(slots.size() == 60);  // no slot shared between positions or sequences
  CHECK(std::vector<std::int32_t>(t.tokens(1).begin(), t.tokens(1).end()) == b);
}

TEST_CASE("block_table: prefix reuse keeps the common prefix and frees only whole blocks") {
  block_table t(128, 16, 1);
  std::vector<std::int32_t> prompt(50);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = std::int32_t(i * 7 % 31);
  append(t, 0, prompt);
  const auto first_blocks = std::vector<std::uint32_t>(t.blocks(0).begin(), t.blocks(0).end());
  CHECK(first_blocks.size() == 4);

  auto next = prompt;
  next.resize(40);
  next.push_back(999);  // differs at position 40
  CHECK(t.common_prefix(0, next) == 40);
  CHECK(t.common_prefix(0, std::vector<std::int32_t>{}) == 0);
  CHECK(t.common_prefix(0, std::vector<std::int32_t>{-1}) == 0);
  t.truncate(0, 40);
  CHECK(t.length(0) == 40);
  CHECK(t.blocks(0).size() == 3);  // position 39 is in block 2: block 3 goes back to the pool
  CHECK(t.free_blocks() == t.n_blocks() - 3);
  CHECK(std::equal(t.blocks(0).begin(), t.blocks(0).end(), first_blocks.begin()));  // kept blocks do not move
  append(t, 0, {999});
  CHECK(t.length(0) == 41);
  CHECK(t.common_prefix(0, next) == 41);
  t.truncate(0, 100);  // longer than the sequence: nothing changes
  CHECK(t.length(0) == 41);
  t.clear(0);
  CHECK(t.length(0) == 0);
  CHECK(t.free_blocks() == t.n_blocks());
}

TEST_CASE("block_table: a step checks that positions continue each sequence, in batch order") {
  block_table t(64, 16, 2);
  append(t, 0, {1, 2, 3});
  // Two sequences interleaved in one batch: each continues its own length.
  const std::vector<std::uint32_t> seqs{1, 0, 1, 0};
  const std::vector<std::int32_t> pos{0, 3, 1, 4}, toks{10, 4, 11, 5};
  t.reserve_step(seqs, pos);
  t.commit_step(seqs, toks);
  CHECK(std::vector<std::int32_t>(t.tokens(0).begin(), t.tokens(0).end()) == std::vector<std::int32_t>{1, 2, 3, 4, 5});
  CHECK(std::vector<std::int32_t>(t.tokens(1).begin(), t.tokens(1).end()) == std::vector<std::int32_t>{10, 11});

  const std::vector<std::uint32_t> one{0};
  CHECK(error_of([&] { t.reserve_step(one, std::vector<std::int32_t>{7}); }) ==
        "batch position 7 does not continue sequence 0 (length 5)");
  CHECK(error_of([&] { t.reserve_step(one, std::vector<std::int32_t>{4}); }) ==
        "batch position 4 does not continue sequence 0 (length 5)");
  CHECK(error_of([&] { t.reserve_step(one, std::vector<std::int32_t>{-1}); }) ==
        "batch position -1 does not continue sequence 0 (length 5)");
  CHECK(error_of([&] { t.reserve_step(std::vector<std::uint32_t>{2}, std::vector<std::int32_t>{0}); }) ==
        "batch sequence id 2 out of range (2)");
  // Out of order within a step: position 6 before 5.
  CHECK(error_of([&] { t.reserve_step(std::vector<std::uint32_t>{0, 0}, std::vector<std::int32_t>{6, 5}); }) ==
        "batch position 6 does not continue sequence 0 (length 5)");
  CHECK(t.length(0) == 5);  // failed steps record nothing
  CHECK(error_of([&] { (void)t.length(9); }) == "kv cache: sequence id 9 out of range (2)");
}

TEST_CASE("block_table: exhaustion names the context size or the pool") {
  SUBCASE("one sequence reaches the context size") {
    block_table t(40, 16, 1);
    append(t, 0, std::vector<std::int32_t>(40, 1));
    CHECK(error_of([&] { t.reserve_append(0, 1); }) ==
          "context full: sequence 0 would hold 41 tokens, the context size is 40");
  }
  SUBCASE("sequences share the pool: the second cannot grow past what the first holds") {
    block_table t(64, 16, 2);  // 4 blocks
    append(t, 0, std::vector<std::int32_t>(40, 1));  // 3 blocks
    append(t, 1, std::vector<std::int32_t>(16, 2));  // the last block
    CHECK(t.free_blocks() == 0);
    append(t, 0, std::vector<std::int32_t>(8, 1));   // fits in sequence 0's third block
    CHECK(error_of([&] { t.reserve_append(1, 1); }) ==
          "kv cache full: sequence 1 needs 17 token slots but only 16 are available (context size 64)");
    t.clear(0);  // eviction frees the pool
    CHECK(t.free_blocks() == 3);
    append(t, 1, {2});
    CHECK(t.length(1) == 17);
  }
  CHECK(error_of([] { block_table(64, 0, 1); }) == "kv cache: block size and sequence count must be non-zero");
  CHECK(error_of([] { block_table(64, 16, 0); }) == "kv cache: block size and sequence count must be non-zero");
}
