// The one stage implementation: graph::decoder<Arch, Backend> over a slice of the layers, for
// any backend that satisfies graph::backend. A backend joins the engine with a specialization of
// engine_backend (how to make and describe it) and a make_<name>_stage() that calls
// make_decoder_stage<Backend>; every architecture of arch/all.hpp is then instantiated for it.
#pragma once
#include <memory>
#include <string>

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
      : be_(traits::make(opt, s)),
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
  std::uint32_t step_granule() const noexcept override {
    if constexpr (requires { traits::step_granule(*be_); }) return traits::step_granule(*be_);
    else return 1;
  }

 private:
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
