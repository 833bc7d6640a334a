// The sampler: llama.cpp's default chain as common_sampler_init builds it, i.e. the logit_bias
// sampler it always adds first, then the default sampler list with DRY, top-n-sigma, typical-p
// and XTC at their disabled defaults, then dist:
//   logit_bias -> penalties -> top_k -> top_p -> min_p -> temperature -> dist
// temperature <= 0 is greedy: argmax after logit_bias and penalties (the filters never drop the
// argmax), lowest id among ties. A token_constraint (a grammar) removes the tokens it does not
// allow after logit_bias and penalties, before the filters (constraint.hpp). Buffers are sized
// once in the constructor; sample() and accept() never allocate.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/sampling/candidates.hpp"
#include "strata/sampling/constraint.hpp"
#include "strata/sampling/dist.hpp"
#include "strata/sampling/greedy.hpp"
#include "strata/sampling/logit_bias.hpp"
#include "strata/sampling/min_p.hpp"
#include "strata/sampling/penalties.hpp"
#include "strata/sampling/rng.hpp"
#include "strata/sampling/sampler_params.hpp"
#include "strata/sampling/temperature.hpp"
#include "strata/sampling/top_k.hpp"
#include "strata/sampling/top_p.hpp"

namespace strata::sampling {

class sampler {
 public:
  // Validates `params` against n_vocab (strata::error naming the field) and resolves
  // default_seed to a random seed, readable afterwards through seed().
  sampler(sampler_params params, std::int32_t n_vocab)
      : params_((validate(params, n_vocab), std::move(params))),
        n_vocab_(n_vocab),
        buf_(static_cast<std::size_t>(n_vocab)),
        rng_(resolve_seed(params_.seed)),
        window_(penalties_active(params_) ? penalty_window(n_vocab, params_.repeat_last_n) : penalty_window()) {}

  // Copies (e.g. to fork a request) carry the RNG state and penalty window; last_candidates()
  // is rebased onto the copy's own buffer.
  sampler(const sampler& o)
      : params_(o.params_), n_vocab_(o.n_vocab_), buf_(o.buf_), rng_(o.rng_), window_(o.window_),
        last_(o.rebased_last(buf_)), selected_(o.selected_), constraint_stats_(o.constraint_stats_) {}
  sampler& operator=(const sampler& o) {
    if (this != &o) *this = sampler(o);
    return *this;
  }
  sampler(sampler&&) noexcept = default;  // vector moves keep their storage, so last_ stays valid
  sampler& operator=(sampler&&) noexcept = default;

  // Greedy with nothing that changes a logit (no bias, no penalties): the argmax of the raw
  // logits, which a backend can compute itself (rt::session::decode_argmax).
  bool plain_greedy() const noexcept {
    return is_greedy(params_) && params_.logit_bias.empty() && !penalties_active(params_);
  }

  // Next token for one logits row (n_vocab floats). Does not record the token: call accept()
  // with whatever the engine keeps, as llama.cpp's common_sampler_sample/accept split does.
  token_id sample(std::span<const float> logits) {
    check_row(logits);
    return sample_masked(logits, {});
  }

  // Next token among those `c` allows (throws strata::error if it allows none); see
  // constraint_mode for the two orders. The caller then advances `c` with the token.
  token_id sample(std::span<const float> logits, token_constraint& c,
                  constraint_mode mode = constraint_mode::mask_first) {
    check_row(logits);
    if (mode == constraint_mode::check_first) {
      const token_id t = sample_masked(logits, {});
      if (c.allows(t)) {
        ++constraint_stats_.accepted_first;
        return t;
      }
    }
    ++constraint_stats_.masked;
    const std::span<const std::uint64_t> mask = c.allowed();
    if (mask.size() * 64 < static_cast<std::size_t>(n_vocab_))
      throw error("sampling: constraint mask has " + std::to_string(mask.size()) + " words, expected " +
                  std::to_string((n_vocab_ + 63) / 64) + " for n_vocab = " + std::to_string(n_vocab_));
    return sample_masked(logits, mask);
  }

  // How often check_first kept the first draw vs. needed the mask (mask_first counts as masked).
  struct constraint_counts {
    std::uint64_t accepted_first = 0;
    std::uint64_t masked = 0;
  };
  const constraint_counts& constraint_stats() const noexcept { return constraint_stats_; }

 private:
  void check_row(std::span<const float> logits) const {
    if (logits.size() != static_cast<std::size_t>(n_vocab_))
      throw error("sampling: logits row has " + std::to_string(logits.size()) + " entries, expected n_vocab = " +
                  std::to_string(n_vocab_));
  }

  // Highest allowed logit, lowest id among ties; -1 when every allowed token is -inf or NaN.
  token_id masked_argmax(std::span<const float> logits, std::span<const std::uint64_t> mask) const noexcept {
    token_id best = -1;
    float best_l = -std::numeric_limits<float>::infinity();
    for (std::size_t w = 0; w < mask.size(); ++w) {
      for (std::uint64_t bits = mask[w]; bits != 0; bits &= bits - 1) {
        const std::size_t t = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        if (t >= logits.size()) break;
        if (logits[t] > best_l) {
          best_l = logits[t];
          best = static_cast<token_id>(t);
        }
      }
    }
    return best;
  }

  // Keeps the candidates whose id the mask allows (c in id order), preserving order.
  static void keep_allowed(candidates& c, std::span<const std::uint64_t> mask) noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < c.size; ++i)
      if (mask_allows(mask, c.data[i].id)) c.data[n++] = c.data[i];
    c.size = n;
    c.n_sorted = 0;
  }

  // sample() with an optional mask (empty: every token allowed).
  token_id sample_masked(std::span<const float> logits, std::span<const std::uint64_t> mask) {
    if (!mask.empty() && is_greedy(params_) && params_.logit_bias.empty() && window_.distinct().empty()) {
      const token_id best = masked_argmax(logits, mask);
      if (best < 0) throw error("sampling: the constraint allows no token with a finite logit");
      buf_[0] = {best, logits[static_cast<std::size_t>(best)], 1.0f};
      last_ = {buf_.data(), 1, 1};
      selected_ = 0;
      return best;
    }
    if (mask.empty() && is_greedy(params_) && params_.logit_bias.empty() && window_.distinct().empty()) {
      // Nothing changes a logit: argmax straight over the row, skipping the candidate copy.
      const token_id best = argmax(logits);
      if (!(logits[static_cast<std::size_t>(best)] > -std::numeric_limits<float>::infinity()))
        throw error("sampling: every token has logit -inf (all banned)");
      buf_[0] = {best, logits[static_cast<std::size_t>(best)], 1.0f};
      last_ = {buf_.data(), 1, 1};
      selected_ = 0;
      return best;
    }
    candidates c = fill(buf_, logits);
    apply_logit_bias(c, params_.logit_bias);
    window_.apply(c, params_.repeat_penalty, params_.frequency_penalty, params_.presence_penalty);
    if (!mask.empty()) {
      keep_allowed(c, mask);
      if (c.size == 0) throw error("sampling: the constraint allows no token");
    }
    std::size_t sel;
    if (is_greedy(params_)) {
      sel = greedy(c);
      if (c.data[sel].logit == -std::numeric_limits<float>::infinity())
        throw error("sampling: every token has logit -inf (all banned)");
      c.data[0] = c.data[sel];
      c.data[0].p = 1.0f;
      c.truncate(1);
      sel = 0;
    } else {
      top_k(c, params_.top_k);
      top_p(c, params_.top_p);
      min_p(c, params_.min_p);
      temperature(c, params_.temperature);
      sel = dist(c, rng_);
    }
    last_ = c;
    selected_ = sel;
    return c.data[sel].id;
  }

 public:
  // Records a token in the penalty window (generated tokens, and prompt tokens if the engine
  // wants them penalized as llama.cpp's server does). Throws for an id outside the vocabulary.
  void accept(token_id t) {
    if (t < 0 || t >= n_vocab_)
      throw error("sampling: accepted token " + std::to_string(t) + " is outside the vocabulary [0, " +
                  std::to_string(n_vocab_) + ")");
    window_.accept(t);
  }

  // Clears the penalty window and rewinds the RNG to seed(): the next samples replay.
  void reset() {
    window_.reset();
    rng_.reseed(rng_.seed());
    last_ = {};
    selected_ = 0;
  }

  // The set the last token was drawn from, p normalized over it (size 1, p = 1 when greedy),
  // and the index of the drawn token in it. Valid until the next sample().
  std::span<const token_data> last_candidates() const noexcept { return {last_.data, last_.size}; }
  std::size_t selected() const noexcept { return selected_; }

  const sampler_params& params() const noexcept { return params_; }
  std::uint64_t seed() const noexcept { return rng_.seed(); }
  std::int32_t n_vocab() const noexcept { return n_vocab_; }
  const penalty_window& penalties() const noexcept { return window_; }

 private:
  candidates rebased_last(std::vector<token_data>& to) const noexcept {
    if (last_.data == nullptr) return {};
    return {to.data() + (last_.data - buf_.data()), last_.size, last_.n_sorted};
  }

  sampler_params params_;
  std::int32_t n_vocab_;
  std::vector<token_data> buf_;  // [n_vocab] candidate storage reused by every sample()
  rng rng_;
  penalty_window window_;
  candidates last_;  // view into buf_ of the last sample()'s final set
  std::size_t selected_ = 0;
  constraint_counts constraint_stats_;
};

}  // namespace strata::sampling
