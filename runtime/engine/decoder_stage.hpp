// The one stage implementation: graph::decoder<Arch, Backend> over a slice of the layers, for
// any backend that satisfies graph::backend. A backend joins the engine with a specialization of
// engine_backend (how to make and describe it) and a make_<name>_stage() that calls
// make_decoder_stage<Backend>; every architecture of arch/all.hpp is then instantiated for it.
#pragma once
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model_config.hpp"
#include "stage.hpp"
#include "strata/arch/all.hpp"
#include "strata/gguf/keys.hpp"
#include "strata/graph/decoder.hpp"

namespace strata::rt {

// Specialized per backend: static std::unique_ptr<Backend> make(const engine_options&, const
// layer_slice&) and
// static std::string describe(const Backend&); optionally startup_report(const Backend&),
// kernel_profile(const Backend&) and reset_kernel_profile(Backend&).
template <class Backend>
struct engine_backend;

template <class Arch, graph::backend Backend>
class decoder_stage final : public stage {
  using traits = engine_backend<Backend>;

 public:
  decoder_stage(const gguf::reader& r, const engine_options& opt, const layer_slice& s)
      : max_rows_(opt.n_batch), max_out_(opt.max_outputs ? opt.max_outputs : opt.n_batch), head_(s.head), embed_(s.embed),
        be_(traits::make(opt, s)),
        dec_(*be_, r,
             {.max_batch = opt.n_batch, .max_outputs = opt.max_outputs, .first_layer = s.first, .n_layers = s.count,
              .embed = s.embed, .head = s.head}),
        kv_(be_->make_kv(kv_config_for(dec_.hparams(), opt, dec_.n_layers()))) {}

  void forward(const graph::batch& b, const kv::block_table& kv, std::span<float> logits, std::span<const float> hidden_in,
               std::span<float> hidden_out, std::span<std::int32_t> argmax_out, std::span<float> embd_out) override {
    dec_.forward(b, kv, kv_, logits, hidden_in, hidden_out, argmax_out, embd_out);
  }
  std::string description() const override { return traits::describe(*be_); }
  std::string startup_report() const override {
    if constexpr (requires { traits::startup_report(*be_); }) return traits::startup_report(*be_);
    else return {};
  }
  std::vector<model::kernel_time> kernel_profile() const override {
    if constexpr (requires { traits::kernel_profile(*be_); }) return traits::kernel_profile(*be_);
    else return {};
  }
  void reset_kernel_profile() override {
    if constexpr (requires { traits::reset_kernel_profile(*be_); }) traits::reset_kernel_profile(*be_);
  }
  model::expert_cache_counters expert_cache() const override {
    if constexpr (requires { traits::expert_cache(*be_); }) return traits::expert_cache(*be_);
    else return {};
  }
  model::stream_counters streaming() const override {
    if constexpr (requires { traits::streaming(*be_); }) return traits::streaming(*be_);
    else return {};
  }
  model::stream_counters expert_streaming() const override {
    if constexpr (requires { traits::expert_streaming(*be_); }) return traits::expert_streaming(*be_);
    else return {};
  }
  model::disk_counters disk_tier() const override {
    if constexpr (requires { traits::disk_tier(*be_); }) return traits::disk_tier(*be_);
    else return {};
  }
  model::recording_counters step_recordings() const override {
    if constexpr (requires { traits::step_recordings(*be_); }) return traits::step_recordings(*be_);
    else return {};
  }
  model::handoff_counters handoffs() const override {
    if constexpr (requires { traits::handoffs(*be_); }) return traits::handoffs(*be_);
    else return {};
  }
  std::uint32_t step_granule() const noexcept override {
    if constexpr (requires { traits::step_granule(*be_); }) return traits::step_granule(*be_);
    else return 1;
  }
  void record_steps(const model::step_shapes& s, std::uint32_t n_ctx, const kv::block_table& kv) override {
    if constexpr (requires(Backend& be) {
                    be.record_only(true);
                    { be.can_record_ahead() } -> std::convertible_to<bool>;
                    be.step_rows(1u);
                  }) {
      be_->record_only(true);
      try {
        record_ahead(s, n_ctx, kv);
      } catch (...) {
        be_->record_only(false);
        throw;
      }
      be_->record_only(false);
    }
  }

 private:
  // One forward per form over placeholder tokens, with the backend recording and running nothing
  // (model::record_steps). In order of need, while the backend has room (can_record_ahead): the
  // decode steps of 1..max_seqs streams with every row out, short context and long, as logits
  // and as argmax ids; the gathered outputs of steps that also prefill; the prefill sizes.
  void record_ahead(const model::step_shapes& s, std::uint32_t n_ctx, const kv::block_table& kv) {
    const std::uint32_t tokens = std::min(s.max_tokens, max_rows_), seqs = std::max(1u, s.max_seqs);
    std::vector<std::uint32_t> sizes;  // the step sizes the decoder pads 1..tokens to
    for (std::uint32_t n = 1; n <= tokens; ++n) {
      const std::uint32_t r = std::min(be_->step_rows(n), max_rows_);
      if (sizes.empty() || sizes.back() != r) sizes.push_back(r);
    }
    if (sizes.empty()) return;
    const auto& hp = dec_.hparams();
    // Placeholders: never read or written (no inputs are written in record_only), only sized.
    const std::size_t logits_size = std::size_t(max_out_) * hp.n_vocab, hidden_size = std::size_t(max_rows_) * hp.n_embd;
    const std::unique_ptr<float[]> logits(head_ ? new float[logits_size] : nullptr);
    const std::unique_ptr<float[]> hidden(new float[hidden_size]);
    std::vector<std::int32_t> ids(max_out_);
    std::vector<std::int32_t> tok, pos;
    std::vector<std::uint32_t> seq;
    std::vector<std::uint8_t> want;
    // r rows; `multi`: each row its own sequence (mod seqs), or with `pairs` two sequences taking
    // turns (a prompt chunk beside decodes: some sequence has several rows, a form of its own in
    // the backends whose short steps fuse per-token work, e.g. Vulkan's own_rows); `late`:
    // positions at the end of the context (steps see a long one); `outs`: rows flagged for
    // output (the last ones; r: all).
    const auto step = [&](std::uint32_t r, bool multi, bool late, std::uint32_t outs, bool greedy, bool pairs = false) {
      if (!be_->can_record_ahead()) return false;
      tok.assign(r, 0), pos.resize(r), seq.resize(r), want.assign(r, 0);
      for (std::uint32_t t = 0; t < r; ++t) {
        seq[t] = multi ? t % (pairs ? 2 : seqs) : 0;
        const std::uint32_t p = multi ? 0 : t;
        pos[t] = std::int32_t(late && n_ctx > r ? n_ctx - r + p : p);
        want[t] = t + outs >= r;
      }
      const graph::batch b{tok, pos, seq, want};
      const std::span<float> lg = head_ && !greedy ? std::span<float>(logits.get(), logits_size) : std::span<float>{};
      const std::span<std::int32_t> am = head_ && greedy ? std::span<std::int32_t>(ids) : std::span<std::int32_t>{};
      dec_.forward(b, kv, kv_, lg, embed_ ? std::span<const float>{} : std::span<const float>(hidden.get(), hidden_size),
                   head_ ? std::span<float>{} : std::span<float>(hidden.get(), hidden_size), am, {});
      return true;
    };
    const bool several = seqs >= 2;
    for (const std::uint32_t r : sizes) {  // decodes: a row per stream, every row out
      if (r > seqs || r > max_out_) break;
      for (const bool late : {false, true})
        for (const bool greedy : {false, true})
          if (!step(r, r > 1, late, r, greedy)) return;
    }
    if (head_)  // the gathered outputs of steps that prefill beside decodes (any layers' part serves)
      for (const std::uint32_t o : sizes) {
        if (o > std::min(seqs, max_out_) || o >= sizes.back()) break;
        for (const bool greedy : {false, true})
          if (!step(sizes.back(), several, false, o, greedy)) return;
      }
    for (const std::uint32_t r : sizes)  // prompt steps: one sequence (its last token out), or several
      for (const bool multi : {false, true}) {
        if (multi && (!several || r < 2)) continue;
        for (const bool late : {false, true}) {
          if (!step(r, multi, late, head_ ? 1 : 0, false)) return;
          if (multi && r >= 3 && r <= 8 && r <= seqs && !step(r, true, late, head_ ? 1 : 0, false, true)) return;
        }
      }
  }

  std::uint32_t max_rows_ = 0, max_out_ = 0;  // the decoder's max_batch and max_outputs
  bool head_ = true, embed_ = true;
  std::unique_ptr<Backend> be_;  // the decoder keeps a reference: the backend never moves
  graph::decoder<Arch, Backend> dec_;
  typename Backend::kv_state kv_;
};

template <graph::backend Backend>
std::unique_ptr<stage> make_decoder_stage(const gguf::reader& r, const engine_options& opt, const layer_slice& s) {
  return arch::visit(r.get_string(gguf::keys::architecture), [&](auto a) -> std::unique_ptr<stage> {
    return std::make_unique<decoder_stage<decltype(a), Backend>>(r, opt, s);
  });
}

}  // namespace strata::rt
