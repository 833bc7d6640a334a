// The grammar as a lazily built byte-level DFA, and vocabulary masks per DFA state.
//
// A parse position is a pushdown stack of grammar positions (llama.cpp's grammar stacks). Stacks
// are interned as nodes {position, parent} so a stack is one id; a *configuration* is a stack
// whose top is a terminal plus the partial UTF-8 character read so far; a DFA *state* is an
// interned sorted set of configurations (id 0: the empty set, i.e. rejected). Each state has a
// 256-entry transition row filled on first use, so after warm-up advancing by a byte is one
// table load. A vocabulary mask walks the token trie (token_trie.hpp) in preorder, following one
// transition per trie edge and skipping the subtree of every dead edge; masks are cached per
// state. Nothing here allocates once the states a generation visits exist; new states (cache
// misses) allocate, and `max_states` bounds the memory: past it the states, transitions and
// masks are dropped (flush) and rebuilt on demand.
//
// Not thread-safe: one automaton serves any number of matchers on one thread at a time (e.g.
// every request with the same grammar, on the scheduler's thread); it may be built on another
// thread and handed over. The rule_set and token_trie it reads are immutable and may be shared.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "strata/grammar/detail/intern.hpp"
#include "strata/grammar/rule_set.hpp"
#include "strata/grammar/token_trie.hpp"

namespace strata::grammar {

struct automaton_options {
  std::size_t max_states = 16384;  // DFA states kept before a flush (1 KiB of transitions each)
  std::size_t mask_slots = 64;     // cached vocabulary masks (n_vocab / 8 bytes each)
};

struct automaton_stats {
  std::uint64_t masks_computed = 0;  // trie walks
  std::uint64_t mask_cache_hits = 0;
  std::uint64_t trie_nodes_visited = 0;
  std::uint64_t states_built = 0;
  std::uint64_t flushes = 0;
};

class automaton {
 public:
  using state_id = std::uint32_t;  // 0 = dead
  // A configuration: stack node id in the low 32 bits, partial UTF-8 character in the high 32
  // (bits 0-1 continuation bytes still expected, 2-4 sequence length, 5-25 value so far, or
  // all ones when the class accepts every completion). The value 0 is the empty stack: the
  // grammar is complete.
  using config = std::uint64_t;

  automaton(std::shared_ptr<const rule_set> rules, std::shared_ptr<const token_trie> trie,
            automaton_options opt = {})
      : rules_(std::move(rules)), trie_(std::move(trie)), opt_(opt) {
    elems_ = rules_->elements().data();
    nodes_.push_back({0, 0});  // node 0: the empty stack
    advanced_.push_back({detail::no_id, 0});
    depth_state_.resize(trie_->max_depth() + 1);
    reset_states();
    const rule& root = rules_->rules()[rules_->root()];
    for (const std::uint32_t a : root.alternatives) expand(a, 0, initial_);
    normalize(initial_);
  }

  const rule_set& rules() const noexcept { return *rules_; }
  const token_trie& trie() const noexcept { return *trie_; }
  const automaton_stats& stats() const noexcept { return stats_; }
  std::span<const config> initial_configs() const noexcept { return initial_; }

  // Generation of the state table: state ids from an earlier generation are void (see intern()).
  std::uint64_t generation() const noexcept { return generation_; }

  // Drops states if the table outgrew max_states. Call only between operations that hold state
  // ids (matchers do it before each step); ids held elsewhere are then void.
  void maybe_flush() {
    if (states_.size() <= opt_.max_states) return;
    ++stats_.flushes;
    reset_states();
  }

  state_id intern(std::span<const config> cfgs) {
    bool added = false;
    const std::uint32_t id = index_.intern(cfgs, added);
    if (added) {
      states_.push_back({detail::no_id});
      trans_.resize(trans_.size() + 256, detail::no_id);
      ++stats_.states_built;
    }
    return id;
  }
  std::span<const config> configs(state_id s) const noexcept { return index_.get(s); }

  // The grammar may end here: an end-of-generation token is allowed.
  bool accepting(state_id s) const noexcept {
    const auto c = configs(s);
    return !c.empty() && c.front() == 0;
  }
  // Some text can still follow.
  bool can_continue(state_id s) const noexcept {
    const auto c = configs(s);
    return c.size() > (accepting(s) ? 1u : 0u);
  }

  state_id step(state_id s, std::uint8_t b) {
    const std::uint32_t t = trans_[std::size_t(s) * 256 + b];
    return t != detail::no_id ? t : compute(s, b);
  }
  state_id advance(state_id s, std::string_view bytes) {
    for (const char c : bytes) {
      if (s == 0) return 0;
      s = step(s, static_cast<std::uint8_t>(c));
    }
    return s;
  }

  // Whether token t may come next.
  bool allows(state_id s, token_id t) {
    switch (trie_->kind(t)) {
      case token_kind::end_of_generation: return accepting(s);
      case token_kind::excluded: return false;
      case token_kind::text: break;
    }
    return advance(s, trie_->piece(t)) != 0;
  }

  // Bitset of the allowed tokens (bit t of word t / 64), mask_words() words. The pointer stays
  // valid until mask_slots further masks are computed or the table is flushed.
  const std::uint64_t* mask(state_id s) {
    if (states_[s].mask_slot != detail::no_id) {
      ++stats_.mask_cache_hits;
      return slot_data(states_[s].mask_slot);
    }
    const std::uint32_t slot = next_slot_;
    next_slot_ = (next_slot_ + 1) % static_cast<std::uint32_t>(opt_.mask_slots);
    if (slot_owner_[slot] != detail::no_id) states_[slot_owner_[slot]].mask_slot = detail::no_id;
    slot_owner_[slot] = s;
    states_[s].mask_slot = slot;
    std::uint64_t* words = slot_data(slot);
    compute_mask(s, words);
    return words;
  }
  std::size_t mask_words() const noexcept { return trie_->mask_words(); }

  // The walk behind mask(), uncached: bit t of words is set iff token t is allowed.
  void compute_mask(state_id s, std::uint64_t* words) {
    ++stats_.masks_computed;
    std::fill(words, words + mask_words(), 0);
    const auto set = [words](token_id t) { words[std::size_t(t) >> 6] |= std::uint64_t(1) << (t & 63); };
    if (accepting(s))
      for (const token_id t : trie_->end_of_generation()) set(t);
    const token_trie::node* nodes = trie_->node_data();
    const std::uint32_t n = static_cast<std::uint32_t>(trie_->nodes().size());
    const token_id* toks = trie_->tokens();
    std::uint32_t* ds = depth_state_.data();
    const std::uint32_t* trans = trans_.data();  // reloaded after compute(), which may grow it
    ds[0] = s;
    std::uint64_t visited = 0;
    for (std::uint32_t i = 1; i < n;) {
      const token_trie::node nd = nodes[i];
      ++visited;
      const std::uint32_t from = ds[nd.depth - 1];
      std::uint32_t to = trans[std::size_t(from) * 256 + nd.byte];
      if (to == detail::no_id) {
        to = compute(from, nd.byte);
        trans = trans_.data();
      }
      if (to == 0) {
        i = nd.end;
        continue;
      }
      ds[nd.depth] = to;
      for (std::uint32_t k = nd.first_token, e = nodes[i + 1].first_token; k < e; ++k) set(toks[k]);
      ++i;
    }
    stats_.trie_nodes_visited += visited;
  }

  std::size_t n_states() const noexcept { return states_.size(); }
  std::size_t n_stack_nodes() const noexcept { return nodes_.size(); }

 private:
  struct stack_node {
    std::uint32_t pos;     // element index: a terminal (top) or where to resume after a rule
    std::uint32_t parent;  // node below; 0 = bottom
  };
  struct state_info {
    std::uint32_t mask_slot;
  };

  void reset_states() {
    index_.clear();
    states_.clear();
    trans_.clear();
    intern({});  // state 0: dead
    std::fill(trans_.begin(), trans_.end(), 0);
    slot_owner_.assign(opt_.mask_slots, detail::no_id);
    masks_.assign(opt_.mask_slots * mask_words(), 0);
    next_slot_ = 0;
    ++generation_;
  }
  std::uint64_t* slot_data(std::uint32_t slot) noexcept { return masks_.data() + std::size_t(slot) * mask_words(); }

  std::uint32_t node(std::uint32_t pos, std::uint32_t parent) {
    const std::uint64_t key = std::uint64_t(pos) << 32 | parent;
    std::uint32_t id = node_index_.find(key);
    if (id == detail::no_id) {
      id = static_cast<std::uint32_t>(nodes_.size());
      nodes_.push_back({pos, parent});
      node_index_.insert(key, id);
      advanced_.push_back({detail::no_id, 0});
    }
    return id;
  }

  // All stacks with a terminal on top reachable from resuming at `pos` over `parent` without
  // reading a character (the empty stack when the root rule ends). Right recursion reuses the
  // parent (no frame is pushed when the reference is the last element), so `x ::= "a" x |`
  // runs in constant stack depth. Terminates because left recursion is rejected by the parser.
  void expand(std::uint32_t pos, std::uint32_t parent, std::vector<config>& out) {
    const element e = elems_[pos];
    if (e.kind == element_kind::chars) {
      out.push_back(node(pos, parent));
    } else if (e.kind == element_kind::end) {
      if (parent == 0) {
        out.push_back(0);
      } else {
        const stack_node p = nodes_[parent];
        expand(p.pos, p.parent, out);
      }
    } else {
      const std::uint32_t ret = elems_[pos + 1].kind == element_kind::end ? parent : node(pos + 1, parent);
      for (const std::uint32_t a : rules_->rules()[e.value].alternatives) expand(a, ret, out);
    }
  }

  static void normalize(std::vector<config>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }

  // Configurations after the terminal on top of stack `n` matched a whole character (memoized).
  void advanced(std::uint32_t n, std::vector<config>& out) {
    if (advanced_[n].begin == detail::no_id) {
      scratch2_.clear();
      const stack_node s = nodes_[n];
      expand(s.pos + 1, s.parent, scratch2_);
      normalize(scratch2_);
      advanced_[n] = {static_cast<std::uint32_t>(advanced_pool_.size()), static_cast<std::uint32_t>(scratch2_.size())};
      advanced_pool_.insert(advanced_pool_.end(), scratch2_.begin(), scratch2_.end());
    }
    const auto [b, len] = advanced_[n];
    out.insert(out.end(), advanced_pool_.begin() + b, advanced_pool_.begin() + b + len);
  }

  // One byte from one configuration, UTF-8 decoded incrementally (RFC 3629: overlong forms,
  // surrogates and code points above U+10FFFF are rejected). While a character is incomplete
  // the configuration survives only if its class holds a code point with the bytes read so far.
  void step_config(config c, std::uint8_t b, std::vector<config>& out) {
    const auto n = static_cast<std::uint32_t>(c);
    if (n == 0) return;  // complete grammar: nothing may follow
    const char_class& cls = rules_->classes()[elems_[nodes_[n].pos].value];
    auto partial = static_cast<std::uint32_t>(c >> 32);
    std::uint32_t rem = partial & 3, len = (partial >> 2) & 7, value = partial >> 5;
    if (value == covered && rem > 0) {  // every completion is a member: only count the bytes
      if ((b & 0xC0) != 0x80) return;
      if (--rem == 0) advanced(n, out);
      else out.push_back(n | std::uint64_t(rem | len << 2 | covered << 5) << 32);
      return;
    }
    if (rem == 0) {
      if (b < 0x80) {
        if (cls.contains(b)) advanced(n, out);
        return;
      }
      if (b >= 0xC2 && b <= 0xDF) len = 2;
      else if (b >= 0xE0 && b <= 0xEF) len = 3;
      else if (b >= 0xF0 && b <= 0xF4) len = 4;
      else return;  // continuation byte or invalid lead byte
      value = b & (0x7Fu >> len);
      rem = len - 1;
    } else {
      if ((b & 0xC0) != 0x80) return;
      value = value << 6 | (b & 0x3F);
      if (--rem == 0) {
        static constexpr std::uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (value < min_cp[len] || value > max_code_point || (value >= 0xD800 && value <= 0xDFFF)) return;
        if (cls.contains(value)) advanced(n, out);
        return;
      }
    }
    // Code points that start with the bytes read so far: [lo, hi], minus overlongs, surrogates
    // and > U+10FFFF.
    static constexpr std::uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    std::uint32_t lo = value << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    lo = std::max(lo, min_cp[len]);
    hi = std::min<std::uint32_t>(hi, max_code_point);
    if (lo > hi) return;
    const bool ok = (lo < 0xD800 && cls.intersects(lo, std::min<std::uint32_t>(hi, 0xD7FF))) ||
                    (hi > 0xDFFF && cls.intersects(std::max<std::uint32_t>(lo, 0xE000), hi));
    if (!ok) return;
    // When the class takes every completion and no later byte can make the sequence invalid
    // (after a lead byte E0, ED, F0 or F4 the second byte is restricted), the value no longer
    // matters: one canonical configuration per byte count instead of one per prefix value keeps
    // a permissive class from creating thousands of states per position.
    const bool restricted_next = rem == len - 1 && ((len == 3 && (value == 0 || value == 0xD)) ||
                                                    (len == 4 && (value == 0 || value == 4)));
    if (!restricted_next && cls.covers(lo, hi)) value = covered;
    out.push_back(n | std::uint64_t(rem | len << 2 | value << 5) << 32);
  }
  static constexpr std::uint32_t covered = 0x1FFFFF;  // partial value marker (no real prefix has it)

  [[gnu::noinline]] state_id compute(state_id s, std::uint8_t b) {
    scratch_.clear();
    for (const config c : configs(s)) step_config(c, b, scratch_);
    normalize(scratch_);
    const state_id t = scratch_.empty() ? 0 : intern(scratch_);
    trans_[std::size_t(s) * 256 + b] = t;
    return t;
  }

  std::shared_ptr<const rule_set> rules_;
  std::shared_ptr<const token_trie> trie_;
  automaton_options opt_;
  const element* elems_ = nullptr;

  std::vector<stack_node> nodes_;  // interned stacks; kept across flushes (configs name them)
  detail::key_index node_index_;
  struct span32 {
    std::uint32_t begin, size;
  };
  std::vector<span32> advanced_;  // per node: its advanced() result in advanced_pool_
  std::vector<config> advanced_pool_;
  std::vector<config> initial_;

  detail::sequence_index index_;     // state id -> configurations
  std::vector<state_info> states_;
  std::vector<std::uint32_t> trans_;  // [state * 256 + byte] -> state, no_id = not computed yet
  std::vector<std::uint64_t> masks_;  // mask_slots * mask_words()
  std::vector<std::uint32_t> slot_owner_;
  std::uint32_t next_slot_ = 0;
  std::uint64_t generation_ = 0;

  std::vector<config> scratch_, scratch2_;
  std::vector<std::uint32_t> depth_state_;
  automaton_stats stats_;
};

}  // namespace strata::grammar
