// Vulkan-backed model: the same decoder<Arch> graph over gpu::backend, weights and KV cache
// resident on the GPU. Instantiated once per architecture in runtime/instantiate/vk_arch_*.cpp.
#pragma once
#include <memory>

#include "../vulkan/backend.hpp"
#include "model_config.hpp"
#include "step_bookkeeping.hpp"
#include "strata/graph/decoder.hpp"
#include "strata/runtime/engine.hpp"

namespace strata::rt {

template <class Arch>
class vulkan_model final : public model {
 public:
  vulkan_model(std::unique_ptr<gguf::file> f, const engine_options& opt)
      : file_(std::move(f)),
        opt_(checked(opt, Arch::load_hparams(file_->gguf()))),
        be_(std::make_unique<gpu::backend>(gpu::backend_options{opt.device, opt.gpu_profile, {}, opt.progress})),
        dec_(*be_, file_->gguf(), graph_options()),
        kv_(be_->make_kv(kv_config())) {}

  const arch::hparams& hparams() const noexcept override { return dec_.hparams(); }
  const gguf::reader& gguf() const noexcept override { return file_->gguf(); }
  const engine_options& options() const noexcept override { return opt_; }
  std::string backend_description() const override { return be_->description(); }
  std::string startup_report() const override {
    const auto& s = be_->startup();
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%u pipelines in %.0f ms (%u SPIR-V compiled, %u from cache); %.2f GiB of weights uploaded in %.0f ms",
                  s.pipelines, s.pipelines_ms, s.spirv_compiled, s.spirv_cached, double(s.weight_bytes) / double(1ull << 30),
                  s.upload_ms);
    return buf;
  }
  std::vector<kernel_time> kernel_profile() const override {
    std::vector<kernel_time> out;
    for (const auto& k : be_->profile()) out.push_back({k.label, k.total_ms, k.calls});
    return out;
  }
  void reset_kernel_profile() override { be_->reset_profile(); }
  kv::block_table& kv() noexcept override { return kv_.table(); }

  void forward_argmax(const graph::batch& b, std::span<std::int32_t> ids) override { step(b, {}, ids); }
  void forward(const graph::batch& b, std::span<float> logits) override { step(b, logits, {}); }

 private:
  void step(const graph::batch& b, std::span<float> logits, std::span<std::int32_t> ids) {
    steps_.before(kv_.table(), b);
    dec_.forward(b, kv_, logits, {}, {}, ids);
    steps_.after(kv_.table(), b);
  }

 private:
  static const engine_options& checked(const engine_options& opt, const arch::hparams& hp) {
    if (opt.n_gpu_layers >= 0 && std::uint32_t(opt.n_gpu_layers) < hp.n_layer)
      throw error("internal: -ngl " + std::to_string(opt.n_gpu_layers) + " splits the layers; use make_hybrid_model");
    return opt;
  }
  graph::decoder_options graph_options() const {
    return {.max_batch = opt_.n_batch, .max_ctx = context_size(Arch::load_hparams(file_->gguf()), opt_),
            .max_outputs = opt_.max_outputs};
  }
  kv::kv_config kv_config() const { return kv_config_for(dec_.hparams(), opt_, dec_.hparams().n_layer); }

  std::unique_ptr<gguf::file> file_;
  engine_options opt_;
  std::unique_ptr<gpu::backend> be_;
  graph::decoder<Arch, gpu::backend> dec_;
  gpu::kv_state kv_;
  step_bookkeeping steps_;
};

template <class Arch>
std::unique_ptr<model> make_vulkan_model(std::unique_ptr<gguf::file> f, const engine_options& opt) {
  return std::make_unique<vulkan_model<Arch>>(std::move(f), opt);
}

}  // namespace strata::rt
