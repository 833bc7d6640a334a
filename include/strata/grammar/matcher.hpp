// One generation's position in a grammar: which tokens may come next (per token or as a
// vocabulary bitset) and accepting the chosen one. It is the sampler's token_constraint:
//   grammar::matcher m(automaton);            // automaton.hpp: shared per grammar and vocabulary
//   token = sampler.sample(logits, m);        // mask_first, or constraint_mode::check_first
//   m.accept(token);
// A GPU backend needs only allowed() (n_vocab bits) uploaded per step. Copies are independent
// positions sharing the automaton (n > 1 choices). Constructing, copying and reset() touch only
// the matcher; every other call uses the automaton: keep those on one thread per automaton.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/utf8.hpp"
#include "strata/grammar/automaton.hpp"
#include "strata/grammar/gbnf.hpp"
#include "strata/sampling/constraint.hpp"

namespace strata::grammar {

class matcher final : public sampling::token_constraint {
 public:
  explicit matcher(std::shared_ptr<automaton> a) : a_(std::move(a)), none_(a_->mask_words(), 0) {
    configs_.reserve(64);  // a position rarely holds more stacks: accept() then never allocates
    reset();
  }

  // Back to the start of the grammar. Like the constructor, it does not touch the automaton
  // (the state is found on first use), so matchers may be made on any thread.
  void reset() {
    const auto init = a_->initial_configs();
    configs_.assign(init.begin(), init.end());
    gen_ = 0;
    ended_ = false;
  }

  bool allows(token_id t) override {
    if (t < 0 || t >= a_->trie().n_vocab() || ended_) return false;
    resolve();
    return a_->allows(state_, t);
  }

  std::span<const std::uint64_t> allowed() override {
    if (ended_) return none_;
    resolve();
    return {a_->mask(state_), a_->mask_words()};
  }

  // Advances by token t; throws grammar_error (naming the token and its text) if t is not
  // allowed here. An end-of-generation token ends the match: nothing is allowed afterwards.
  void accept(token_id t) {
    if (!allows(t)) {
      std::string what = "token " + std::to_string(t);
      if (t >= 0 && t < a_->trie().n_vocab())
        what += " '" + utf8::sanitize(a_->trie().piece(t)) + "'";
      throw grammar_error(what + (ended_ ? " after the end of the grammar" : " is not allowed by the grammar here"),
                          0, 0, "");
    }
    if (a_->trie().kind(t) == token_kind::end_of_generation) {
      ended_ = true;
      return;
    }
    set_state(a_->advance(state_, a_->trie().piece(t)));
  }

  // Advances by raw bytes (text the caller puts in the output itself, e.g. a forced prefix);
  // returns false and stays put if the grammar rejects them.
  bool accept_bytes(std::string_view bytes) {
    if (ended_) return false;
    resolve();
    const automaton::state_id s = a_->advance(state_, bytes);
    if (s == 0) return false;
    set_state(s);
    return true;
  }

  // The grammar may end here (an end-of-generation token is allowed).
  bool can_end() {
    resolve();
    return !ended_ && a_->accepting(state_);
  }
  // Nothing but the end can follow (a complete match that allows no more text), or it ended.
  bool finished() {
    resolve();
    return ended_ || !a_->can_continue(state_);
  }
  bool ended() const noexcept { return ended_; }
  // The automaton state of this position (for benchmarks and diagnostics).
  automaton::state_id state() {
    resolve();
    return state_;
  }
  const automaton& automaton_ref() const noexcept { return *a_; }

 private:
  // Re-finds the state id after the automaton dropped its table (its ids are per generation).
  void resolve() {
    a_->maybe_flush();
    if (gen_ != a_->generation()) {
      state_ = a_->intern(configs_);
      gen_ = a_->generation();
    }
  }
  void set_state(automaton::state_id s) {
    state_ = s;
    const auto c = a_->configs(s);
    configs_.assign(c.begin(), c.end());
  }

  std::shared_ptr<automaton> a_;
  std::vector<std::uint64_t> none_;  // the all-zero mask after the end
  std::vector<automaton::config> configs_;  // the position, kept to survive a flush
  automaton::state_id state_ = 0;
  std::uint64_t gen_ = 0;
  bool ended_ = false;
};

// GBNF text -> an automaton over `trie`'s vocabulary, ready for matchers. Throws grammar_error.
inline std::shared_ptr<automaton> compile_gbnf(std::string_view gbnf, std::shared_ptr<const token_trie> trie,
                                               const parse_options& popt = {}, automaton_options aopt = {}) {
  auto rules = std::make_shared<const rule_set>(parse_gbnf(gbnf, popt));
  return std::make_shared<automaton>(std::move(rules), std::move(trie), aopt);
}

}  // namespace strata::grammar
