// Expert slot cache (LRU, SLRU) against a plain std::list reference on random traces, its scan
// resistance and slot bookkeeping; the synthetic routing traces' skew, reuse and distinctness.
#include <doctest/doctest.h>

#include <algorithm>
#include <list>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "strata/tiers/expert_cache.hpp"
#include "strata/tiers/routing_trace.hpp"

using namespace strata::tiers;

namespace {

// The policies written the obvious way: lists front = most recent.
struct reference_cache {
  std::uint32_t slots;
  cache_policy policy;
  std::list<std::uint32_t> probation, prot;  // LRU uses `prot` only
  // Returns (hit, evicted or -1).
  std::pair<bool, int> access(std::uint32_t e) {
    const std::size_t cap = policy == cache_policy::slru ? slots * 4 / 5 : 0;
    if (auto it = std::find(prot.begin(), prot.end(), e); it != prot.end()) {
      prot.erase(it);
      prot.push_front(e);
      return {true, -1};
    }
    if (auto it = std::find(probation.begin(), probation.end(), e); it != probation.end()) {
      probation.erase(it);
      prot.push_front(e);
      if (prot.size() > cap) {
        probation.push_front(prot.back());
        prot.pop_back();
      }
      return {true, -1};
    }
    int evicted = -1;
    if (probation.size() + prot.size() == slots) {
      auto& from = probation.empty() ? prot : probation;
      evicted = int(from.back());
      from.pop_back();
    }
    (policy == cache_policy::slru ? probation : prot).push_front(e);
    return {false, evicted};
  }
};

}  // namespace

TEST_CASE("expert cache: LRU evicts the least recently used") {
  expert_slot_cache c(8, 2, cache_policy::lru);
  CHECK(!c.access(0).hit);
  CHECK(!c.access(1).hit);
  CHECK(c.access(0).hit);
  const auto r = c.access(2);
  CHECK(!r.hit);
  CHECK(r.evicted == 1);
  CHECK(c.resident(0));
  CHECK(!c.resident(1));
  CHECK(c.hits() == 1);
  CHECK(c.misses() == 3);
}

TEST_CASE("expert cache: SLRU keeps twice-used experts through a scan of one-off experts, LRU does not") {
  for (const auto policy : {cache_policy::slru, cache_policy::lru}) {
    expert_slot_cache c(64, 5, policy);
    for (std::uint32_t e : {0u, 0u, 1u, 1u}) c.access(e);
    for (std::uint32_t e = 2; e < 40; ++e) c.access(e);
    CHECK(c.resident(0) == (policy == cache_policy::slru));
    CHECK(c.resident(1) == (policy == cache_policy::slru));
  }
}

TEST_CASE("expert cache: equal to the list reference on random skewed traces, slots stay a permutation") {
  std::mt19937 rng(3);
  for (const auto policy : {cache_policy::lru, cache_policy::slru})
    for (const std::uint32_t slots : {1u, 2u, 5u, 16u, 64u}) {
      CAPTURE(slots);
      expert_slot_cache c(64, slots, policy);
      reference_cache ref{slots, policy, {}, {}};
      std::vector<int> owner(slots, -1);
      std::geometric_distribution<std::uint32_t> pick(0.08);
      for (int i = 0; i < 20000; ++i) {
        const std::uint32_t e = std::min<std::uint32_t>(pick(rng), 63);
        const auto r = c.access(e);
        const auto [hit, evicted] = ref.access(e);
        REQUIRE(r.hit == hit);
        REQUIRE(r.evicted == evicted);
        REQUIRE(r.slot < slots);
        if (r.hit) {
          REQUIRE(owner[r.slot] == int(e));
        } else {
          REQUIRE(owner[r.slot] == r.evicted);  // the victim's slot, or a free one
          owner[r.slot] = int(e);
        }
      }
    }
  CHECK_THROWS_AS(expert_slot_cache(8, 0, cache_policy::lru), strata::error);
  CHECK_THROWS_AS(expert_slot_cache(8, 9, cache_policy::lru), strata::error);
  expert_slot_cache c(8, 2, cache_policy::slru);
  CHECK_THROWS_AS(c.access(8), strata::error);
}

// The Vulkan expert cache uploads a whole step's experts before its matvecs read them: after
// begin_step() no expert of the step may lose its slot to a later one of the same step (plain
// SLRU would: a second miss takes the probation segment's tail, which the first miss just
// filled). Random steps of up to `slots` distinct experts: slots of one step stay distinct and
// owned; a step of more experts than slots is refused with a clear error.
TEST_CASE("expert cache: begin_step pins the step's experts, slots of one step never collide") {
  std::mt19937 rng(11);
  for (const auto policy : {cache_policy::lru, cache_policy::slru})
    for (const std::uint32_t slots : {1u, 2u, 5u, 12u}) {
      CAPTURE(slots);
      expert_slot_cache c(16, slots, policy);
      std::vector<int> owner(slots, -1);
      std::uint64_t evicted = 0;
      for (int step = 0; step < 3000; ++step) {
        c.begin_step();
        const std::uint32_t d = 1 + rng() % slots;
        std::vector<std::uint32_t> ex(16);
        std::iota(ex.begin(), ex.end(), 0u);
        std::shuffle(ex.begin(), ex.end(), rng);
        ex.resize(d);
        std::set<std::uint32_t> used;
        for (const std::uint32_t e : ex) {
          const auto r = c.access(e);
          REQUIRE(r.slot < slots);
          if (r.hit) {
            REQUIRE(owner[r.slot] == int(e));
          } else {
            REQUIRE(owner[r.slot] == r.evicted);
            owner[r.slot] = int(e);
            evicted += r.evicted >= 0;
          }
          REQUIRE(used.insert(r.slot).second);  // no two experts of the step share a slot
        }
        for (const std::uint32_t e : ex) REQUIRE(c.resident(e));
      }
      CHECK(c.evictions() == evicted);
      CHECK(c.hits() + c.misses() > 0);
    }
  expert_slot_cache c(8, 2, cache_policy::slru);
  c.begin_step();
  c.access(0);
  c.access(1);
  CHECK_THROWS_WITH_AS(c.access(2), doctest::Contains("a step may route at most that many experts"), strata::error);
}

TEST_CASE("routing trace: k distinct experts, Zipf skews popularity, reuse repeats the previous token's experts") {
  const auto stats = [](routing_params p, int tokens) {
    routing_trace t(p);
    std::vector<double> count(p.n_expert, 0);
    double overlap = 0;
    std::vector<std::uint32_t> prev;
    for (int i = 0; i < tokens; ++i) {
      const auto ex = t.next();
      REQUIRE(std::set<std::uint32_t>(ex.begin(), ex.end()).size() == p.k);
      for (auto e : ex) {
        REQUIRE(e < p.n_expert);
        count[e] += 1;
        overlap += std::find(prev.begin(), prev.end(), e) != prev.end();
      }
      prev.assign(ex.begin(), ex.end());
    }
    const double top = *std::max_element(count.begin(), count.end()) / (double(tokens) * p.k);
    return std::pair{top, overlap / (double(tokens - 1) * p.k)};
  };
  const auto [top_u, overlap_u] = stats({128, 8, 0, 0, 1}, 20000);
  const auto [top_z, overlap_z] = stats({128, 8, 0.5, 0, 1}, 20000);
  const auto [top_r, overlap_r] = stats({128, 8, 0.5, 0.5, 1}, 20000);
  CHECK(top_u < 0.012);  // uniform: 1/128 = 0.0078 plus sampling noise
  CHECK(top_z > 0.03);
  CHECK(overlap_u == doctest::Approx(8.0 / 128).epsilon(0.15));
  CHECK(overlap_r > overlap_z + 0.3);
}

TEST_CASE("expert cache: prefetch places experts ahead without counting hits or misses, and never evicts its own") {
  expert_slot_cache c(8, 3, cache_policy::slru);
  c.begin_step();
  CHECK(!c.access(0).hit);
  c.begin_prefetch();
  const auto a = c.prefetch(1), b = c.prefetch(2), again = c.prefetch(0);
  CHECK(a.uploaded);
  CHECK(b.uploaded);
  CHECK(a.slot != b.slot);
  CHECK(again.resident);
  CHECK(!again.uploaded);
  // Every slot holds an expert of this prediction (0 too, though it was resident): no room.
  const auto none = c.prefetch(3);
  CHECK(!none.uploaded);
  CHECK(!none.resident);
  CHECK(c.prefetched() == 2);
  CHECK(c.hits() == 0);
  CHECK(c.misses() == 1);
  // A new prediction unpins the last: 3 takes the least recent probation slot, 0's.
  c.begin_prefetch();
  const auto d = c.prefetch(3);
  CHECK(d.uploaded);
  CHECK(d.evicted == 0);
  // The step uses 1 and 3 (hits on experts placed ahead) and misses 5, which evicts 2 unused.
  c.begin_step();
  CHECK(c.access(1).hit);
  CHECK(c.access(3).hit);
  const auto m = c.access(5);
  CHECK(!m.hit);
  CHECK(m.evicted == 2);
  CHECK(c.prefetch_used() == 2);
  CHECK(c.prefetch_wasted() == 1);
  // A second hit on an expert placed ahead is an ordinary hit.
  c.begin_step();
  CHECK(c.access(1).hit);
  CHECK(c.prefetch_used() == 2);
  CHECK(c.evictions() == 2);
  CHECK_THROWS_AS(c.prefetch(8), strata::error);
}

// A correct guess of a one-off expert is that expert's first use: it stays in probation (as after
// a miss) and cannot push an expert hit twice out of the protected segment.
TEST_CASE("expert cache: an expert used once after its prefetch stays in probation") {
  expert_slot_cache c(8, 5, cache_policy::slru);  // 4 protected slots, 1 probation
  for (int round = 0; round < 2; ++round) {  // 0..3 hit twice: protected
    c.begin_step();
    for (std::uint32_t e = 0; e < 4; ++e) c.access(e);
  }
  c.begin_prefetch();
  CHECK(c.prefetch(6).uploaded);
  c.begin_step();
  CHECK(c.access(6).hit);
  // 7's miss takes 6's probation slot, not a protected expert's.
  c.begin_step();
  const auto r = c.access(7);
  CHECK(!r.hit);
  CHECK(r.evicted == 6);
  c.begin_step();
  for (std::uint32_t e = 0; e < 4; ++e) CHECK(c.access(e).hit);
}

TEST_CASE("expert cache: prefetch keeps the slots a bijection on random traces") {
  std::mt19937 rng(7);
  for (const cache_policy policy : {cache_policy::lru, cache_policy::slru}) {
    expert_slot_cache c(16, 6, policy);
    std::vector<int> holder(6, -1);  // slot -> expert, from the results
    std::uniform_int_distribution<std::uint32_t> pick(0, 15);
    const auto place = [&](std::uint32_t e, std::uint32_t slot, std::int32_t evicted) {
      if (evicted >= 0) {
        CHECK(holder[slot] == evicted);
        holder[slot] = -1;
      }
      CHECK(holder[slot] == -1);
      holder[slot] = int(e);
    };
    for (int step = 0; step < 2000; ++step) {
      c.begin_prefetch();
      for (int i = 0; i < 3; ++i) {
        const std::uint32_t e = pick(rng);
        const auto r = c.prefetch(e);
        if (r.uploaded) place(e, r.slot, r.evicted);
        if (r.resident) CHECK(holder[r.slot] == int(e));
      }
      c.begin_step();
      for (int i = 0; i < 2; ++i) {
        const std::uint32_t e = pick(rng);
        const auto r = c.access(e);
        if (r.hit) CHECK(holder[r.slot] == int(e));
        else place(e, r.slot, r.evicted);
      }
    }
    CHECK(c.prefetch_used() + c.prefetch_wasted() <= c.prefetched());
    CHECK(c.prefetch_used() > 0);
  }
}
