// Which routed experts of one MoE layer sit in the GPU's expert slots (issue 14 item 3): a
// fixed number of slots, filled on a miss, with LRU or segmented LRU eviction. SLRU keeps
// experts hit at least twice in a protected segment (80% of the slots) that first-time experts
// cannot flush: a burst of one-off experts only cycles through the probation segment, so the
// hot experts of skewed routing stay resident (recency and frequency, as design.md asks).
// Fixed arrays sized at construction: access() allocates nothing (it runs per token per layer).
// A backend that uploads a whole step's experts before its matvecs run calls begin_step() first:
// experts accessed since then are pinned (never the victim), so every expert of the step keeps
// its slot until the step's matvecs have read it. A step may touch at most `slots` experts.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::tiers {

enum class cache_policy { lru, slru };

class expert_slot_cache {
 public:
  struct result {
    bool hit = false;
    std::uint32_t slot = 0;      // where the expert is (hit) or is to be uploaded (miss)
    std::int32_t evicted = -1;   // the expert whose slot was taken, -1 if a free slot was used
  };

  expert_slot_cache(std::uint32_t n_expert, std::uint32_t slots, cache_policy policy)
      : n_(n_expert), slots_(slots), policy_(policy), protected_cap_(policy == cache_policy::slru ? slots * 4 / 5 : 0),
        prev_(n_expert, none), next_(n_expert, none), where_(n_expert, absent), slot_of_(n_expert, 0) {
    if (slots == 0 || slots > n_expert)
      throw error("expert cache: " + std::to_string(slots) + " slots for " + std::to_string(n_expert) +
                  " experts (need 1..n_expert)");
    free_slots_.reserve(slots);
    for (std::uint32_t s = slots; s-- > 0;) free_slots_.push_back(s);
  }

  // Pins what access() touches from now on until the next begin_step().
  void begin_step() noexcept { ++epoch_; }
  // Pins what prefetch() places from now on (the last step's experts are no longer pinned).
  void begin_prefetch() noexcept { ++epoch_; }

  struct placed {
    bool resident = false;  // already in a slot: nothing to upload
    bool uploaded = false;  // placed in `slot`: its weights are to be uploaded there
    std::uint32_t slot = 0;
    std::int32_t evicted = -1;
  };
  // Places expert e ahead of its step. Neither resident nor placed when every slot holds a pinned
  // expert (an expert of this prefetch): a prediction never evicts its own.
  placed prefetch(std::uint32_t e) {
    if (e >= n_) throw error("expert cache: prefetch of expert " + std::to_string(e) + " of " + std::to_string(n_));
    placed r;
    if (epoch_ != 0) pinned_[e] = epoch_;  // a later guess of the same prediction must not evict it
    if (where_[e] != absent) {
      r.resident = true;
      r.slot = slot_of_[e];
      return r;
    }
    if (free_slots_.empty()) {
      const std::uint32_t v = victim(true);
      if (v == none) return r;
      r.evicted = std::int32_t(evict(v));
    }
    r.uploaded = true;
    r.slot = enter(e);
    ahead_[e] = 1;
    ++prefetched_;
    return r;
  }

  result access(std::uint32_t e) {
    if (e >= n_) throw error("expert cache: expert " + std::to_string(e) + " of " + std::to_string(n_));
    result r;
    if (epoch_ != 0) pinned_[e] = epoch_;
    if (where_[e] != absent) {
      r.hit = true;
      r.slot = slot_of_[e];
      ++hits_;
      const bool first_use = ahead_[e] != 0;  // placed ahead: this is its first use, as a miss's would be
      if (first_use) {
        ahead_[e] = 0;
        ++prefetch_used_;
      }
      if (policy_ == cache_policy::slru && where_[e] == probation && !first_use) {
        unlink(e);
        push_front(protected_seg, e);
        if (size_[protected_seg] > protected_cap_) {  // demote the protected segment's LRU
          const std::uint32_t d = tail_[protected_seg];
          unlink(d);
          push_front(probation, d);
        }
      } else {
        const segment s = where_[e];
        unlink(e);
        push_front(s, e);
      }
      return r;
    }
    ++misses_;
    if (free_slots_.empty()) {
      // Victim: the probation segment's LRU (SLRU), else the protected one's (all of LRU).
      // Pinned experts (this step's) are skipped, oldest first.
      const std::uint32_t v = victim();
      if (v == none)
        throw error("expert cache: every one of the " + std::to_string(slots_) +
                    " slots holds an expert of this step; a step may route at most that many experts");
      r.evicted = std::int32_t(evict(v));
    }
    r.slot = enter(e);
    return r;
  }

  bool resident(std::uint32_t e) const noexcept { return e < n_ && where_[e] != absent; }
  // The slot of a resident expert (undefined for one that is not).
  std::uint32_t slot_of(std::uint32_t e) const noexcept { return e < n_ ? slot_of_[e] : 0; }
  // What access() of an absent expert would do now: take a free slot (-1), evict this expert, or
  // fail (-2: every slot holds an expert pinned since begin_step()). An admission policy weighs
  // the victim before it calls access().
  std::int64_t would_evict() const noexcept {
    if (!free_slots_.empty()) return -1;
    const std::uint32_t v = victim();
    return v == none ? -2 : std::int64_t(v);
  }
  std::uint64_t hits() const noexcept { return hits_; }
  std::uint64_t misses() const noexcept { return misses_; }
  std::uint64_t evictions() const noexcept { return evictions_; }
  std::uint32_t slots() const noexcept { return slots_; }
  std::uint32_t experts() const noexcept { return n_; }
  double hit_rate() const noexcept { return hits_ + misses_ ? double(hits_) / double(hits_ + misses_) : 0; }
  std::uint64_t prefetched() const noexcept { return prefetched_; }        // experts placed ahead
  std::uint64_t prefetch_used() const noexcept { return prefetch_used_; }  // ... that a step then hit
  std::uint64_t prefetch_wasted() const noexcept { return prefetch_wasted_; }  // ... evicted before any use

 private:
  // LRU keeps one list (the "protected" segment, unbounded up to the slots).
  enum segment : std::uint8_t { probation = 0, protected_seg = 1, absent = 2 };
  static constexpr std::uint32_t none = 0xFFFFFFFFu;

  bool pinned(std::uint32_t e) const noexcept { return epoch_ != 0 && pinned_[e] == epoch_; }
  // The least recent unpinned expert of the probation segment, else of the protected one.
  // A prefetch (probation_only) takes only a probation slot under SLRU: a guess never evicts an
  // expert hit twice.
  std::uint32_t victim(bool probation_only = false) const noexcept {
    for (const segment s : {probation, protected_seg}) {
      if (s == protected_seg && probation_only && policy_ == cache_policy::slru) break;
      for (std::uint32_t v = tail_[s]; v != none; v = prev_[v])
        if (!pinned(v)) return v;
    }
    return none;
  }

  // Expert e into a free slot (one must be free), at the front of the segment new experts enter.
  std::uint32_t enter(std::uint32_t e) {
    const std::uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    slot_of_[e] = slot;
    push_front(policy_ == cache_policy::slru ? probation : protected_seg, e);
    return slot;
  }

  std::uint32_t evict(std::uint32_t v) {
    unlink(v);
    ++evictions_;
    where_[v] = absent;
    free_slots_.push_back(slot_of_[v]);
    if (ahead_[v]) {
      ahead_[v] = 0;
      ++prefetch_wasted_;
    }
    return v;
  }

  void push_front(segment s, std::uint32_t e) {
    prev_[e] = none;
    next_[e] = head_[s];
    if (head_[s] != none) prev_[head_[s]] = e;
    head_[s] = e;
    if (tail_[s] == none) tail_[s] = e;
    where_[e] = s;
    ++size_[s];
  }
  void unlink(std::uint32_t e) {
    const segment s = where_[e];
    if (prev_[e] != none) next_[prev_[e]] = next_[e];
    else head_[s] = next_[e];
    if (next_[e] != none) prev_[next_[e]] = prev_[e];
    else tail_[s] = prev_[e];
    prev_[e] = next_[e] = none;
    --size_[s];
  }

  std::uint32_t n_, slots_;
  cache_policy policy_;
  std::uint32_t protected_cap_;
  std::vector<std::uint32_t> prev_, next_;  // per expert: its neighbours in its segment's list
  std::vector<segment> where_;
  std::vector<std::uint32_t> slot_of_;
  std::vector<std::uint32_t> free_slots_;
  std::vector<std::uint64_t> pinned_ = std::vector<std::uint64_t>(n_, 0);  // step stamp of the last access
  std::uint64_t epoch_ = 0;  // 0: no steps, nothing pinned
  std::uint32_t head_[2] = {none, none}, tail_[2] = {none, none}, size_[2] = {0, 0};
  std::vector<std::uint8_t> ahead_ = std::vector<std::uint8_t>(n_, 0);  // placed by prefetch(), not used since
  std::uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
  std::uint64_t prefetched_ = 0, prefetch_used_ = 0, prefetch_wasted_ = 0;
};

}  // namespace strata::tiers
